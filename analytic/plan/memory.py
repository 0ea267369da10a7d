"""Stage 3a of a plan: memory per GPU — model states by ZeRO stage, ZeRO-3's unsharded copies, and
the activations the worst pipeline stage holds."""

from __future__ import annotations

import sympy

from ..errors import InputError
from ..formula import Formula, cases, composed
from ..formulas import formula
from ..schedules import lazy_max, lazy_min
from .inputs import Inputs
from .placement import replica_groups


def model_states(inp: Inputs, params: dict) -> dict:
    """weights, gradients, optimizer (sharded by the ZeRO stage over each replica group) and gathered
    (ZeRO-3's unsharded parameters and gradients)."""
    lay = inp.deg
    groups = [(local, size) for local, size, _ in replica_groups(inp, params)]
    copies = formula("pipeline.parameter_copies.dualpipe")
    parts = {}
    for part, sharded_from in (("weights", 3), ("gradients", 2), ("optimizer", 1)):
        total = None
        name = "gradients_fp32" if part == "gradients" and inp.grad_dtype == "fp32" else part
        for local, dp in groups:
            f = formula(f"memory.model_states.{name}").subs(params=local)
            f = cases(part, "byte", (f / dp, lay.zero_at_least(sharded_from)), (f, True))
            total = f if total is None else total + f
        if part in ("weights", "gradients"):  # DualPipe holds the parameters twice
            total = cases(part, "byte", (total * copies, lay.schedule_is("dualpipe")), (total, True))
        parts[part] = total
    # ZeRO-3's unsharded copies: a pipelined step holds its stage's parameters and gradients
    # from the first microbatch to the last backward; without a pipeline, blocks come and go
    stage = params["per_gpu"]
    one = inp.f("memory.zero3_held", params=stage)
    held = cases("held", "byte", (one * copies, lay.schedule_is("dualpipe")), (one, True))
    unit = stage / (sympy.sympify(inp.model.blocks) / lay.pp)  # one block's share
    value = {"memory.zero3_held": held, "memory.zero3_gathered": inp.f("memory.zero3_gathered", params=unit), None: 0}
    parts["gathered"] = cases("gathered", "byte", *((value[name], cond) for name, cond in lay.gathered_regimes))
    return parts


def layer_activations(inp: Inputs, ffn_hidden=None) -> Formula:
    """Bytes one layer keeps for its backward (flash attention: the Llama-style count; without it,
    Korthikanti's GPT layer, selective recomputation included)."""
    lay, m = inp.deg, inp.model
    kw = {"seq_len": inp.seq_len / lay.cp}
    if ffn_hidden is not None:
        kw["ffn_hidden"] = ffn_hidden
    if m.kv_heads != m.heads and not inp.flash_attention:
        raise InputError("flash_attention: the Korthikanti formulas assume multi-head attention; "
                         "use flash_attention=True for GQA models")
    if not inp.flash_attention and m.mlp != "gelu":
        raise InputError("flash_attention: the Korthikanti formulas assume a GELU MLP; use flash_attention=True")
    sp = "_sp" if lay.sequence_parallel else ""
    if inp.flash_attention:
        return inp.f(f"memory.activations.layer_flash_{m.mlp}{sp}", **kw)
    return cases("layer", "byte", (inp.f(f"memory.activations.layer_tp{sp}_selective", **kw), lay.recompute_is("selective")),
                 (inp.f(f"memory.activations.layer_tp{sp}", **kw), True))


def activations(inp: Inputs) -> dict:
    """layer, first (stage 0), last (the last stage, with the logits and MTP modules), logits, worst."""
    lay, m = inp.deg, inp.model
    layer = layer_activations(inp)
    if m.is_moe:  # a token's FFN activations across its k routed and shared experts
        moe_layer = layer_activations(inp, ffn_hidden=(m.topk + m.shared_experts) * m.expert_ffn_hidden)
        layer = composed("layer", lazy_max(layer.expr, moe_layer.expr), "byte", layer, moe_layer)
    # full recomputation keeps each layer's input and, while recomputing, one layer's activations
    s_kept = inp.seq_len / lay.cp / (lay.tp if lay.sequence_parallel else 1)
    kept = cases("kept", "byte", (inp.f("memory.activations.layer_full_recompute", seq_len=s_kept), lay.recompute_is("full")),
                 (layer, True))
    working = cases("working", "byte", (layer, lay.recompute_is("full")), (0, True))
    layers_on_stage = sympy.ceiling(sympy.sympify(m.layers) / lay.pp)
    p, mb = lay.pp, inp.microbatches

    def at_most_mb(*parts):  # the product of catalogue counts, never more than the step's microbatches
        return composed("in_flight", lazy_min(sympy.Mul(*(f.expr for f in parts)), mb), "", *parts)

    # microbatches whose activations stage 0 holds
    peak = lambda name: formula(f"pipeline.in_flight.{name}").bind({"pp": p})  # noqa: E731
    factor = formula("memory.activations.first_stage_interleaved_factor").bind({"pp": p, "vpp": lay.vpp})
    in_flight = cases("in_flight", "",
                      (mb, lay.schedule_is("gpipe")),
                      (at_most_mb(peak("1f1b"), factor), lay.schedule_is("interleaved")),
                      (at_most_mb(peak("1f1b")), lay.schedule_is("1f1b", "zb-h1")),
                      (at_most_mb(peak("zb_h2")), lay.schedule_is("zb-h2")),
                      (at_most_mb(peak("dualpipe")), True))
    first = kept * (layers_on_stage * in_flight) + working
    # the last stage also holds the MTP modules: a block and a logits tensor each
    last = kept * (layers_on_stage + m.mtp_modules) + working
    logits = inp.f("memory.logits", seq_len=inp.seq_len / lay.cp) / lay.tp
    last = last + logits * (1 + m.mtp_modules)
    worst = composed("activations", lazy_max(first.expr, last.expr), "byte", first, last)
    return {"layer": layer, "first": first, "last": last, "logits": logits, "worst": worst}
