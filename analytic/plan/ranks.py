"""Where the ranks of each axis sit and which link each axis's collectives use, for a numeric layout
without sympy.

Placement follows Megatron-Core's rank order, innermost first: tp, cp, dp, pp; the expert layers'
etp, ep, edp folded over tp·cp·dp. An axis whose group fits in a scale-up domain (a node, or an
NVL72-class rack of nodes) uses the scale-up link, one whose ranks are all in other domains the
scale-out link; one that spans both is "two-level"."""

from __future__ import annotations

from ..core.choices import AXES
from ..core.replay import to_sympy
from ..core.values import is_number


def axis_stride(lay, axis: str):
    """The distance in the rank order between neighbours of ``axis``'s groups, from the degrees of
    ``lay`` (a Layout, or a plan's sympy Degrees)."""
    # Megatron-Core's expert ranks, innermost first: etp, ep, edp (parallel_state's expert
    # RankGenerator, order "tp-ep-dp-pp")
    if axis == "ep":
        etp = getattr(lay, "etp", None)
        return lay.tp if etp is None else etp
    return {"tp": 1, "cp": lay.tp, "dp": lay.tp * lay.cp, "pp": lay.tp * lay.cp * lay.dp}[axis]


def link_kind(size, stride_, g) -> str:
    """ "scale-up", "scale-out" or "two-level" for a group of ``size`` ranks ``stride_`` apart on
    nodes of ``g`` GPUs ("symbolic" while that depends on free symbols)."""
    if not all(is_number(x) for x in (size, stride_, g)):
        if not is_number(g):
            return "symbolic"
        import sympy

        x = sympy.sympify(to_sympy(stride_))
        low = x.subs({s: 1 for s in x.free_symbols})  # degrees ≥ 1
        return "scale-out" if is_number(low) and low >= g else "symbolic"
    if size * stride_ <= g:
        return "scale-up"
    if stride_ >= g:
        return "scale-out"
    return "two-level"


def placement(layout, scale_up_domain) -> dict:
    """For each axis of ``layout``: its size, its stride in the rank order and the link it uses on
    scale-up domains of ``scale_up_domain`` GPUs."""
    out = {}
    for axis in AXES:
        size, s = getattr(layout, axis), axis_stride(layout, axis)
        out[axis] = {
            "size": size,
            "stride": s,
            "link": "-" if size == 1 else link_kind(size, s, scale_up_domain),
        }
    return out


__all__ = ["axis_stride", "link_kind", "placement"]
