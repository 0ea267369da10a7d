"""The allocator's reserve: measured peak memory over the count, fitted on measured peaks by source.

A measured peak of a PyTorch run is its caching allocator's maximum reserved memory
(``torch.cuda.max_memory_reserved``): the tensors the count holds, plus the blocks the allocator
keeps cached or split, and the buffers and workspaces the count leaves out. Their ratio, one factor
per allocator, is fitted as the time model's constants are: on log(measured/counted), each source
weighted equally, with its standard error, and every peak predicted with its own source left out. A
peak measured as the allocator's maximum allocated memory (``torch.cuda.max_memory_allocated``,
``measure = "allocated"``) is the tensors alone: the count predicts it, and the reserve is not
fitted on it.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..core.errors import InputError
from ..core.values import as_quantity
from ..presets import stack
from .calibration import build_plan, memory_case_plan
from .cases import load

#: what a measured peak is: the allocator's maximum reserved memory (torch.cuda.max_memory_reserved,
#: the default) or its maximum allocated memory (torch.cuda.max_memory_allocated: the live tensors
#: alone)
MEASURES = ("reserved", "allocated")


def peaks(folder: Path) -> list[dict]:
    """The measured peaks of a case folder (its memory cases, in whichever file): id, group (the
    source), stack (the run's), allocator (the stack's), measure (:data:`MEASURES`), counted (the
    memory of the run's fullest stage) and ratio (measured peak / counted)."""
    every = load(folder)[0]
    cases = [c for c in every if c["kind"] == "memory"]
    runs = {c["id"]: c for c in every if c["kind"] == "predicted"}
    out = []
    for c in cases:
        plan = build_plan(memory_case_plan(c, runs))
        counted = plan.memory().total
        measure = c.get("measure", MEASURES[0])
        if measure not in MEASURES:
            raise InputError(
                f"{c['id']}: measure {measure!r}; expected one of {', '.join(MEASURES)}"
            )
        out.append(
            {
                "id": c["id"],
                "group": c["group"],
                "stack": plan.stack,
                "allocator": stack(plan.stack)["allocator"],
                "measure": measure,
                "counted": counted,
                "ratio": float((as_quantity(c["id"], c["published"]) / counted).to("").magnitude),
            }
        )
    return out


def reserved(rows: list[dict]) -> list[dict]:
    """The peaks measured as reserved memory: those the reserve is fitted on."""
    return [r for r in rows if r["measure"] == "reserved"]


def fit(rows: list[dict]) -> tuple[float, float]:
    """(factor, standard error of its log): the weighted mean of log(measured/counted), each
    source's peaks weighing 1 together; the error is the sandwich estimate clustered by source (a
    source's peaks share its stack and its way of measuring, so they are not independent)."""
    counts = {}
    for r in rows:
        counts[r["group"]] = counts.get(r["group"], 0) + 1
    mean = sum(math.log(r["ratio"]) / counts[r["group"]] for r in rows) / len(counts)
    clusters = {
        g: sum(math.log(r["ratio"]) - mean for r in rows if r["group"] == g) / n
        for g, n in counts.items()
    }
    return math.exp(mean), math.sqrt(sum(c * c for c in clusters.values())) / len(counts)


def leave_one_source_out(rows: list[dict]) -> dict[str, float]:
    """id → the factor fitted on the peaks of every other source."""
    return {r["id"]: fit([o for o in rows if o["group"] != r["group"]])[0] for r in rows}


def summary(folder: Path) -> dict | None:
    """The fitted reserve of a case folder's measured peaks, or None without any: the allocator, the
    reserve and its standard error (of the log), and the smallest and largest measured/predicted
    peak with each source left out of the fit, over how many peaks and sources, and the stacks whose
    runs they measured."""
    rows = reserved(peaks(folder))
    if not rows:
        return None
    allocators = {r["allocator"] for r in rows}
    if len(allocators) != 1 or len({r["group"] for r in rows}) < 2:
        return None  # one factor per allocator, checked with its source left out
    factor, stderr = fit(rows)
    loso = leave_one_source_out(rows)
    ratios = [r["ratio"] / loso[r["id"]] for r in rows]
    return {
        "allocator": allocators.pop(),
        "reserve": factor,
        "reserve_log_stderr": stderr,
        "low": min(ratios),
        "high": max(ratios),
        "count": len(rows),
        "sources": len({r["group"] for r in rows}),
        "stacks": sorted({r["stack"] for r in rows}),
    }
