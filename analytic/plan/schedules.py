"""Pipeline schedules as the plan composes them: each schedule's catalogue bubble formula, floored
by the first microbatch's critical path."""

from __future__ import annotations

from ..core.algebra import Max
from ..core.choices import SCHEDULES
from ..core.composition import composed
from ..core.formula import Formula
from ..core.values import choice
from ..formulas import formula

#: schedule → its catalogue formula pipeline.bubble_time.<name> (interleaved: per-chunk times)
BUBBLE_FORMULAS = {
    "1f1b": "1f1b",
    "gpipe": "1f1b",
    "interleaved": "1f1b",
    "zb-h1": "zb_h1",
    "zb-h2": "zb_h2",
    "dualpipe": "dualpipe",
}


def at_least_critical_path(bubble: Formula, values: dict) -> Formula:
    """``bubble``, never below the first microbatch's critical path, which no schedule beats (the
    zero-bubble formulas need enough microbatches to reach zero)."""
    chain = formula("pipeline.bubble_time.critical_path").bind(values)
    return composed("bubble", Max(bubble.term, chain.term), "s", bubble, chain)


def bubble_time(schedule: str, values: dict) -> Formula:
    """Bubble time of ``schedule`` with ``values`` of pp, vpp, microbatches, t_f, t_b, t_w, t_fb."""
    choice("schedule", schedule, SCHEDULES)
    return at_least_critical_path(
        formula(f"pipeline.bubble_time.{BUBBLE_FORMULAS[schedule]}").bind(values), values
    )
