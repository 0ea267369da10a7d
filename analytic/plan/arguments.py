"""A plan's keyword arguments: the hardware and calibration inputs a keyword may replace, the other
arguments, and how a value given for an input is read."""

from __future__ import annotations

import sys

from ..core.symbols import read_magnitude
from ..core.terms import Term
from ..core.values import is_sympy


def read(keyword: str, value):
    """An input in its symbol's unit and domain: an exact int or Fraction
    (:func:`~analytic.core.symbols.read_magnitude`), or for a sympy value or a Formula a sympy
    magnitude (:func:`analytic.core.formula.magnitude`)."""
    if type(value) is Term:  # a template's symbol: a magnitude in the symbol's unit
        return value
    formulas = sys.modules.get("analytic.core.formula")  # not imported: no value is a Formula
    if is_sympy(value) or (formulas is not None and isinstance(value, formulas.Formula)):
        from ..core.formula import magnitude

        return magnitude(keyword, value)
    return read_magnitude(keyword, value)


#: the hardware and calibration inputs a Plan keyword may replace
OVERRIDES = (
    "peak_flops", "peak_flops_16", "sms", "hbm", "outside_bytes", "scale_up_bandwidth",
    "scale_out_bandwidth", "gpus_per_node", "scale_up_domain", "scale_up_latency",
    "scale_out_latency", "scale_up_efficiency", "scale_out_efficiency", "matmul_efficiency",
    "matmul_efficiency_16", "stack_efficiency", "link_efficiency", "latency", "overlap",
    "interruption_rate", "routing_imbalance", "checkpoint_time", "restart_time",
    "checkpoint_write_time", "element_bytes", "loss_bytes", "hbm_bandwidth", "memory_efficiency",
    "attention_efficiency", "attention_factor", "tile_m", "tile_n", "comm_ctas"
)
ARGUMENTS = ("seq_len", "global_batch", "microbatch_size", "dtype", "batch_tokens",
             "flash_attention", "training_tokens", "allow_cross_node_tp", "grad_dtype",
             "moment_dtype", "stack", "profile", "optimizer", "fp8_recipe", "dispatcher",
             "bf16_layers", "expert_capacity", "pad_to_capacity")
#: the constants of the predictive model that come with the stack's calibration
CALIBRATED = ("stack_efficiency", "attention_factor")
