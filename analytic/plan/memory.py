"""Stage 3a of a plan: memory per GPU on each pipeline stage — model states by ZeRO stage, ZeRO-3's
unsharded copies, the activations the stage holds at its peak — and the worst stage."""

from __future__ import annotations

import sympy

from ..choices import MEMORY_PARTS as PARTS
from ..errors import InputError
from ..formula import Formula, cases, composed
from ..formulas import formula
from ..numeric import value_at_max
from ..schedules import lazy_max, lazy_min
from .inputs import Inputs
from .placement import replica_groups


def model_states(inp: Inputs, params: dict) -> dict:
    """weights, gradients, optimizer (sharded by the ZeRO stage over each replica group) and gathered
    (ZeRO-3's unsharded parameters and gradients) of a stage whose parameters per GPU are ``params``
    (:func:`stage_params`)."""
    lay = inp.deg
    groups = [(local, size) for local, size, _ in replica_groups(inp, params)]
    copies = formula("pipeline.parameter_copies.dualpipe")
    parts = {}
    for part, sharded_from in (("weights", 3), ("gradients", 2), ("optimizer", 1)):
        total = None
        name = "optimizer_bf16_moments" if part == "optimizer" and inp.moment_dtype == "bf16" else part
        for local, dp in groups:
            f = formula(f"memory.model_states.{name}").subs(params=local)
            if part == "gradients":
                f = cases(part, "byte", (formula("memory.model_states.gradients_fp32").subs(params=local), inp.fp32_grads),
                          (f, True))
            f = cases(part, "byte", (f / dp, lay.zero_at_least(sharded_from)), (f, True))
            total = f if total is None else total + f
        if part in ("weights", "gradients"):  # DualPipe holds the parameters twice
            total = cases(part, "byte", (total * copies, lay.schedule_is("dualpipe")), (total, True))
        parts[part] = total
    # ZeRO-3's unsharded copies: a pipelined step holds its stage's parameters and gradients
    # from the first microbatch to the last backward; without a pipeline, blocks come and go
    stage = params["per_gpu"]
    fp32 = inp.fsdp_reduce_dtype == "fp32"  # FSDP2 accumulates unsharded gradients in it
    one = inp.f("memory.zero3_held_fp32_gradients" if fp32 else "memory.zero3_held", params=stage)
    held = cases("held", "byte", (one * copies, lay.schedule_is("dualpipe")), (one, True))
    unit = stage / params["blocks"]  # one block's share
    value = {"memory.zero3_held": held, "memory.zero3_gathered": inp.f("memory.zero3_gathered", params=unit), None: 0}
    parts["gathered"] = cases("gathered", "byte", *((value[name], cond) for name, cond in lay.gathered_regimes))
    return parts


def layer_activations(inp: Inputs, ffn_hidden=None) -> Formula:
    """Bytes one layer keeps for its backward (flash attention: the Llama-style count, TorchTitan's
    op-level selective policy where the stack's; without it, Korthikanti's GPT layer, selective
    recomputation included)."""
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
        layer = inp.f(f"memory.activations.layer_flash_{m.mlp_formulas}{sp}", **kw)
        if inp.selective != "op":  # a fused kernel recomputes the attention core anyway: nothing more is saved
            return layer
        op = inp.f(f"memory.activations.layer_flash_swiglu_op_sac{sp}", **kw)
        return cases("layer", "byte", (op, lay.recompute_is("selective")), (layer, True))
    return cases("layer", "byte", (inp.f(f"memory.activations.layer_tp{sp}_selective", **kw), lay.recompute_is("selective")),
                 (inp.f(f"memory.activations.layer_tp{sp}", **kw), True))


def stage_layers(inp: Inputs) -> tuple:
    """(first, middle, last) stages' layer counts: the layout's uneven split, or ⌈L/p⌉ each (where p
    does not divide L some stage holds that many, and the stages are counted as the fullest)."""
    lay, layers = inp.deg, inp.model.layers
    first, last = inp.layout.first_stage_layers, inp.layout.last_stage_layers
    given = [x for x in (first, last) if x is not None]
    middle = sympy.ceiling(sympy.sympify(layers - sum(given)) / (lay.pp - len(given)))
    return (middle if first is None else sympy.Integer(first), middle,
            middle if last is None else sympy.Integer(last))


def stage_params(inp: Inputs, k) -> dict:
    """Parameters per GPU of stage ``k`` (a number or expression): its layers, with the embedding on
    the first stage and the output layer, final norm and MTP modules on the last
    (:meth:`~analytic.model.Model.stage_params_formulas`), split over TP and routed experts over EP."""
    lay, m = inp.deg, inp.model
    first_n, middle, last_n = stage_layers(inp)
    is_first, is_last = sympy.Eq(k, 0), sympy.Eq(k, lay.pp - 1)
    layers = sympy.Piecewise((first_n, is_first), (last_n, is_last), (middle, True))
    start = sympy.Piecewise((0, is_first), (first_n + (k - 1) * middle, True))
    rest, experts = m.stage_params_formulas(start, layers, is_first, is_last)
    dense_local, expert_local = rest / lay.tp, experts / (lay.tp * lay.ep)
    return {"dense_local": dense_local, "expert_local": expert_local, "per_gpu": dense_local + expert_local,
            "layers": layers, "blocks": layers + sympy.Piecewise((m.mtp_modules, is_last), (0, True)),
            "first": is_first, "last": is_last}


def activation_parts(inp: Inputs) -> dict:
    """layer (one layer's activations), kept (what each layer keeps: all of them, or its input under
    full recomputation), working (one layer's while it is recomputed), logits (one microbatch's),
    loss (the loss's working set at its peak, the logits included) and input (a layer's input)."""
    lay, m = inp.deg, inp.model
    layer = layer_activations(inp)
    if m.is_moe:  # a token's FFN activations across its k routed and shared experts
        moe_layer = layer_activations(inp, ffn_hidden=(m.topk + m.shared_experts) * m.expert_ffn_hidden)
        layer = composed("layer", lazy_max(layer.expr, moe_layer.expr), "byte", layer, moe_layer)
    # full recomputation keeps each layer's input and, while recomputing, one layer's activations
    s_kept = inp.seq_len / lay.cp / (lay.tp if lay.sequence_parallel else 1)
    layer_input = inp.f("memory.activations.layer_full_recompute", seq_len=s_kept)
    kept = cases("kept", "byte", (layer_input, lay.recompute_is("full")), (layer, True))
    working = cases("working", "byte", (layer, lay.recompute_is("full")), (0, True))
    logits, loss = (inp.f(name, seq_len=inp.seq_len / lay.cp) / lay.tp for name in ("memory.logits", "memory.loss"))
    return {"layer": layer, "kept": kept, "working": working, "logits": logits, "loss": loss, "input": layer_input}


def _in_flight(inp: Inputs, k, params: dict) -> Formula:
    """Layer-microbatches whose kept activations stage ``k`` holds at its peak: the layers of the
    microbatches (or model chunks) in flight on it, by schedule, never more than the step has.
    ZB-H2 and DualPipe hold their sources' count on every stage."""
    lay = inp.deg
    p, mb, v = lay.pp, inp.microbatches, lay.vpp
    layers = sympy.ceiling(params["blocks"])

    def at_most(f: Formula, most):  # a catalogue count, never more than the step's microbatches
        return composed("in_flight", lazy_min(f.expr, most), "", f)

    count = lambda name: formula(f"pipeline.in_flight.{name}").bind({"pp": p, "vpp": v, "stage": k})  # noqa: E731
    chunks = at_most(count("interleaved_stage"), mb * v)
    return cases("held", "", (layers * mb, lay.schedule_is("gpipe")), (chunks * layers / v, lay.schedule_is("interleaved")),
                 (at_most(count("1f1b_stage"), mb) * layers, lay.schedule_is("1f1b", "zb-h1")),
                 (at_most(count("zb_h2"), mb) * layers, lay.schedule_is("zb-h2")),
                 (at_most(count("dualpipe"), mb) * layers, True))


def stage_activations(inp: Inputs, k, parts: dict, params: dict) -> tuple[Formula, Formula]:
    """(device, host): bytes of activations stage ``k`` holds at its peak on the device (the kept
    activations of the layer-microbatches in flight, :func:`_in_flight`, or two layers' worth when
    they are offloaded; the last stage also the MTP modules' blocks and the larger of the loss's
    working set and a recomputed layer's activations) and in host memory (the offloaded ones)."""
    held = _in_flight(inp, k, params)
    kept = _kept(inp, parts, sympy.ceiling(params["blocks"]))
    # the last stage takes the loss after a forward; a layer is recomputed in a backward: the larger counts
    loss = parts["loss"] * (1 + inp.model.mtp_modules)
    peak = composed("transient", lazy_max(parts["working"].expr, loss.expr), "byte", parts["working"], loss)
    transient = cases("transient", "byte", (peak, params["last"]), (parts["working"], True))
    if not inp.layout.offload_activations:
        return kept * held + transient, Formula("host", sympy.Integer(0), "byte", "")
    device, host = (inp.f(f"memory.offload.{name}_activations", kept_bytes=kept, layers_in_flight=held)
                    for name in ("device", "host"))
    return device + transient, host


def _kept(inp: Inputs, parts: dict, layers) -> Formula:
    """Bytes a stage of ``layers`` layers keeps per layer per microbatch in flight: its parts' count, or
    under full recomputation of N layers of each of its v chunks (Megatron-LM's block method) the
    recomputed ones' inputs and every activation of the others, averaged over the stage's layers."""
    lay, n = inp.deg, inp.layout.recompute_layers
    if n is None:
        return parts["kept"]
    share = sympy.Min(n, layers / lay.vpp) * lay.vpp / layers
    partial = parts["input"] * share + parts["layer"] * (1 - share)
    return cases("kept", "byte", (partial, lay.recompute_is("full")), (parts["kept"], True))



def stage(inp: Inputs, k, parts: dict) -> dict:
    """weights, gradients, optimizer, gathered, activations and total of stage ``k``, and the host
    memory its offloaded activations take (not in the total)."""
    params = stage_params(inp, k)
    out = model_states(inp, params)
    out["activations"], host = stage_activations(inp, k, parts, params)
    out["total"] = sum((out[name] for name in PARTS[1:]), out[PARTS[0]])
    return out | {"host": host}


def worst(inp: Inputs, parts: dict) -> dict:
    """The parts of the stage with the most memory per GPU: the first, the second (which holds one
    microbatch fewer than the first, without the embedding) or the last. Later middle stages hold
    fewer microbatches' activations and the same states, so one of these three is the worst. Its
    ``host`` is the most host memory any stage's offloaded activations take."""
    p = inp.deg.pp
    stages = [stage(inp, k, parts) for k in (sympy.Integer(0), sympy.Min(1, p - 1), p - 1)]
    keys = [s["total"].expr for s in stages]

    def pick(name):
        chosen = [s[name] for s in stages]
        expr = value_at_max(*(x for key, f in zip(keys, chosen) for x in (key, f.expr)))
        return composed(name, expr.doit(deep=False), "byte", *chosen)  # a numeric plan's is its stage's

    hosts = [s["host"] for s in stages]  # host memory: the largest over the stages, whichever is the worst
    return {name: pick(name) for name in (*PARTS, "total")} | {
        "host": composed("host", lazy_max(*(h.expr for h in hosts)), "byte", *hosts)}
