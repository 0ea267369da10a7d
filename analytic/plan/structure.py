"""A plan's structure, and a numeric plan's inputs to its structure's programs.

Two plans of the same :func:`structure` (model architecture kinds, which counts are zero, the
layout's flags, dtypes, which inputs shape the expressions) have expressions that differ only in
their numbers, so the programs lowered once from a template of the structure (:mod:`.template`,
:mod:`.programs`) answer every plan of it; :func:`numbers` gives a numeric plan's inputs to them.
"""

from __future__ import annotations

import functools

from ..core.symbols import sym
from ..core.values import NUMBER_TYPES, as_float, is_number
from .inputs import Inputs
from .layout import choice_indices

#: model counts a template leaves free (those the code tests against zero stay 0 where they are 0)
MODEL_COUNTS = ("layers", "hidden", "heads", "vocab", "ffn_hidden", "kv_heads", "head_dim",
                "max_seq_len", "experts", "topk", "shared_experts", "expert_ffn_hidden",
                "q_lora_rank", "kv_lora_rank", "rope_dim", "nodes_per_token", "mtp_modules",
                "sliding_window", "sliding_layers")
#: model counts the code uses as numbers, part of the structure (no symbol stands for them)
_MODEL_FIXED = ("dense_layers", "ssm_heads", "ssm_head_dim", "ssm_state", "ssm_groups", "ssm_conv",
                "moe_latent")
#: model counts whose being 1 is part of the structure (MQA's single KV head, which the code tests):
#: a template keeps such a count at 1
COUNTS_AT_ONE = ("kv_heads",)
_MODEL_KINDS = ("mlp", "position", "attention", "norm", "bias", "tied_embeddings", "qk_norm",
                "qkv_bias", "attention_sinks", "expert_bias", "layer_pattern")
_DEGREES = ("tp", "pp", "dp", "cp", "ep", "vpp")
_CHOICES = ("zero", "recompute", "schedule")
_BATCH = ("seq_len", "global_batch", "microbatch_size")
#: a plan's inputs other than the model's, the degrees and the batch: free in every template (a
#: missing one is NaN to the structure's programs, and the plan's symbolic path says what is
#: missing), except those whose presence changes the expressions (GEMM quantisation, the attention
#: kernel's efficiency, a given checkpoint time, an FP8 plan's 16-bit peak, a fully connected
#: scale-up domain), which are part of the structure
HARDWARE_INPUTS = (
    "element_bytes", "loss_bytes", "peak_flops", "peak_flops_16", "matmul_efficiency_16", "hbm",
    "sms", "gpus_per_node", "scale_up_domain", "scale_up_bandwidth", "scale_out_bandwidth",
    "hbm_bandwidth", "memory_efficiency", "tile_m", "tile_n", "attention_efficiency",
    "matmul_efficiency", "stack_efficiency", "overlap", "attention_factor", "scale_up_latency",
    "scale_up_efficiency", "scale_out_latency", "scale_out_efficiency", "interruption_rate",
    "routing_imbalance", "restart_time", "checkpoint_write_time", "checkpoint_time",
    "scale_up_links"
)
#: the inputs :func:`structure` does not hold fixed
_NOT_FIXED = frozenset((*_DEGREES, "microbatch_size"))
#: the extra input of a stage's quantities
STAGE = "stage"
#: what layout search reads of every layout
SEARCH_OUTPUTS = ("memory.total", "step_time", "flops")


def structural_inputs(inp: Inputs) -> dict:
    """The inputs whose presence shapes the expressions: keyword → whether the plan has it (the
    GEMM tile and SM count, which quantise GEMMs only together; the attention kernel's efficiency; a
    given checkpoint time; the 16-bit peak and GEMM ceiling of a low-precision plan; the links of a
    fully connected scale-up domain)."""
    given = inp.given
    quantised = "sms" in given and "tile_m" in given and "tile_n" in given
    return {
        "sms": quantised,
        "tile_m": quantised,
        "tile_n": quantised,
        "attention_efficiency": "attention_efficiency" in given,
        "checkpoint_time": "checkpoint_time" in given,
        "peak_flops_16": inp.low_precision,
        "matmul_efficiency_16": inp.low_precision,
        "scale_up_links": "scale_up_links" in given,
    }


def _open_or_number(value, keyword) -> bool:
    return value is None or is_number(value) or value == sym(keyword)


def structure(inp: Inputs) -> str | None:
    """The structure of a plan as text (equal for plans whose expressions differ only in numbers),
    or None where a plan has no template: free symbols other than a template's own (a degree, a
    choice or the microbatch size left open as its symbol; a hybrid model's pp is a number), uneven
    stages or a pipeline layout, N recomputed layers, recompute modules, offloaded activations or
    optimizer, or activations cached in FP8."""
    m, lay = inp.model, inp.layout
    open_ok = [(getattr(lay, k), k) for k in (*_DEGREES, *_CHOICES)] + [
        (inp.microbatch_size, "microbatch_size")
    ]
    open_ok += [(lay.etp, "etp")] if lay.etp is not None else []
    fixed = [lay.comm_sms, inp.seq_len, inp.global_batch, inp.training_tokens]
    fixed += [
        v for k, v in inp.given.items() if k not in _NOT_FIXED and type(v) not in NUMBER_TYPES
    ]
    if (
        lay.first_stage_layers is not None
        or lay.last_stage_layers is not None
        or lay.pipeline_layout is not None
        or lay.recompute_layers is not None
        or lay.offload_activations
        or lay.offload_optimizer
        or lay.recompute_modules
        or lay.fp8_activations
        or lay.quantized_params
        or (m.is_hybrid and not is_number(lay.pp))
        or not _model_numeric(m)
        or not all(_open_or_number(v, k) for v, k in open_ok)
        or not all(is_number(v) for v in fixed)
    ):
        return None
    parts = [_model_structure(m)]
    parts += [
        f"etp={'tp' if lay.etp is None else 'own'}",
        f"ends_as_layers={lay.ends_as_layers}",
        f"sp={lay.sequence_parallel}",
        f"async_tp={lay.async_tp}",
        f"ep_overlap={lay.ep_overlap}",
        f"comm_sms>0={lay.comm_sms != 0}",
        f"zero3_gather={lay.zero3_gather}",
        f"moe_ep={m.is_moe}",
        # a hybrid model's stages hold the pattern's layers they are given (stage_split)
        f"pp={lay.pp if m.is_hybrid else 'open'}",
    ]
    parts += [
        f"dtype={inp.dtype}",
        f"fp8_recipe={inp.fp8_recipe}",
        f"grad_dtype={inp.grad_rule}",
        f"moment_dtype={inp.moment_dtype}",
        f"flash={inp.flash_attention}",
        f"op_sac={inp.selective == 'op'}"
        f"{'/compiled' if inp.selective == 'op' and inp.compiled_blocks else ''}",
        f"fsdp_reduce={inp.fsdp_reduce_dtype}",
        f"optimizer={inp.optimizer}",
        f"dispatcher={inp.dispatcher}",
        f"bf16_layers={inp.bf16_layers}",
        f"expert_capacity={inp.expert_capacity}",
        f"pad={inp.pad_to_capacity}",
        f"optimizer_kernel={inp.optimizer_kernel}",
        f"weight_decay={inp.weight_decay}",
        f"zero_optimizer={inp.zero_optimizer}",
        f"fp8_weight_cache={inp.fp8_weight_cache if inp.low_precision else None}",
        f"saved_quantized={inp.quantized_saved_inputs if inp.low_precision else None}",
        f"sp_inputs={inp.sp_saved_inputs}",
        f"sp_relayout={inp.sp_relayout}",
        f"qk_gathered={inp.qk_gathered}",
        f"saved_extra={'+'.join(inp.saved_extra) or None}",
        f"cp_attention={inp.cp_attention}",
    ]
    present = structural_inputs(inp)
    parts += [
        f"quantised={present['sms']}",
        f"attention_efficiency={present['attention_efficiency']}",
        f"checkpoint_time={present['checkpoint_time']}",
        f"mesh={present['scale_up_links']}",
    ]
    return ";".join(parts)


@functools.lru_cache(maxsize=64)
def _model_structure(m) -> str:
    """The model's part of :func:`structure` (a Model is immutable: kept for the plans that share
    it)."""
    parts = [f"{k}={getattr(m, k)}" for k in (*_MODEL_KINDS, *_MODEL_FIXED)]
    parts += [
        f"{k}>0"
        for k in MODEL_COUNTS
        if getattr(m, k)
        and k not in ("layers", "hidden", "heads", "vocab", "ffn_hidden", "kv_heads", "head_dim")
    ]
    parts += [f"mha={m.kv_heads == m.heads}"]
    parts += [f"{k}==1={getattr(m, k) == 1}" for k in COUNTS_AT_ONE]
    return ";".join(parts)


@functools.lru_cache(maxsize=64)
def _model_numeric(m) -> bool:
    """Whether every count and fixed field of model ``m`` is a number (kept, as
    :func:`_model_structure`)."""
    return all(is_number(getattr(m, k)) for k in (*MODEL_COUNTS, *_MODEL_FIXED))


@functools.lru_cache(maxsize=64)
def _model_numbers(m) -> dict:
    """keyword → float for the model's counts that are numbers."""
    values = {k: getattr(m, k) for k in MODEL_COUNTS}
    return {k: as_float(v) for k, v in values.items() if v is not None and is_number(v)}


def numbers(inp: Inputs) -> dict:
    """keyword → float for every numeric input a template of ``inp``'s structure may read."""
    lay = inp.layout
    out = {k: getattr(lay, k) for k in (*_DEGREES, "etp", "comm_sms")}
    out.update(inp.given)
    out.update(choice_indices(lay), seq_len=inp.seq_len, global_batch=inp.global_batch,
               microbatch_size=inp.microbatch_size, tokens=inp.training_tokens)
    return {
        **_model_numbers(inp.model),
        **{
            k: float(v) if type(v) in NUMBER_TYPES else as_float(v)
            for k, v in out.items()
            if type(v) in NUMBER_TYPES or (v is not None and is_number(v))
        },
    }


__all__ = [
    "COUNTS_AT_ONE",
    "HARDWARE_INPUTS",
    "MODEL_COUNTS",
    "SEARCH_OUTPUTS",
    "STAGE",
    "numbers",
    "structural_inputs",
    "structure",
]
