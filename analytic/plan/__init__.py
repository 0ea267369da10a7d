"""Plan: one training step of a model on hardware with a layout, every quantity composed from the
catalogue (:mod:`analytic.plan.core`), and layouts with their one validity check (:mod:`analytic.plan.layout`)."""

from ..choices import AXES, CONVENTIONS, RECOMPUTE, SCHEDULES, TRAINING_DTYPES, ZERO3_GATHERS, sequence_parallel_default
from .core import Memory, Plan
from .layout import (
    Layout,
    check_comm_sms,
    check_layout,
    check_sequence,
    divisors,
    regime,
    sequence_unit,
    tiles,
    training_dtype,
)

__all__ = ["AXES", "CONVENTIONS", "Layout", "Memory", "Plan", "RECOMPUTE", "SCHEDULES", "TRAINING_DTYPES",
           "ZERO3_GATHERS", "check_comm_sms", "check_layout", "check_sequence", "divisors", "regime", "sequence_parallel_default", "sequence_unit",
           "tiles", "training_dtype"]
