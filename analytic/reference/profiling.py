"""The CPU profiler's record of every allocation and free, read as the most bytes live at once: the
CPU's counterpart of ``torch.cuda.max_memory_allocated``."""

from __future__ import annotations

from torch.profiler import ProfilerActivity, profile


def peak_live_bytes(fn) -> int:
    """Run ``fn()`` under the CPU profiler; the most bytes its allocations held at once beyond what was
    live when it started (frees of older tensors are not recorded)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = top = 0
    for e in events:
        live += e.nbytes()
        top = max(top, live)
    return top


__all__ = ["peak_live_bytes"]
