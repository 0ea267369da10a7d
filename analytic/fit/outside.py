"""Device memory outside the caching allocator, fitted on published snapshots by source.

A snapshot of a training process (validation/outside.toml) gives what its allocator holds
(``torch.cuda.memory_reserved``) and what is free on the device (``cudaMemGetInfo``); the device's
memory (its hardware preset's HBM, the driver's total) less both is what the allocator cannot have:
the driver's reservation, the CUDA context, NCCL's buffers. It adds to a process's peak whatever the
count, so it is fitted as one figure per allocator, the mean with each source weighted equally, with
its standard error, the smallest and largest snapshot, and every snapshot predicted with its source
left out.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..core.errors import InputError
from ..core.units import Quantity, data
from ..core.values import as_quantity
from ..presets import hardware
from .cases import load

#: the allocator the snapshots are of: PyTorch's caching allocator prints both figures
ALLOCATOR = "pytorch"


def _reserved(case: dict) -> Quantity:
    """The allocator's reserved memory of a case: one figure, or the parts PyTorch prints from 2.1
    on (allocated, and reserved but unallocated), summed."""
    given = case["reserved"]
    parts = given if isinstance(given, list) else [given]
    if not parts or not all(isinstance(p, str) for p in parts):
        raise InputError(
            f"{case['id']}: reserved {given!r}; expected a memory ('76.80 GiB') or a list of them"
        )
    quantities = [as_quantity(f"{case['id']}: reserved", p) for p in parts]
    return sum(quantities[1:], quantities[0])


def snapshots(folder: Path) -> list[dict]:
    """The outside cases of a case folder (in whichever file): id, group (the source), hardware and
    outside (the preset's HBM less the reserved and the free memory)."""
    out = []
    for c in (c for c in load(folder)[0] if c["kind"] == "outside"):
        hbm = data(hardware(c["hardware"]).hbm)
        if hbm is None:
            raise InputError(f"{c['id']}: hardware {c['hardware']!r} has no HBM to subtract from")
        outside = (hbm - _reserved(c) - as_quantity(f"{c['id']}: free", c["free"])).to("byte")
        if outside.magnitude <= 0:
            raise InputError(
                f"{c['id']}: reserved and free memory add up to {c['hardware']}'s HBM or more; "
                "expected a snapshot of that hardware"
            )
        out.append(
            {"id": c["id"], "group": c["group"], "hardware": c["hardware"], "outside": outside}
        )
    return out


def fit(rows: list[dict]) -> tuple[Quantity, Quantity]:
    """(mean, its standard error): each source's snapshots averaged, then the sources; the error is
    the spread of the sources' means over the root of their number."""
    groups = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r["outside"].to("byte").magnitude)
    means = [sum(v) / len(v) for v in groups.values()]
    mean = sum(means) / len(means)
    spread = (
        math.sqrt(sum((m - mean) ** 2 for m in means) / (len(means) - 1))
        if len(means) > 1
        else math.nan
    )
    return Quantity(mean, "byte"), Quantity(spread / math.sqrt(len(means)), "byte")


def leave_one_source_out(rows: list[dict]) -> dict[str, Quantity]:
    """id → the mean fitted on the snapshots of every other source."""
    return {r["id"]: fit([o for o in rows if o["group"] != r["group"]])[0] for r in rows}


def summary(folder: Path) -> dict | None:
    """The fitted memory outside the allocator, or None with fewer than two sources: allocator,
    outside, its standard error, low and high (the smallest and largest snapshot), over how many
    snapshots and sources; memories in bytes."""
    rows = snapshots(folder)
    if len({r["group"] for r in rows}) < 2:
        return None  # one figure per allocator, checked with its source left out
    mean, stderr = fit(rows)
    values = [float(r["outside"].to("byte").magnitude) for r in rows]
    return {
        "allocator": ALLOCATOR,
        "outside": float(mean.magnitude),
        "stderr": float(stderr.magnitude),
        "low": min(values),
        "high": max(values),
        "count": len(rows),
        "sources": len({r["group"] for r in rows}),
    }
