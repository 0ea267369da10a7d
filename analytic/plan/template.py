"""A plan's template: the same plan with every number an input term, and the programs built from it.

:func:`template` builds the plan of a :func:`~.structure.structure` with every number an input
(:func:`~analytic.core.terms.input_`) — the model's counts, the degrees, the batch, the hardware's
and calibration's inputs — and the ZeRO stage, recomputation policy and schedule as their indices;
its formulas compose on terms. :func:`build` lowers their terms (:mod:`analytic.core.term_lowering`,
no sympy) to the programs every numeric plan of the structure is evaluated with (:mod:`.programs`).
"""

from __future__ import annotations

from ..core.composition import _all
from ..core.errors import AnalyticError
from ..core.provenance import source_map
from ..core.term_lowering import programs
from ..core.terms import input_
from ..core.values import is_sympy
from . import memory
from .layout import Layout
from .structure import (
    _BATCH,
    _CHOICES,
    _DEGREES,
    COUNTS_AT_ONE,
    HARDWARE_INPUTS,
    MODEL_COUNTS,
    SEARCH_OUTPUTS,
    STAGE,
    structural_inputs,
)


def _free(value, keyword):
    """``keyword``'s input where ``value`` is a non-zero number; 0 stays 0, and 1 stays 1 where the
    structure says so (:data:`~.structure.COUNTS_AT_ONE`): the code tests them."""
    kept = value is None or value == 0 or (keyword in COUNTS_AT_ONE and value == 1)
    return value if kept else input_(keyword)


def template(plan):
    """The plan (of ``plan``'s class) of ``plan``'s structure with every number an input term (see
    :func:`.structure.structure`)."""
    inp = plan._in
    m, lay = inp.model, inp.layout
    model = m.replace(**{k: _free(getattr(m, k), k) for k in MODEL_COUNTS}, name=None)
    degrees = {k: input_(k) for k in (*_DEGREES, *_CHOICES) if not (k == "ep" and not m.is_moe)}
    if m.is_hybrid:  # the stages hold the pattern's layers their number gives them
        degrees["pp"] = lay.pp
    layout = Layout(**degrees, sequence_parallel=lay.sequence_parallel, async_tp=lay.async_tp,
                    etp=None if lay.etp is None else input_("etp"),
                    comm_sms=_free(lay.comm_sms, "comm_sms"), zero3_gather=lay.zero3_gather,
                    ends_as_layers=lay.ends_as_layers, ep_overlap=lay.ep_overlap)
    batch = {k: input_(k) for k in _BATCH}
    plan = type(plan)(model, inp.hardware, layout, **batch, dtype=inp.dtype,
                      flash_attention=inp.flash_attention, training_tokens=input_("tokens"),
                      allow_cross_node_tp=inp.allow_cross_node_tp, grad_dtype=inp.grad_rule,
                      moment_dtype=inp.moment_dtype, stack=inp.stack, fp8_recipe=inp.fp8_recipe,
                      optimizer=inp.optimizer, dispatcher=inp.dispatcher,
                      bf16_layers=inp.bf16_layers, expert_capacity=inp.expert_capacity,
                      pad_to_capacity=inp.pad_to_capacity)
    t, present = plan._in, structural_inputs(inp)
    own = {*model.inputs(), *_DEGREES, *_BATCH, "etp", "comm_sms"}
    kept = {k: v for k, v in t.values.items() if k in own}
    hardware = {k: input_(k) for k in HARDWARE_INPUTS if present.get(k, True)}
    t.__dict__["values"] = {**kept, **hardware}
    return plan


def build(plan) -> dict | None:
    """The programs of ``plan``'s structure as JSON data (:class:`.programs.Bundle`): its template's
    quantities, one stage's memory, search's outputs and the conditions of the quantities' sources;
    None for a structure whose memory cannot be modelled (the plan's own error says why)."""
    t = template(plan)
    quantities = {}
    for name in t.quantities():
        try:
            quantities[name] = t.expr(name)
        except AnalyticError:  # one this structure cannot give: such a plan's expressions say why
            continue
    try:
        stage = memory.stage(t._in, input_(STAGE), t._activation_parts)
    except AnalyticError:
        return None
    parts = {"quantities": quantities, "stage": stage,
             "search": {k: quantities[k] for k in SEARCH_OUTPUTS}}
    groups = []
    for part, formulas in parts.items():
        exprs = [_data(name, f.term) for name, f in formulas.items()]
        if part != "search":  # each quantity's domain: where its formulas hold
            exprs += [_all(*(c for c, *_ in f.raw_domain)) for f in formulas.values()]
        groups.append(exprs)
    # each quantity's sources (by index in names): those it always draws on, and the others each
    # with a condition, by (index of the quantity, index of the source)
    maps = [source_map(f, data=True) for f in quantities.values()]
    names = sorted({s for m in maps for s in m})
    index = {s: i for i, s in enumerate(names)}
    conditional = {(q, index[s]): c for q, m in enumerate(maps)
                   for s, c in sorted(m.items()) if c is not True}
    *lowered, conditions = programs([*groups, list(conditional.values())])
    out = {part: {"program": prog.to_json(), "outputs": list(formulas),
                  "units": [str(f.unit) for f in formulas.values()]}
           for (part, formulas), prog in zip(parts.items(), lowered)}
    out["sources"] = {
        "names": names,
        "fixed": [[index[s] for s, c in sorted(m.items()) if c is True] for m in maps],
        "conditional": [list(k) for k in conditional],
        "program": conditions.to_json() if conditional else None}
    return out


def _data(name: str, term):
    """A template quantity's term; an AnalyticError where it is not one (a sympy expression)."""
    if is_sympy(term):
        raise AnalyticError(f"{name}: the template holds a sympy expression, not a term")
    return term


__all__ = ["build", "template"]
