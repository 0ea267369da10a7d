"""A layout's degrees and discrete choices as sympy numbers, symbols and conditions: what the plan's
expressions are written in."""

from __future__ import annotations

import sympy

from ..core.choices import RECOMPUTE, SCHEDULES
from ..core.formula import Formula, cases
from ..formulas import formula
from .layout import DP_REGIMES, GATHERED_REGIMES, Layout, choice_indices


class Degrees:
    """A layout's degrees as sympy numbers or symbols, with its discrete choices as conditions: the
    ZeRO stage, and the recomputation policy and schedule by their index in RECOMPUTE / SCHEDULES
    (sympy integers, or symbols when the layout leaves them open)."""

    def __init__(self, layout: Layout):
        for k in ("tp", "pp", "dp", "cp", "ep", "vpp"):
            setattr(self, k, sympy.sympify(getattr(layout, k)))
        self.sequence_parallel, self.async_tp = layout.sequence_parallel, layout.async_tp
        self.per_tensor_gathers = layout.zero3_gather == "per-tensor"
        self.comm_sms = sympy.sympify(layout.comm_sms)
        self.zero, self.rc, self.schedule = map(sympy.sympify, choice_indices(layout).values())
        modules = layout.recompute_modules
        #: condition: selective recomputation runs the attention core again (Megatron-Core's default module)
        self.core_recomputed = (self.recompute_is("selective") if not modules or "core_attn" in modules
                                else sympy.false)
        #: condition: selective recomputation runs MLA's up-projections again
        self.up_proj_recomputed = self.recompute_is("selective") if "mla_up_proj" in modules else sympy.false
        self.gpus = self.tp * self.cp * self.pp * self.dp

    def zero3_gathers_per_microbatch(self, recomputed) -> Formula:
        """How often ZeRO-3 gathers each parameter per microbatch without a pipeline: forward and
        backward, and for per-tensor gathers under full recomputation again in the recomputed forward
        of the ``recomputed`` share of the layers (parallelism.dp.zero3_gathers_per_microbatch*, which
        say why)."""
        two = formula("parallelism.dp.zero3_gathers_per_microbatch")
        if not self.per_tensor_gathers:
            return two
        three = formula("parallelism.dp.zero3_gathers_per_microbatch_recomputed_per_tensor")
        mixed = three if recomputed == 1 else three * recomputed + two * (1 - recomputed)
        return cases("gathers", "", (mixed, self.recompute_is("full")), (two, True))

    def full_recomputed(self, recomputed) -> Formula:
        """The share of the forwards full recomputation runs again: ``recomputed`` (of the layers) under it, else 0."""
        return cases("full", "", (recomputed, self.recompute_is("full")), (0, True))

    def schedule_is(self, *names):
        """Condition: the schedule is one of ``names``."""
        return sympy.Or(*(sympy.Eq(self.schedule, SCHEDULES.index(n)) for n in names))

    def recompute_is(self, name: str):
        """Condition: the recomputation policy is ``name``."""
        index = RECOMPUTE.index(name)
        if self.rc.is_number:
            return sympy.true if self.rc == index else sympy.false
        return sympy.Eq(self.rc, index)

    def zero_at_least(self, stage: int):
        """Condition: ZeRO stage ≥ ``stage``."""
        return sympy.Ge(self.zero, stage)

    @property
    def pipelined(self):
        """Condition: more than one pipeline stage."""
        return sympy.Gt(self.pp, 1)

    def _conditions(self, regimes: tuple) -> tuple:
        """``regimes`` (:data:`~analytic.plan.layout.DP_REGIMES`) as (label, condition) pairs."""
        piped = {True: self.pipelined, False: sympy.Not(self.pipelined), None: sympy.true}
        return tuple((label, (self.zero_at_least(zero) if zero else sympy.true) & piped[p]) for label, zero, p in regimes)

    @property
    def dp_regimes(self) -> tuple:
        """How the DP traffic of a step runs (:data:`~analytic.plan.layout.DP_REGIMES`): (label, condition),
        the first condition that holds wins."""
        return self._conditions(DP_REGIMES)

    @property
    def gathered_regimes(self) -> tuple:
        """Which catalogue formula counts ZeRO-3's unsharded copies: (name or None, condition)."""
        return self._conditions(GATHERED_REGIMES)


__all__ = ["Degrees"]
