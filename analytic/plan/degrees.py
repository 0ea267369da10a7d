"""A layout's degrees and discrete choices as numbers and conditions: what the plan's expressions
are written in. A numeric layout's degrees are exact Fractions (so that quotients stay exact) and
its conditions bools, without sympy; a layout with a symbol has sympy numbers, symbols and
conditions."""

from __future__ import annotations

from fractions import Fraction

from ..core import algebra
from ..core.choices import RECOMPUTE, SCHEDULES
from ..core.composition import cases
from ..core.formula import Formula
from ..core.terms import Term
from ..core.values import is_number
from ..formulas import formula
from .layout import DP_REGIMES, GATHERED_REGIMES, Layout, choice_indices


class Degrees:
    """A layout's degrees as exact numbers (``numeric``: Fractions) or sympy numbers and symbols,
    with its discrete choices as conditions: the ZeRO stage, and the recomputation policy and
    schedule by their index in RECOMPUTE / SCHEDULES (numbers, or symbols when the layout leaves
    them open)."""

    def __init__(self, layout: Layout, kind: str):
        #: a decided condition as this layout's conditions are: a bool, or sympy's true or false
        numeric = kind != "sympy"
        if kind == "number":
            number, self.condition = Fraction, bool
        elif kind == "term":  # a template's: its inputs as they are, other degrees exact
            number = lambda x: x if type(x) is Term else Fraction(x)  # noqa: E731
            self.condition = lambda c: c if type(c) is Term else bool(c)
        else:
            import sympy

            number = self.condition = sympy.sympify
        for k in ("tp", "pp", "dp", "cp", "ep", "vpp"):
            setattr(self, k, number(getattr(layout, k)))
        #: the expert layers' tensor parallel degree (the layout's etp, else tp)
        self.etp = self.tp if layout.etp is None else number(layout.etp)
        self.sequence_parallel, self.async_tp = layout.sequence_parallel, layout.async_tp
        self.ep_overlap = layout.ep_overlap
        self.per_tensor_gathers = layout.zero3_gather == "per-tensor"
        self.comm_sms = number(layout.comm_sms)
        self.zero, self.rc, self.schedule = (
            x if numeric else number(x) for x in choice_indices(layout).values()
        )
        modules = layout.recompute_modules
        #: condition: selective recomputation runs the attention core again (Megatron-Core's default
        #: module)
        self.core_recomputed = (
            self.recompute_is("selective")
            if not modules or "core_attn" in modules
            else self.condition(False)
        )
        #: condition: selective recomputation runs MLA's up-projections again
        self.up_proj_recomputed = (
            self.recompute_is("selective") if "mla_up_proj" in modules else self.condition(False)
        )
        #: conditions: selective recomputation runs the dense layers' MLPs, a layer's two norms and
        #: the routed experts' activation again
        self.mlp_recomputed, self.norms_recomputed, self.moe_act_recomputed = (
            self.recompute_is("selective") if name in modules else self.condition(False)
            for name in ("mlp", "layernorm", "moe_act")
        )
        self.gpus = self.tp * self.cp * self.pp * self.dp

    def zero3_gathers_per_microbatch(self, recomputed) -> Formula:
        """How often ZeRO-3 gathers each parameter per microbatch without a pipeline: forward and
        backward, and for per-tensor gathers under full recomputation again in the recomputed
        forward of the ``recomputed`` share of the layers
        (parallelism.dp.zero3_gathers_per_microbatch*, which say why)."""
        two = formula("parallelism.dp.zero3_gathers_per_microbatch")
        if not self.per_tensor_gathers:
            return two
        three = formula("parallelism.dp.zero3_gathers_per_microbatch_recomputed_per_tensor")
        mixed = three if recomputed == 1 else three * recomputed + two * (1 - recomputed)
        return cases("gathers", "", (mixed, self.recompute_is("full")), (two, True))

    def full_recomputed(self, recomputed) -> Formula:
        """The share of the forwards full recomputation runs again: ``recomputed`` (of the layers)
        under it, else 0."""
        return cases("full", "", (recomputed, self.recompute_is("full")), (0, True))

    def schedule_is(self, *names):
        """Condition: the schedule is one of ``names``."""
        return self.condition(
            algebra.Or(*(algebra.Eq(self.schedule, SCHEDULES.index(n)) for n in names))
        )

    def recompute_is(self, name: str):
        """Condition: the recomputation policy is ``name``."""
        index = RECOMPUTE.index(name)
        return (
            self.condition(self.rc == index) if is_number(self.rc) else algebra.Eq(self.rc, index)
        )

    def zero_at_least(self, stage: int):
        """Condition: ZeRO stage ≥ ``stage``."""
        return self.condition(algebra.Ge(self.zero, stage))

    @property
    def pipelined(self):
        """Condition: more than one pipeline stage."""
        return self.condition(algebra.Gt(self.pp, 1))

    def _conditions(self, regimes: tuple) -> tuple:
        """``regimes`` (:data:`~analytic.plan.layout.DP_REGIMES`) as (label, condition) pairs."""
        true = self.condition(True)
        piped = {
            True: self.pipelined,
            False: self.condition(algebra.Not(self.pipelined)),
            None: true,
        }
        return tuple(
            (
                label,
                self.condition(algebra.And(self.zero_at_least(zero) if zero else true, piped[p])),
            )
            for label, zero, p in regimes
        )

    @property
    def dp_regimes(self) -> tuple:
        """How the DP traffic of a step runs (:data:`~analytic.plan.layout.DP_REGIMES`): (label,
        condition), the first condition that holds wins."""
        return self._conditions(DP_REGIMES)

    @property
    def gathered_regimes(self) -> tuple:
        """Which catalogue formula counts ZeRO-3's unsharded copies: (name or None, condition)."""
        return self._conditions(GATHERED_REGIMES)


__all__ = ["Degrees"]
