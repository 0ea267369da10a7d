"""A plan's template: the same plan with every number a symbol, and the module compiled from it.

:func:`template` builds the plan of a :func:`~.structure.structure` with every number free — the
model's counts, the degrees, the batch, the hardware's and calibration's inputs — and the ZeRO stage,
recomputation policy and schedule as their indices. :func:`module_source` compiles its expressions
into the module :mod:`analytic.compiled` ships for the structure (scripts/compile_plans.py).
"""

from __future__ import annotations

import sympy

from ..errors import AnalyticError
from ..numeric import program, python_source
from ..symbols import keyword_of, sym
from . import memory
from .core import Plan
from .inputs import Inputs
from .layout import Layout
from .structure import (
    _BATCH,
    _CHOICES,
    _DEGREES,
    HARDWARE_INPUTS,
    MODEL_COUNTS,
    SEARCH_OUTPUTS,
    STAGE,
    structural_inputs,
)


def _free(value, keyword):
    """``keyword``'s symbol where ``value`` is a non-zero number; 0 stays 0 (the code tests it)."""
    return value if value is None or value == 0 else sym(keyword)


def template(inp: Inputs):
    """The Plan of ``inp``'s structure with every number free (see :func:`.structure.structure`)."""
    m, lay = inp.model, inp.layout
    model = m.replace(**{k: _free(getattr(m, k), k) for k in MODEL_COUNTS}, name=None)
    layout = Layout(**{k: sym(k) for k in _DEGREES if not (k == "ep" and not m.is_moe)},
                    **{k: sym(k) for k in _CHOICES}, sequence_parallel=lay.sequence_parallel, async_tp=lay.async_tp,
                    comm_sms=_free(lay.comm_sms, "comm_sms"), zero3_gather=lay.zero3_gather)
    plan = Plan(model, inp.hardware, layout, seq_len=sym("seq_len"), global_batch=sym("global_batch"),
                microbatch_size=sym("microbatch_size"), dtype=inp.dtype, flash_attention=inp.flash_attention,
                training_tokens=sym("tokens"),
                allow_cross_node_tp=inp.allow_cross_node_tp, grad_dtype=inp.grad_dtype, stack=inp.stack)
    t, present = plan._in, structural_inputs(inp)
    kept = {k: v for k, v in t.values.items() if k in {*model.inputs(), *_DEGREES, *_BATCH, "comm_sms"}}
    t.__dict__["values"] = {**kept, **{k: sym(k) for k in HARDWARE_INPUTS if present.get(k, True)}}
    return plan


def module_source(plan, structure_: str) -> str | None:
    """The source of the compiled module of ``plan``'s structure (:mod:`analytic.compiled`): its
    template's quantities, one stage's memory and search's outputs as straight-line functions; None
    for a structure whose memory cannot be modelled (the plan's own error says why)."""
    t = template(plan._in)
    quantities = {}
    for name in t.quantities():
        try:
            quantities[name] = t.expr(name)
        except AnalyticError:  # a quantity this structure cannot give: such a plan asks its expressions, which say why
            continue
    try:
        stage = memory.stage(t._in, sym(STAGE), t._activation_parts)
    except AnalyticError:
        return None
    lines = ['"""Compiled by scripts/compile_plans.py from the template of one plan structure; do not edit."""',
             "", f"STRUCTURE = {structure_!r}", ""]
    for fn, formulas in (("quantities", quantities), ("stage", stage),
                         ("search", {k: quantities[k] for k in SEARCH_OUTPUTS})):
        exprs = [f.expr for f in formulas.values()]
        if fn != "search":  # each quantity's domain: where its formulas hold
            exprs += [sympy.And(*(c for c, *_ in f.domain)) for f in formulas.values()]
        prog = program(exprs, input_names(exprs))
        lines += [f"{fn.upper()}_INPUTS = {prog.inputs!r}", f"{fn.upper()}_OUTPUTS = {tuple(formulas)!r}",
                  f"{fn.upper()}_UNITS = {tuple(str(f.unit) for f in formulas.values())!r}", "", "",
                  python_source(prog, fn), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def input_names(exprs) -> dict:
    """symbol → keyword for the free symbols of ``exprs``, sorted by keyword."""
    found = {s for e in exprs for s in sympy.sympify(e).free_symbols}
    return dict(sorted(((s, keyword_of(s)) for s in found), key=lambda kv: kv[1]))


__all__ = ["input_names", "module_source", "template"]
