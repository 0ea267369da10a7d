"""The CPU profiler's record of every allocation and free, read as the most bytes live at once: the
CPU's counterpart of ``torch.cuda.max_memory_allocated``."""

from __future__ import annotations

from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile


def _nodes(nodes):
    for node in nodes:
        yield node
        yield from _nodes(node.children)


def live_bytes(fn) -> tuple[int, int]:
    """Run ``fn()`` under the CPU profiler: (the most bytes its allocations held at once, the bytes
    they still hold when it returns). A free counts only for a block allocated under this profile,
    matched by address; an address allocated again was freed before. A free made on a thread the
    profiler does not follow (a collective's worker thread) is not recorded, so its block reads as
    held until its address comes back."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((node.start_time_ns, node.typed[1].ptr, node.typed[1].alloc_size)
                    for node in _nodes(prof.profiler.kineto_results.experimental_event_tree())
                    if node.typed[0] == _EventType.Allocation)
    return fold(((ptr, size) for _, ptr, size in events))


def fold(events) -> tuple[int, int]:
    """(the most bytes held at once, the bytes held at the end) over ``(address, bytes)`` events in
    time order: an allocation (bytes > 0) or a free (bytes < 0), as :func:`live_bytes` reads
    them."""
    held: dict[int, int] = {}
    live = top = 0
    for ptr, size in events:
        if size > 0:
            live += size - held.pop(ptr, 0)
            held[ptr] = size
            top = max(top, live)
        elif ptr in held:
            live -= held.pop(ptr)
    return top, live


def peak_live_bytes(fn) -> int:
    """The first of :func:`live_bytes`: the most bytes ``fn()``'s allocations held at once."""
    return live_bytes(fn)[0]


__all__ = ["fold", "live_bytes", "peak_live_bytes"]
