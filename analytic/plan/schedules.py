"""Pipeline schedules as the plan composes them: each schedule's catalogue bubble formula, floored
by the first microbatch's critical path; and the lazily evaluated Max/Min the compositions use."""

from __future__ import annotations

import sympy

from ..core.choices import SCHEDULES
from ..core.formula import Formula, composed
from ..core.values import choice, is_number
from ..formulas import formula


def lazy_max(*args):
    """sympy.Max, left unevaluated while symbols remain (deciding which argument is larger for all
    values of the symbols is slow and rarely possible; substituting numbers evaluates it)."""
    return sympy.Max(*args, evaluate=all(is_number(a) for a in args))


def lazy_min(*args):
    """sympy.Min, left unevaluated while symbols remain (see :func:`lazy_max`)."""
    return sympy.Min(*args, evaluate=all(is_number(a) for a in args))


#: schedule → its catalogue formula pipeline.bubble_time.<name> (interleaved: per-chunk times)
BUBBLE_FORMULAS = {"1f1b": "1f1b", "gpipe": "1f1b", "interleaved": "1f1b", "zb-h1": "zb_h1", "zb-h2": "zb_h2",
                   "dualpipe": "dualpipe"}


def at_least_critical_path(bubble: Formula, values: dict) -> Formula:
    """``bubble``, never below the first microbatch's critical path, which no schedule beats (the
    zero-bubble formulas need enough microbatches to reach zero)."""
    chain = formula("pipeline.bubble_time.critical_path").bind(values)
    return composed("bubble", lazy_max(bubble.expr, chain.expr), "s", bubble, chain)


def bubble_time(schedule: str, values: dict) -> Formula:
    """Bubble time of ``schedule`` with ``values`` of pp, vpp, microbatches, t_f, t_b, t_w, t_fb."""
    choice("schedule", schedule, SCHEDULES)
    return at_least_critical_path(formula(f"pipeline.bubble_time.{BUBBLE_FORMULAS[schedule]}").bind(values), values)
