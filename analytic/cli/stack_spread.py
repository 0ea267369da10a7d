"""The stack in plain sight: which software stack a plan is counted with, its fitted efficiency, and the
step the other stacks of the same platform predict for the same layout."""

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
    pinned = "pooled: no source of its family in the fit" if cal.pooled else f"fitted on the {cal.key} family"
    return (f"stack {name} ({stack(name)['name']}): efficiency {cal.stack_efficiency:.3f} "
            f"± {cal.standard_error:.3f}, {pinned}")


def spread(plan) -> dict[str, float]:
    """Step time in seconds of the same plan on each other stack that runs on the hardware's platform and
    runs this layout (those that refuse it left out)."""
    out = {}
    for name in stacks():
        if name == plan.stack or plan.hardware.platform not in stack(name).get("platforms", ()):
            continue
        try:
            out[name] = float(plan.replace(stack=name).step_time().to("s").magnitude)
        except AnalyticError:  # a schedule, ZeRO stage or dtype the stack does not run
            continue
    return out


def spread_line(plan, step_s: float, others: dict[str, float]) -> str:
    """The spread as one line: the lowest and highest other stack against this one."""
    if not others:
        return f"no other stack of {plan.hardware.platform} runs this layout"
    low, high = min(others, key=others.get), max(others, key=others.get)
    return (f"on the other {len(others)} stacks of {plan.hardware.platform} that run this layout: "
            f"{others[low]:.3g} s ({low}) to {others[high]:.3g} s ({high}), against {step_s:.3g} s here")
