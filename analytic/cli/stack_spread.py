"""The stack in plain sight: which software stack a plan is counted with, its fitted efficiency, and
the step the other stacks of the same platform predict for the same layout."""

from __future__ import annotations

from ..core.errors import AnalyticError
from ..presets import stack, stacks


def calibration_text(plan) -> str:
    """The plan's stack's name and fitted efficiency with its standard error and what pins it."""
    if plan.calibration is None:
        return f"stack {plan.stack}: its constants given"
    return stack_text(plan.stack)


def stack_text(name: str) -> str:
    """Stack ``name`` and its fitted efficiency with its standard error and what pins it (the fit's
    calibration file), or that no calibration file is found."""
    from ..presets import calibration

    try:
        cal = calibration(name)
    except AnalyticError:  # no calibration file
        return f"stack {name} ({stack(name)['name']}): no fitted efficiency found"
    pinned = (
        "pooled: no source of its family in the fit"
        if cal.pooled
        else f"fitted on the {cal.key} family"
    )
    return (
        f"stack {name} ({stack(name)['name']}): efficiency {cal.stack_efficiency:.3f} "
        f"± {cal.standard_error:.3f}, {pinned}"
    )


def spread(plan) -> dict[str, float]:
    """Step time in seconds of the same plan on each other stack that runs on the hardware's
    platform and runs this layout (those that refuse it left out)."""
    out = {}
    for name in stacks():
        if name == plan.stack or plan.hardware.platform not in stack(name).get("platforms", ()):
            continue
        try:
            out[name] = float(plan.replace(stack=name).step_time().to("s").magnitude)
        except AnalyticError:  # a schedule, ZeRO stage or dtype the stack does not run
            continue
    return out


def plan_of_row(ranked, model, hardware, seq_len: int, global_batch: int, search_kw: dict):
    """The Plan of a search's row, with the search's dtype and memory outside the allocator."""
    given = {k: v for k, v in search_kw.items() if k in ("dtype", "outside_bytes")}
    return ranked.plan(model, hardware, seq_len=seq_len, global_batch=global_batch, **given)


def spread_line(
    hardware, step_s: float, others: dict[str, float], what: str = "this layout"
) -> str:
    """The spread (:func:`spread`) of ``what`` as one line: the lowest and highest other stack
    against this one."""
    platform = hardware.platform
    if not others:
        return f"no other stack of {platform} runs {what}"
    low, high = min(others, key=others.get), max(others, key=others.get)
    return (
        f"on the other {len(others)} stacks of {platform} that run {what}: "
        f"{others[low]:.3g} s ({low}) to {others[high]:.3g} s ({high}), against {step_s:.3g} s here"
    )
