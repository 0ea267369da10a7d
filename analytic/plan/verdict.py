"""Whether a plan fits: its count against the HBM, with what the stack's allocator reserves beyond
the count and what the process holds outside the allocator, both fitted on measurements
(calibration.toml [memory]: :func:`analytic.presets.memory_reserve`,
:func:`~analytic.presets.memory_outside`)."""

from __future__ import annotations

from ..core.choices import MEMORY_VERDICTS
from ..core.errors import PresetError
from ..core.units import Quantity
from ..presets import memory_outside, memory_reserve


def _allocator(plan) -> str:
    return plan._in.stack_properties["allocator"]


def allocator_peak(plan, stage: int | None) -> Quantity:
    """``memory.allocator_peak`` of the stage's count."""
    return plan._formula(
        "memory.allocator_peak",
        {},
        counted_bytes=plan.memory(stage).total,
        allocator_reserve=memory_reserve(_allocator(plan))["reserve"],
    )


def outside(plan) -> Quantity:
    """The memory outside the stack's allocator a process's peak holds: ``outside_bytes=`` where the
    plan is given it, else the snapshots' mean."""
    if "outside_bytes" in plan.overrides:
        return plan.memory().outside
    return memory_outside(_allocator(plan))["outside"]


def verdict(plan, stage: int | None) -> str:
    """One of :data:`MEMORY_VERDICTS` (:meth:`Plan.memory_verdict` says how)."""
    mem = plan.memory(stage)
    if not mem.fits:
        return MEMORY_VERDICTS[2]
    try:
        reserve, beyond = memory_reserve(_allocator(plan))["reserve"], outside(plan)
    except PresetError:
        return MEMORY_VERDICTS[0]
    peak = plan._formula("memory.device_peak", {}, counted_bytes=mem.total,
                         allocator_reserve=reserve, outside_bytes=beyond)
    return MEMORY_VERDICTS[0] if peak <= mem.hbm else MEMORY_VERDICTS[1]


def verdicts(memory, fits, hbm: float, allocator: str, outside_bytes=None):
    """:func:`verdict` of many layouts at once, as indices of :data:`MEMORY_VERDICTS` (a numpy
    array): ``memory`` their counts in bytes, ``fits`` whether each count and the least memory
    outside the allocator pass the HBM (``hbm``, bytes); the predicted peak with ``outside_bytes``
    outside the allocator (default the snapshots' mean). An allocator without a fitted reserve: the
    count decides."""
    import numpy as np

    from ..core.symbols import read_magnitude
    from ..formulas import formula

    try:
        reserve = float(memory_reserve(allocator)["reserve"])
        beyond = (
            float(memory_outside(allocator)["outside"].to("byte").magnitude)
            if outside_bytes is None
            else float(read_magnitude("outside_bytes", outside_bytes))
        )
    except PresetError:
        return np.where(fits, 0, 2)
    peak = formula("memory.device_peak").lambdify()(
        counted_bytes=memory, allocator_reserve=reserve, outside_bytes=beyond
    )
    return np.where(~np.asarray(fits), 2, np.where(peak <= hbm, 0, 1))


def interval(plan, stage: int | None) -> tuple[Quantity, Quantity]:
    """``memory.allocator_peak`` times the smallest and largest measured/predicted peak, each source
    left out of the reserve's fit."""
    fitted, peak = memory_reserve(_allocator(plan)), allocator_peak(plan, stage)
    return peak * fitted["low"], peak * fitted["high"]
