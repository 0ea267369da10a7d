"""Stage 3a of a plan: memory per GPU on each pipeline stage — model states by ZeRO stage,
ZeRO-3's unsharded copies, the activations the stage holds at its peak — and the worst stage."""

from __future__ import annotations

from ..core.algebra import And, Eq, Gt, Max, Min, Or, Piecewise, ceiling, is_false, value_at_max
from ..core.choices import MEMORY_PARTS as PARTS
from ..core.composition import cases, composed
from ..core.errors import InputError
from ..core.formula import Formula
from ..core.terms import ratio
from ..core.units import Quantity
from ..core.values import is_number
from ..formulas import formula
from . import stage_split
from .inputs import Inputs
from .placement import optimizer_shard, replica_groups
from .stage_split import stage_layers


def optimizer_state(inp: Inputs, local, ends) -> Formula:
    """Bytes of the optimizer's state and fp32 master weights of ``local`` parameters (unsharded):
    Adam's, or Muon's on all but ``ends`` (the embedding and output layer among them, or None),
    which take AdamW."""
    adam = formula(
        "memory.model_states."
        + ("optimizer_bf16_moments" if inp.moment_dtype == "bf16" else "optimizer")
    )
    if inp.optimizer != "muon":
        return adam.subs(params=local)
    matrices = local if ends is None else local - ends
    muon = formula("memory.model_states.optimizer_muon").subs(
        params=matrices, moment_bytes=inp.moment_bytes
    )
    return muon if ends is None else muon + adam.subs(params=ends)


def _none(count) -> bool:
    """Whether ``count`` is the number 0 (a term over the stages is not)."""
    return is_number(count) and count == 0


def _zero(name: str) -> Formula:
    """No bytes, as a Formula named ``name``."""
    return Formula(name, 0, "byte", "")


def model_states(inp: Inputs, params: dict) -> dict:
    """weights, gradients (with DeepSpeed's reduce bucket), optimizer (sharded by the ZeRO stage
    over each replica group) and gathered (ZeRO-3's unsharded parameters and gradients) of a stage
    whose parameters per GPU are ``params`` (:func:`rank_params`)."""
    lay = inp.deg
    groups = [(local, size) for local, size, _ in replica_groups(inp, params)]
    parts = {}
    for part, sharded_from in (("weights", 3), ("gradients", 2), ("optimizer", 1)):
        total = None
        for i, (local, dp) in enumerate(groups):
            # the ends (the embedding and the output layer) are the dense group's
            if part == "optimizer":
                f = optimizer_state(inp, local, params.get("ends_local") if i == 0 else None)
            else:
                f = formula(f"memory.model_states.{part}").subs(params=local)
            if part == "gradients":
                f = cases(
                    part,
                    "byte",
                    (
                        formula("memory.model_states.gradients_fp32").subs(params=local),
                        inp.fp32_grads,
                    ),
                    (f, True),
                )
            f = cases(part, "byte", (f / dp, lay.zero_at_least(sharded_from)), (f, True))
            total = f if total is None else total + f
        parts[part] = total
    if inp.zero_optimizer:
        # ZeRO-Offload reduces the partition's gradients into the host's fp32
        if inp.layout.offload_optimizer:
            # copy from ZeRO-2, and below ZeRO-3 keeps a device buffer of the largest parameter to
            # stage them through
            staging = inp.f("memory.offload.zero_offload_staging")
            parts["gradients"] = cases(
                "gradients",
                "byte",
                (_zero("gradients"), lay.zero_at_least(3)),
                (staging, lay.zero_at_least(2)),
                (parts["gradients"] + staging, True),
            )
        # the backward's, ZeRO-3's for good
        parts["gradients"] = parts["gradients"] + _reduce_bucket(
            inp, 1
        )
    # Transformer Engine's quantised weights and transposes
    if inp.fp8_weight_cache and inp.low_precision:
        linear = (params["per_gpu"] - params["ends_local"]) * (1 - inp.kept_16)
        cache = inp.f(inp.recipe["weight_cache"], params=linear)
        if inp.layout.quantized_params:  # they are the parameters: no 16-bit copy of the linears
            cache = cache - formula("memory.model_states.weights").subs(params=linear)
        parts["weights"] = parts["weights"] + cases(
            "weights", "byte", (_zero("weights"), lay.zero_at_least(3)), (cache, True)
        )
    if inp.layout.offload_optimizer:
        parts["optimizer"] = inp.f(
            "memory.offload.device_optimizer",
            optimizer_bytes=parts["optimizer"],
            optimizer_offload=inp.layout.offload_optimizer,
        )
    # ZeRO-3's unsharded copies: a pipelined step holds its stage's parameters and gradients
    # from the first microbatch to the last backward; without a pipeline, blocks come and go
    stage = params["per_gpu"]
    fp32 = inp.fsdp_reduce_dtype == "fp32"  # FSDP2 accumulates unsharded gradients in it
    held = inp.f("memory.zero3_held_fp32_gradients" if fp32 else "memory.zero3_held", params=stage)
    unit = stage / params["blocks"]  # one block's share
    value = {
        "memory.zero3_held": held,
        "memory.zero3_gathered": inp.f("memory.zero3_gathered", params=unit),
        None: 0,
    }
    parts["gathered"] = cases(
        "gathered", "byte", *((value[name], cond) for name, cond in lay.gathered_regimes)
    )
    return parts


def _reduce_bucket(inp: Inputs, from_zero: int) -> Formula:
    """DeepSpeed's reduce bucket (memory.zero_reduce_bucket) where the ZeRO stage is at least
    ``from_zero``."""
    return cases(
        "gradients",
        "byte",
        (inp.f("memory.zero_reduce_bucket"), inp.deg.zero_at_least(from_zero)),
        (_zero("gradients"), True),
    )


def layer_activations(inp: Inputs, moe: bool = False, kinds=None) -> Formula:
    """Bytes one layer (an MoE layer if ``moe``) keeps for its backward. Flash attention: the
    Llama-style count, or an attention half plus an MLP half for MLA and MoE models, less what the
    layout's recompute modules free; TorchTitan's op-level selective policy where the stack's; a
    hybrid model's mean layer of ``kinds`` (a stage's layers; None: the pattern's). Without it,
    Korthikanti's GPT layer, selective recomputation included."""
    lay, m = inp.deg, inp.model
    kw = {"seq_len": inp.seq_len / lay.cp}
    if m.kv_heads != m.heads and not inp.flash_attention:
        raise InputError(
            "flash_attention: the Korthikanti formulas assume multi-head attention; "
            "use flash_attention=True for GQA models"
        )
    if not inp.flash_attention and m.mlp != "gelu":
        raise InputError(
            "flash_attention: the Korthikanti formulas assume a GELU MLP; use flash_attention=True"
        )
    sp = "_sp" if lay.sequence_parallel else ""
    if not inp.flash_attention:
        return cases(
            "layer",
            "byte",
            (
                inp.f(f"memory.activations.layer_tp{sp}_selective", **kw),
                lay.recompute_is("selective"),
            ),
            (inp.f(f"memory.activations.layer_tp{sp}", **kw), True),
        )
    if m.is_hybrid:
        return _hybrid_layer(inp, sp, kw, kinds)
    if m.attention == "mla" or m.is_moe:
        return _halves(inp, moe, sp, kw)
    layer = _stack_extras(
        inp, inp.f(f"memory.activations.layer_flash_{m.mlp_formulas}{sp}", **kw), sp, kw
    )
    # a fused kernel recomputes the attention core anyway: nothing more is saved
    if inp.selective != "op":
        return _less_freed(inp, layer, sp, kw, moe=False)
    # op-level checkpointing recomputes the all-gathers: no gathered input is saved under it
    compiled = "_compiled" if inp.compiled_blocks else ""
    op = inp.f(f"memory.activations.layer_flash_swiglu_op_sac{compiled}{sp}", **kw)
    return cases("layer", "byte", (op, lay.recompute_is("selective")), (layer, True))


def _mlp_half(inp: Inputs, moe: bool, sp: str, kw: dict) -> Formula:
    """The activations of an MLP half or layer: the MoE one or a dense one, gated (SwiGLU) or
    not."""
    ungated = "" if inp.model.mlp_formulas == "swiglu" else "_gelu"
    if not moe:
        return inp.f(f"memory.activations.mlp_{'gelu' if ungated else 'swiglu'}{sp}", **kw)
    return inp.f(f"memory.activations.mlp_moe{ungated}{sp}", **kw, topk=inp.busiest_topk)


def _halves(inp: Inputs, moe: bool, sp: str, kw: dict) -> Formula:
    """An MLA or MoE model's layer: its attention half plus its MLP half (the MoE one, or a dense
    one), less what the recompute modules free."""
    m = inp.model
    attention = inp.f(
        f"memory.activations.attention_{'mla' if m.attention == 'mla' else 'gqa'}{sp}", **kw
    )
    layer = attention + _mlp_half(inp, moe, sp, kw)
    return _less_freed(inp, _stack_extras(inp, layer, sp, kw), sp, kw, moe)


def _hybrid_layer(inp: Inputs, sp: str, kw: dict, kinds=None) -> Formula:
    """A hybrid model's mean layer of ``kinds`` (pattern character → layers; None: the whole
    pattern's): each kind's activations (Mamba-2, attention, MLP, MoE) weighted by its share of the
    layers (the stack's extras and recompute modules are counted for transformer blocks only and
    not here), and what each kind's linears save quantized (:func:`_quantized_attention`)."""
    m = inp.model
    if kinds is None:
        kinds = {c: m.layer_pattern.count(c) for c in stage_split.KINDS}
    layers = sum(kinds.values())
    if inp.layout.fp8_activations or inp.layout.recompute_modules:
        raise InputError(
            "recompute_modules: selective modules and FP8 activation caching are modelled for "
            "transformer blocks, not a hybrid model's layers"
        )
    kind_layers = {
        "*": inp.f(f"memory.activations.attention_gqa{sp}", **kw),
        "-": _mlp_half(inp, False, sp, kw),
    }
    if m.mamba_blocks:
        kind_layers["M"] = inp.f(f"memory.activations.mamba2{sp}", **kw)
    if m.is_moe:
        kind_layers["E"] = _mlp_half(inp, True, sp, kw)
    parts = [f * kinds[c] for c, f in kind_layers.items() if not _none(kinds[c])]
    layer = sum(parts[1:], parts[0]) / layers
    if not (inp.low_precision and inp.quantized_saved_inputs):
        return layer
    # each kind's inputs saved quantized, by Megatron-Core's rules; a Mamba-2 layer's input
    # projection fuses its norm, as the QKV projection does, and its output projection saves the
    # group norm's output
    quantized = {
        "*": _quantized_attention(inp, sp, kw),
        "-": _quantized_mlp(inp, sp, kw, False),
        "M": (
            [_freed(inp, f"norm_output{sp}", kw), _freed(inp, "mamba2_out_proj_input", kw)]
            if m.mamba_blocks
            else [],
            [],
        ),
        "E": _quantized_mlp(inp, sp, kw, True) if m.is_moe else ([], []),
    }
    freed, copies = [], []
    for c, (kind_freed, kind_copies) in quantized.items():
        share = ratio(kinds[c], layers)
        freed += [f * share for f in kind_freed] if not _none(share) else []
        copies += [f * share for f in kind_copies] if not _none(share) else []
    return _with_quantized(inp, layer, freed, copies)


def _stack_extras(inp: Inputs, layer: Formula, sp: str, kw: dict) -> Formula:
    """``layer`` plus what the stack's layer saves beyond the fused count: its extras
    (memory.activations.legacy.*) and, where sequence-parallel matmuls save their gathered inputs,
    the norms' outputs whole (memory.activations.gathered.*)."""
    extra = [
        inp.f(f"memory.activations.legacy.{name}{sp if name == 'dropout_masks' else ''}", **kw)
        for name in inp.saved_extra
        if name != "silu_output" or inp.model.mlp_formulas == "swiglu"
    ]
    if inp.sp_saved_inputs == "gathered" and inp.layout.sequence_parallel:
        extra.append(
            inp.f(
                f"memory.activations.gathered.norm_outputs{'_fp8' if inp.dtype == 'fp8' else ''}",
                **kw,
            )
        )
    return sum(extra, layer)


def _less_freed(inp: Inputs, layer: Formula, sp: str, kw: dict, moe: bool) -> Formula:
    """``layer`` less what the layout's recompute modules free under selective recomputation
    (memory.activations.freed.*) and what caching in FP8 frees of the rest (….fp8_freed.*)."""
    m, lay = inp.model, inp.layout
    modules = lay.recompute_modules
    # core_attn frees nothing: a fused kernel recomputes the attention core anyway
    names = {
        "core_attn": None,
        "layernorm": f"layernorm{sp}",
        "mla_up_proj": f"mla_up_proj{sp}",
        "mlp": None if moe else f"mlp_{m.mlp_formulas}",
        "moe_act": "moe_act" if moe else None,
    }
    routed = {"topk": inp.busiest_topk}  # a token's copies the busiest rank's experts hold (padded)
    freed = [
        inp.f(f"memory.activations.freed.{names[n]}", **kw, **(routed if n == "moe_act" else {}))
        for n in modules
        if names[n]
    ]
    if freed:
        layer = cases(
            "layer",
            "byte",
            (layer - sum(freed[1:], freed[0]), inp.deg.recompute_is("selective")),
            (layer, True),
        )
    if lay.fp8_activations:
        cached = _fp8_cached(inp, sp, kw, moe)
        return layer - _summed(cached) if cached else layer
    if not (inp.low_precision and inp.quantized_saved_inputs):
        return layer
    attention, mlp = _quantized_attention(inp, sp, kw), _quantized_mlp(inp, sp, kw, moe)
    return _with_quantized(inp, layer, attention[0] + mlp[0], attention[1] + mlp[1])


def _with_quantized(inp: Inputs, layer: Formula, freed: list, copies: list) -> Formula:
    """``layer`` less what its inputs saved quantized free, plus the quantized copies kept beside
    16-bit ones; the layers a recipe keeps in BF16 save their 16-bit inputs (their share, as
    ops.gemm times their GEMMs)."""
    if copies:
        layer = layer + _summed(copies) * (1 - inp.kept_16)
    return layer - _summed(freed) * (1 - inp.kept_16) if freed else layer


def _summed(parts: list) -> Formula:
    return sum(parts[1:], parts[0])


def _ratio(inp: Inputs) -> dict:
    """The value of ρ_q: bytes of an element saved quantized per byte of its 16-bit form."""
    return {"quantized_ratio": inp.recipe["operand_bytes"] / 2}


def _fp8_cached(inp: Inputs, sp: str, kw: dict, moe: bool) -> list:
    """What caching in FP8 (DeepSeek-V3 §3.3.2) frees of a layer's saved tensors: every Linear's
    input and the SwiGLU's, less what the recompute modules already free."""
    m, modules = inp.model, inp.layout.recompute_modules
    if m.mlp_formulas != "swiglu":  # the cached tensors are a SwiGLU's inputs and products
        raise InputError(
            "fp8_activations: caching in FP8 (DeepSeek-V3 §3.3.2) is counted for SwiGLU MLPs, not"
            f" {m.mlp!r}"
        )
    # experts' widths as multiples of one's (the busiest rank's copies of a token need not be whole)
    width, copies = (m.ffn_hidden, 1)
    if moe:
        width, copies = m.expert_ffn_hidden, inp.busiest_topk + m.shared_experts
    products = m.shared_experts if moe and "moe_act" in modules else copies
    cached = []
    if moe or "mlp" not in modules:  # a recomputed dense MLP saves nothing of its SwiGLU
        cached.append(_freed(inp, "swiglu_inputs", kw, ffn_hidden=width) * copies)
    if products and cached:  # moe_act without shared experts leaves no product saved
        cached.append(_freed(inp, "swiglu_products", kw, ffn_hidden=width) * products)
    if "layernorm" not in modules:
        cached.append(_freed(inp, f"norm_outputs{sp}", kw))
    if m.attention == "mla" and "mla_up_proj" not in modules:
        cached.append(_freed(inp, f"mla_latents{sp}", kw))
    if moe:
        cached.append(_freed(inp, "expert_inputs", kw, topk=inp.busiest_topk))
    return cached


def _freed(inp: Inputs, name: str, kw: dict, **more) -> Formula:
    return inp.f(f"memory.activations.fp8_freed.{name}", **kw, **_ratio(inp), **more)


def _norm_copy(inp: Inputs, sp: str, kw: dict) -> Formula:
    return inp.f(f"memory.activations.quantized_copy.norm_output{sp}", **kw, **_ratio(inp))


def _quantized_attention(inp: Inputs, sp: str, kw: dict) -> tuple[list, list]:
    """(what is freed, what is added) of an attention half when its Transformer Engine linears
    save their inputs quantized, by Megatron-Core's rules (stacks.toml quantized_saved_inputs): the
    input norm's output, fused into the QKV projection, or quantized by each of MLA's two
    down-projections; MLA's latents, fused into the up-projections; under delayed scaling the
    output projection's quantized copy of the attention output. Under the ``layernorm`` and
    ``mla_up_proj`` modules their outputs are freed already and their consumers save them
    unquantized (save_original_input)."""
    m, modules = inp.model, inp.layout.recompute_modules
    freed, copies = [], []
    if "layernorm" not in modules:
        freed.append(_freed(inp, f"norm_output{sp}", kw))
        copies += [_norm_copy(inp, sp, kw)] if m.attention == "mla" else []
    if m.attention == "mla" and "mla_up_proj" not in modules:
        freed.append(_freed(inp, f"mla_latents{sp}", kw))
    if inp.fp8_recipe == "delayed":
        copies.append(
            inp.f("memory.activations.quantized_copy.attention_output", **kw, **_ratio(inp))
        )
    return freed, copies


def _quantized_mlp(inp: Inputs, sp: str, kw: dict, moe: bool) -> tuple[list, list]:
    """(what is freed, what is added) of an MLP half, as :func:`_quantized_attention`'s: a dense
    one's norm output (fused into its first matrix) and down projection's input unless the ``mlp``
    module recomputes it; an MoE one's routed copies and its experts' down projections' inputs
    (the routed ones' freed already under ``moe_act``), while its router keeps the norm's 16-bit
    output and its shared experts a quantized copy of it."""
    m, modules = inp.model, inp.layout.recompute_modules
    norms = "layernorm" not in modules
    if not moe:
        if "mlp" in modules:  # the recomputed MLP keeps only its input
            return [], []
        freed = [_freed(inp, "swiglu_products", kw, ffn_hidden=m.ffn_hidden)]
        return freed + ([_freed(inp, f"norm_output{sp}", kw)] if norms else []), []
    products = m.shared_experts + (0 if "moe_act" in modules else inp.busiest_topk)
    freed = [
        _freed(inp, "expert_inputs", kw, topk=inp.busiest_topk),
        _freed(inp, "swiglu_products", kw, ffn_hidden=m.expert_ffn_hidden) * products,
    ]
    return freed, [_norm_copy(inp, sp, kw)] if norms and m.shared_experts else []


def stage_params(inp: Inputs, k) -> dict:
    """Parameters per GPU of stage ``k`` (a number or expression): its layers, with the embedding on
    the first stage and the output layer, final norm and MTP modules on the last
    (:meth:`~analytic.presets.model.Model.stage_params_formulas`), split over TP and routed experts
    over EP; ``ends_local``: the embedding's and output layer's of them."""
    lay, m = inp.deg, inp.model
    first_n, middle, last_n = stage_layers(inp)
    is_first, is_last = Eq(k, 0), Eq(k, lay.pp - 1)
    layers = Piecewise((first_n, is_first), (last_n, is_last), (middle, True))
    start = Piecewise((0, is_first), (first_n + (k - 1) * middle, True))
    own = dense = None
    if stage_split.placed(inp):  # a hybrid stage's own layers
        own = stage_split.stage_kinds(inp, k, mtp=False)
        layers = stage_split.by_stage(k, [len(h) for h in stage_split.held(inp)])
    laid = stage_split.laid(inp)
    if laid is not None:  # a pipeline layout's stage: its chunks' layers
        layers, dense = (stage_split.by_stage(k, counts) for counts in laid)
    rest, experts = m.stage_params_formulas(start, layers, is_first, is_last, own, dense)
    dense_local, expert_local = rest / lay.tp, experts / (lay.etp * lay.ep)
    return {
        "kinds": stage_split.stage_kinds(inp, k) if own is not None else None,
        "dense_local": dense_local,
        "expert_local": expert_local,
        "per_gpu": dense_local + expert_local,
        "ends_local": m.stage_ends_formula(is_first, is_last) / lay.tp,
        "layers": layers,
        "blocks": layers + Piecewise((m.mtp_layers, is_last), (0, True)),
        "first": is_first,
        "last": is_last,
    }


def rank_params(inp: Inputs, k) -> dict:
    """Parameters per GPU of the rank that runs stage ``k``: its stage's (:func:`stage_params`) and,
    under DualPipe, the mirrored stage's as well (pipeline.mirror_stage.dualpipe), ``blocks`` and
    ``last`` (the rank computes a loss) over both; ``chunk_blocks`` is the blocks of one of its
    chunks (under DualPipe the mean of the two, whose microbatches are in flight alike)."""
    own, dual = stage_params(inp, k), inp.deg.schedule_is("dualpipe")
    out = dict(own, chunk_blocks=own["blocks"])
    if is_false(dual):
        return out
    mirror = formula("pipeline.mirror_stage.dualpipe").bind({"pp": inp.deg.pp, "stage": k})
    other = stage_params(inp, mirror.term)
    for key in ("dense_local", "expert_local", "per_gpu", "ends_local"):
        both = composed(
            key, own[key].term + other[key].term, "parameter", own[key], other[key], mirror
        )
        out[key] = cases(key, "parameter", (both, dual), (own[key], True))
    out["blocks"] = Piecewise((own["blocks"] + other["blocks"], dual), (own["blocks"], True))
    if own["kinds"] is not None:
        out["kinds"] = {
            c: Piecewise((n + other["kinds"][c], dual), (n, True)) for c, n in own["kinds"].items()
        }
    out["chunk_blocks"] = Piecewise(
        (ratio(own["blocks"] + other["blocks"], 2), dual), (own["blocks"], True)
    )
    out["last"] = Or(own["last"], And(dual, other["last"]))
    return out


def activation_parts(inp: Inputs, kinds=None) -> dict:
    """layer (one layer's activations), kept (what each layer keeps: all of them, or its input under
    full recomputation), working (what a layer's backward holds beyond the kept ones: the larger of
    its SwiGLU's gradients and the stack's context-parallel attention buffers, and under full
    recomputation the recomputed layer's activations), logits (one microbatch's), loss (the loss's
    working set at its peak, the logits included), head (the final norm's and the output layer's
    saved inputs, held through the loss) and input (a layer's input); a hybrid model's layer is
    the mean of ``kinds`` (a stage's layers, :func:`.stage_split.stage_kinds`)."""
    lay, m = inp.deg, inp.model
    layer = layer_activations(inp, kinds=kinds)
    if m.is_moe and not m.is_hybrid:  # the larger of a dense and an MoE layer
        moe_layer = layer_activations(inp, moe=True)
        layer = (
            moe_layer
            if not m.dense_layers
            else composed("layer", Max(layer.term, moe_layer.term), "byte", layer, moe_layer)
        )
    # full recomputation keeps each layer's input and, while recomputing, one layer's activations
    s_kept = inp.seq_len / lay.cp / (lay.tp if lay.sequence_parallel else 1)
    layer_input = inp.f("memory.activations.layer_full_recompute", seq_len=s_kept)
    kept = cases("kept", "byte", (layer_input, lay.recompute_is("full")), (layer, True))
    # a layer's backward: the recomputed layer's activations under full recomputation, and its
    # gradients
    gradients = (
        inp.f("memory.activations.backward.swiglu_gradients", seq_len=inp.seq_len / lay.cp)
        if m.mlp_formulas == "swiglu" and not m.is_moe
        else _zero("gradients")
    )
    # the ring's buffers, after the MLP's backward has freed its own
    if inp.cp_attention and m.attention != "mla":
        ring = cases(
            "gradients",
            "byte",
            (
                inp.f(
                    "memory.activations.backward.cp_ring_attention", seq_len=inp.seq_len / lay.cp
                ),
                Gt(lay.cp, 1),
            ),
            (_zero("gradients"), True),
        )
        gradients = composed("gradients", Max(gradients.term, ring.term), "byte", gradients, ring)
    working = cases(
        "working", "byte", (layer + gradients, lay.recompute_is("full")), (gradients, True)
    )
    logits, loss = (
        inp.f(name, seq_len=inp.seq_len / lay.cp) / lay.tp
        for name in ("memory.logits", "memory.loss")
    )
    sp = "_sp" if lay.sequence_parallel else ""
    head = inp.f(f"memory.activations.head_inputs{sp}", seq_len=inp.seq_len / lay.cp)
    if inp.sp_saved_inputs == "gathered" and lay.sequence_parallel:
        head = head + inp.f(
            "memory.activations.gathered.output_input", seq_len=inp.seq_len / lay.cp
        )
    return {
        "layer": layer,
        "kept": kept,
        "working": working,
        "logits": logits,
        "loss": loss,
        "head": head,
        "input": layer_input,
    }


def _in_flight(inp: Inputs, k, params: dict) -> Formula:
    """Layer-microbatches whose kept activations stage ``k`` holds at its peak: the layers of the
    microbatches (or model chunks) in flight on it, by schedule, never more than the step has.
    ZB-H2 and DualPipe hold their sources' count on every stage."""
    lay = inp.deg
    p, mb, v = lay.pp, inp.microbatches, lay.vpp
    layers = ceiling(params["chunk_blocks"])

    def at_most(f: Formula, most):  # a catalogue count, never more than the step's microbatches
        return composed("in_flight", Min(f.term, most), "", f)

    # Megatron-Core's combined 1F1B (ep_overlap) warms up one more chunk, whose forward runs beside
    # the first backward (schedules.py, get_num_warmup_microbatches; combined_1f1b.py)
    def count(name: str) -> Formula:
        f = formula(f"pipeline.in_flight.{name}").bind({"pp": p, "vpp": v, "stage": k})
        return f + 1 if inp.layout.ep_overlap else f

    chunks = at_most(count("interleaved_stage"), mb * v)
    laid = stage_split.chunk_blocks(inp)
    if laid is not None and is_number(k):  # a layout's chunks, each of its own size
        interleaved = _layout_in_flight(inp, laid[int(k)], count("interleaved_stage"))
    # an end stage's end chunk holds a layer fewer, its other chunks L/(p·v) + 1
    elif inp.layout.ends_as_layers:
        end = Piecewise((1, Or(params["first"], params["last"])), (0, True))
        light = formula("pipeline.in_flight.interleaved_end_chunk").bind(
            {"pp": p, "vpp": v, "stage": k, "microbatches": mb}
        )
        interleaved = chunks * (layers + end) / v - light
    else:
        interleaved = chunks * layers / v
    return cases(
        "held",
        "",
        (layers * mb, lay.schedule_is("gpipe")),
        (interleaved, lay.schedule_is("interleaved")),
        (at_most(count("1f1b_stage"), mb) * layers, lay.schedule_is("1f1b", "zb-h1")),
        (at_most(count("zb_h2"), mb) * layers, lay.schedule_is("zb-h2")),
        (at_most(count("dualpipe"), mb) * layers, True),
    )


def _layout_in_flight(inp: Inputs, blocks: list[int], warm: Formula) -> Formula:
    """Layer-microbatches a stage of chunks of ``blocks`` blocks each holds at its peak under
    interleaved 1F1B: the most, over its steady-state steps s (one forward, then one backward,
    after its ``warm`` warm-up forwards), of each chunk's blocks times its microbatches in flight
    after the step's forward (pipeline.in_flight.interleaved_chunk). The steps repeat their
    chunks every p·v; past the last forward the stage only frees."""
    lay = inp.deg
    f = formula("pipeline.in_flight.interleaved_chunk")
    at = {"pp": lay.pp, "vpp": lay.vpp, "microbatches": inp.microbatches}
    states = []
    for step in range(int(lay.pp) * int(lay.vpp)):
        held = [
            f.bind({**at, "chunk": j, "forwards": warm.term + step, "backwards": step}) * n
            for j, n in enumerate(blocks)
            if n
        ]
        states.append(sum(held[1:], held[0]) if held else Formula("in_flight", 0, "", ""))
    return composed("in_flight", Max(*(s.term for s in states)), "", warm, *states)


def stage_activations(inp: Inputs, k, parts: dict, params: dict) -> tuple[Formula, Formula]:
    """(device, host): bytes of activations stage ``k`` holds at its peak on the device (the kept
    activations of the layer-microbatches in flight, :func:`_in_flight`, or two layers' worth when
    they are offloaded; the last stage also the MTP modules' blocks and the larger of the loss's
    working set and a recomputed layer's activations) and in host memory (the offloaded ones)."""
    held = _in_flight(inp, k, params)
    kept = _kept(inp, parts, ceiling(params["chunk_blocks"]))
    # the last stage takes the loss after a forward; a layer is recomputed in a backward: the larger
    # counts
    loss = (parts["loss"] + parts["head"]) * (1 + inp.model.mtp_modules)
    peak = composed(
        "transient", Max(parts["working"].term, loss.term), "byte", parts["working"], loss
    )
    transient = cases("transient", "byte", (peak, params["last"]), (parts["working"], True))
    if not inp.layout.offload_activations:
        return kept * held + transient, _zero("host")
    device, host = (
        inp.f(f"memory.offload.{name}_activations", kept_bytes=kept, layers_in_flight=held)
        for name in ("device", "host")
    )
    return device + transient, host


def _kept(inp: Inputs, parts: dict, layers) -> Formula:
    """Bytes a stage of ``layers`` layers keeps per layer per microbatch in flight: its parts'
    count, or under full recomputation of N layers of each of its v chunks (Megatron-LM's block
    method) the recomputed ones' inputs and every activation of the others, averaged over the
    stage's layers."""
    lay, n = inp.deg, inp.layout.recompute_layers
    if n is None:
        return parts["kept"]
    share = ratio(Min(n, ratio(layers, lay.vpp), decide=True) * lay.vpp, layers)
    partial = parts["input"] * share + parts["layer"] * (1 - share)
    return cases("kept", "byte", (partial, lay.recompute_is("full")), (parts["kept"], True))


def stage(inp: Inputs, k, parts: dict) -> dict:
    """weights, gradients, optimizer, gathered, activations, optimizer_step and total of stage ``k``
    at its peak (the larger of its forward and backward and its optimizer step, where the step
    allocates), and the host memory its offloaded activations and optimizer take (not in the
    total)."""
    params = rank_params(inp, k)
    if params["kinds"] is not None:  # a hybrid stage's own layers
        parts = activation_parts(inp, params["kinds"])
    out = model_states(inp, params)
    out["activations"], host = stage_activations(inp, k, parts, params)
    if inp.layout.offload_optimizer:
        shard = optimizer_shard(inp, params)
        host = host + inp.f(
            "memory.offload.host_optimizer",
            params=shard,
            optimizer_offload=inp.layout.offload_optimizer,
        )
        # ZeRO-Offload keeps 16-bit gradients of the partition there too: ZeRO-3 its
        if inp.zero_optimizer:
            # partition, ZeRO-1 and 2 their accumulation over microbatches
            host = host + cases(
                "host",
                "byte",
                (
                    inp.f("memory.offload.host_zero3_gradients", params=shard),
                    inp.deg.zero_at_least(3),
                ),
                (
                    inp.f("memory.offload.host_accumulated_gradients", params=shard),
                    Gt(inp.microbatches, 1),
                ),
                (_zero("host"), True),
            )
    out["optimizer_step"] = _zero("optimizer_step")
    if inp.optimizer_kernel == "foreach" or inp.zero_optimizer:
        out = _peak_phase(inp, params, out)
    out["total"] = sum((out[name] for name in PARTS[1:]), out[PARTS[0]])
    return out | {"host": host}


def _step_parts(inp: Inputs, params: dict, gradients: Formula) -> tuple[Formula, Formula]:
    """(temporaries, gradients) of a stage's optimizer step: what a foreach Adam
    (memory.optimizer_step.foreach) and a ZeRO optimizer's fp32 copy of the gradient partition
    (memory.optimizer_step.fp32_gradient_copy*) allocate on the device for the parameters it updates
    there (compute.optimizer.device_params), and the gradients held meanwhile (those parameters'
    share of the partition, and ZeRO-3's reduce bucket, where DeepSpeed's optimizer freed the rest;
    else ``gradients``)."""
    lay, shard = inp.deg, optimizer_shard(inp, params)
    if inp.layout.offload_optimizer:  # the offloaded share's step runs on the host
        shard = inp.f(
            "compute.optimizer.device_params",
            params=shard,
            optimizer_offload=inp.layout.offload_optimizer,
        )
    temporaries = []
    if inp.optimizer_kernel == "foreach":
        temporaries.append(
            inp.f(
                "memory.optimizer_step.foreach",
                params=shard,
                element_bytes=Quantity(inp.moment_bytes, "byte"),
            )
        )
    if inp.zero_optimizer:
        temporaries.append(
            cases(
                "optimizer_step",
                "byte",
                (
                    inp.f("memory.optimizer_step.fp32_gradient_copy_subgroup", params=shard),
                    lay.zero_at_least(3),
                ),
                (
                    inp.f("memory.optimizer_step.fp32_gradient_copy", params=shard),
                    lay.zero_at_least(1),
                ),
                (_zero("optimizer_step"), True),
            )
        )
        held = formula(
            f"memory.model_states.{'gradients_fp32' if inp.fp32_grads else 'gradients'}"
        ).subs(params=shard)
        # the partition's (ZeRO-1 frees the rest first) and ZeRO-3's bucket
        gradients = cases(
            "gradients",
            "byte",
            (held + _reduce_bucket(inp, 3), lay.zero_at_least(1)),
            (gradients, True),
        )
    return sum(temporaries[1:], temporaries[0]), gradients


def _peak_phase(inp: Inputs, params: dict, out: dict) -> dict:
    """The parts of the larger of a stage's two phases: the forward and backward (``out``), or the
    optimizer step, which holds the model states and its temporaries (``optimizer_step``,
    :func:`_step_parts`) with the activations and ZeRO-3's unsharded copies freed."""
    extra, gradients = _step_parts(inp, params, out["gradients"])
    same = gradients is out["gradients"]  # held alike in both phases, the gradients do not decide
    # the phase with the larger is the peak (the other model states are held in both)
    keys = (
        ((out["gathered"] + out["activations"]).term, extra.term)
        if same
        else (
            (out["gathered"] + out["activations"] + out["gradients"]).term,
            (extra + gradients).term,
        )
    )

    def pick(name, backward, step):  # a tie is the forward and backward's
        return composed(
            name, value_at_max(keys[0], backward.term, keys[1], step.term), "byte", backward, step
        )

    if not same:
        out = out | {"gradients": pick("gradients", out["gradients"], gradients)}
    return (
        out
        | {"optimizer_step": pick("optimizer_step", out["optimizer_step"], extra)}
        | {name: pick(name, out[name], _zero(name)) for name in ("gathered", "activations")}
    )


def fullest_candidates(inp: Inputs) -> tuple:
    """The stages one of which holds the most memory (:func:`worst` says why)."""
    p = inp.layout.pp if type(inp.layout.pp) is int else inp.deg.pp  # a number: no Degrees built
    if stage_split.placed(inp) or inp.layout.pipeline_layout is not None:
        return tuple(range(int(p)))
    return (0, Min(1, p - 1, decide=True), p - 1)


def worst(inp: Inputs, parts: dict, stage_of=None) -> dict:
    """The parts of the stage with the most memory per GPU: the first, the second (which holds one
    microbatch fewer than the first, without the embedding) or the last. Later middle stages hold
    fewer microbatches' activations and the same states, so one of these three is the worst; the
    stages of a hybrid model or a pipeline layout hold layers of their own, and each counts. Its
    ``host`` is the most host memory any stage's offloaded activations and optimizer take.
    ``stage_of(k)``: stage ``k``'s parts (default :func:`stage`; a plan's, kept per stage)."""
    stage_of = stage_of or (lambda k: stage(inp, k, parts))
    stages = [stage_of(k) for k in fullest_candidates(inp)]
    keys = [s["total"].term for s in stages]

    def pick(name):
        chosen = [s[name] for s in stages]
        expr = value_at_max(*(x for key, f in zip(keys, chosen) for x in (key, f.term)))
        return composed(name, expr, "byte", *chosen)  # a numeric plan's is its stage's

    # host memory: the largest over the stages, whichever is the worst
    hosts = [
        s["host"] for s in stages
    ]
    return {name: pick(name) for name in (*PARTS, "total")} | {
        "host": composed("host", Max(*(h.term for h in hosts)), "byte", *hosts)
    }
