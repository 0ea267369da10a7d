"""Plan: one training step of a model on hardware with a layout, every quantity composed from the
catalogue (:mod:`analytic.plan.core`), and layouts with their one validity check
(:mod:`analytic.plan.layout`).

Layouts and their checks import neither sympy nor the catalogue; ``Plan`` and ``Memory`` are
imported from their modules when first used."""

import importlib

from ..core.choices import (
    AXES,
    CONVENTIONS,
    RECOMPUTE,
    SCHEDULES,
    TRAINING_DTYPES,
    ZERO3_GATHERS,
    sequence_parallel_default,
)
from .layout import (
    Layout,
    check_comm_sms,
    check_layout,
    check_offload,
    check_sequence,
    dispatcher_of,
    divisors,
    ep_overlap_refusal,
    fp8_recipe_of,
    hybrid_pipeline_refusal,
    hybrid_refusal,
    optimizer_refusal,
    quantized_zero_refusal,
    regime,
    selective_refusal,
    sequence_unit,
    stack_refusal,
    tiles,
    training_dtype,
)

#: public name → the module that defines it, imported when the name is first used
_LAZY = {"Memory": "core", "Plan": "core"}

__all__ = [
    "AXES",
    "CONVENTIONS",
    "Layout",
    "Memory",
    "Plan",
    "RECOMPUTE",
    "SCHEDULES",
    "TRAINING_DTYPES",
    "ZERO3_GATHERS",
    "check_comm_sms",
    "check_layout",
    "check_offload",
    "check_sequence",
    "dispatcher_of",
    "divisors",
    "ep_overlap_refusal",
    "fp8_recipe_of",
    "hybrid_pipeline_refusal",
    "hybrid_refusal",
    "optimizer_refusal",
    "quantized_zero_refusal",
    "regime",
    "selective_refusal",
    "stack_refusal",
    "sequence_parallel_default",
    "sequence_unit",
    "tiles",
    "training_dtype",
]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
