"""An event simulation of one rank's two CUDA streams under FSDP (ZeRO-3, no pipeline): a compute
stream running each block's forward and backward, and a communication stream running, in order,
each block's parameter all-gather (again before its backward) and, after its backward, its gradient
reduce-scatter (plain Python, no torch).

The streams follow FSDP's prefetch: a block's gather may start once the compute of the block before
it has started (one block ahead), its forward or backward waits for its gather, and a reduce-scatter
waits for its block's backward. While the communication stream runs, the compute stream runs on
the SMs the collective's kernel leaves it, at ``1 − ctas/sms`` of its rate (NCCL's CTAs do not
share an SM with compute kernels: NVIDIA/nccl issue 689); a collective's time is its own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    stream: str  # "compute" (seconds at the full rate) or "comm" (seconds)
    name: str
    seconds: float
    after_started: str | None = None  # may start once this task has started
    after_done: tuple = ()  # may start once these tasks are done


def fsdp_tasks(blocks: int, microbatches: int, forward: float, backward: float, gather: float,
               reduce_scatter: float) -> list:
    """The two streams' tasks, in each stream's order, for ``microbatches`` passes over ``blocks``
    equal blocks (a block's ``forward`` and ``backward`` compute, its ``gather`` and
    ``reduce_scatter``)."""
    comp, comm = [], []
    for j in range(microbatches):
        order = [(f"F{j}.{i}", forward, f"G{j}.{i}") for i in range(blocks)]
        order += [(f"B{j}.{i}", backward, f"g{j}.{i}") for i in reversed(range(blocks))]
        pending = None  # the reduce-scatter of the last backward: issued after the next gather
        for n, (name, seconds, gathered) in enumerate(order):
            previous = order[n - 1][0] if n else (comp[-1].name if comp else None)
            comp.append(Task("compute", name, seconds, after_done=(gathered,)))
            comm.append(Task("comm", gathered, gather, after_started=previous))
            if pending:
                comm.append(pending)
            if name.startswith("B"):  # the gradient leaves once the block's backward is done
                pending = Task("comm", f"R{j}.{name[1:]}", reduce_scatter, after_done=(name,))
        comm.append(pending)
    return comp + comm


def simulate(tasks: list, ctas: int, sms: int) -> float:
    """The makespan of ``tasks`` (:func:`fsdp_tasks`) on a compute and a communication stream,
    the compute slowed to ``1 − ctas/sms`` while a collective runs."""
    queues = {s: [t for t in tasks if t.stream == s] for s in ("compute", "comm")}
    started, done, now = set(), set(), 0.0
    left = {s: None for s in queues}  # the running task and its remaining seconds

    def ready(task):
        return (task.after_started is None or task.after_started in started) and all(
            d in done for d in task.after_done
        )

    while any(queues.values()) or any(left.values()):
        for s, q in queues.items():
            if left[s] is None and q and ready(q[0]):
                task = q.pop(0)
                started.add(task.name)
                left[s] = [task, task.seconds]
        if not any(left.values()):
            raise ValueError("streams: a task waits on one that never runs")
        rate = {"comm": 1.0, "compute": 1 - ctas / sms if left["comm"] else 1.0}
        step = min(r[1] / rate[s] for s, r in left.items() if r)
        now += step
        for s, r in left.items():
            if r:
                r[1] -= step * rate[s]
                if r[1] <= 1e-12 * max(1.0, r[0].seconds):
                    done.add(r[0].name)
                    left[s] = None
    return now


__all__ = ["Task", "fsdp_tasks", "simulate"]
