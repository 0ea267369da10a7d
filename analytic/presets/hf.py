"""Models from Hugging Face ``config.json`` files: each supported architecture's fields mapped to
:class:`~analytic.presets.model.Model`'s, every other field either known to leave what the library
counts unchanged (dropout, RoPE base, token ids, ...) or refused with its name. A file is read as
JSON and nothing in it is run."""

from __future__ import annotations

import json
from pathlib import Path

from ..core.errors import InputError, shown
from ..core.files import read_text

MAX_BYTES = 1 << 20  # a config.json is a few kB

#: fields that change neither parameters, FLOPs nor memory as the library counts them
NEUTRAL = frozenset(
    {
        "_name_or_path",
        "architectures",
        "model_type",
        "torch_dtype",
        "transformers_version",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "initializer_range",
        "rms_norm_eps",
        "rope_theta",
        "rope_scaling",
        "max_position_embeddings",
        "use_cache",
        "attention_dropout",
        "pretraining_tp",
        "output_router_logits",
        "router_aux_loss_coef",
        "router_jitter_noise",
        "norm_topk_prob",
        "max_window_layers",
        "quantization_config",
        "aux_loss_alpha",
        "ep_size",
        "routed_scaling_factor",
        "scoring_func",
        "seq_aux",
        "topk_method",
    }
)


def read(config) -> dict:
    """The config as a dict: a dict as given, or a path to a JSON object of at most MAX_BYTES."""
    if isinstance(config, dict):
        return dict(config)
    if not isinstance(config, (str, Path)):
        raise InputError(
            f"config: expected a path to a config.json or its dict, got {type(config).__name__}"
        )
    path = Path(config)
    try:
        text = read_text(path, MAX_BYTES)
    except OSError as exc:
        raise InputError(
            f"config: {shown(path, quote=False)}: {exc.strerror or exc}; a config.json is a regular"
            " file of a few kB"
        ) from None
    try:
        data = json.loads(text)
    # JSONDecodeError; an integer past Python's digit limit; nesting
    except (ValueError, RecursionError) as exc:
        raise InputError(
            f"config: {shown(path, quote=False)} is not JSON this reader takes ({str(exc)[:80]})"
        ) from None
    if not isinstance(data, dict):
        raise InputError(f"config: {path} holds a JSON {type(data).__name__}, not an object")
    return data


def _need(cfg: dict, key: str) -> int:
    """A count the architecture needs: a JSON integer of at least 1."""
    if cfg.get(key) is None:
        raise InputError(f"config: {cfg.get('model_type')} needs {key!r}")
    return _count(cfg, key)


def _count(cfg: dict, key: str, default=None, minimum: int = 1):
    """``key`` as a JSON integer of at least ``minimum`` (true and false are not integers), or
    ``default`` where it is absent or null."""
    value = cfg.get(key)
    if value is None:
        return default
    if type(value) is not int or value < minimum or value > 2**53:
        raise InputError(f"config: {key}: expected an integer from {minimum}, got {_value(value)}")
    return value


def _flag(cfg: dict, key: str, default: bool) -> bool:
    """``key`` as JSON true or false (a string such as "false" is refused, not read by its truth),
    or ``default`` where it is absent."""
    value = cfg.get(key, default)
    if type(value) is not bool:
        raise InputError(f"config: {key}: expected true or false, got {_value(value)}")
    return value


def _text(cfg: dict, key: str, default: str | None = None) -> str | None:
    """``key`` as a JSON string, or ``default`` where it is absent (an explicit null is refused)."""
    if key not in cfg:
        return default
    value = cfg[key]
    if not isinstance(value, str):
        raise InputError(f"config: {key}: expected a string, got {_value(value)}")
    return value


def _value(value) -> str:
    """A config's value as a message shows it: its JSON, at most 80 characters, escaped."""
    text = (
        json.dumps(value, ensure_ascii=True)
        if not isinstance(value, (dict, list))
        else type(value).__name__
    )
    return text if len(text) <= 80 else text[:77] + "..."


def _dense(cfg: dict, gates: dict | None = None, tied: bool = False, window: bool = False) -> dict:
    """The fields every supported architecture shares: a gated-MLP decoder with RMSNorm and RoPE;
    ``gates`` maps the config's activation to the MLP kind (SiLU: SwiGLU), ``tied`` is the
    architecture's default for tie_word_embeddings, ``window`` whether its sliding_window applies to
    every layer (Mistral)."""
    gates = gates or {"silu": "swiglu"}
    act = _text(cfg, "hidden_activation") or _text(cfg, "hidden_act", next(iter(gates)))
    if act not in gates:
        raise InputError(
            f"config: hidden_act {_value(act)}; {cfg.get('model_type')} is mapped with a gate of "
            f"{' or '.join(gates)}"
        )
    for key in ("attention_bias", "mlp_bias"):
        if _flag(cfg, key, False):
            raise InputError(
                f"config: {key} true is not modelled for {cfg['model_type']} (biases on some layers"
                " only)"
            )
    # read whether or not a window is given: a flag is always checked
    used = _flag(cfg, "use_sliding_window", True)
    slides = _count(cfg, "sliding_window") is not None and used
    if slides and not window:
        raise InputError(
            f"config: sliding_window {cfg['sliding_window']}: {cfg.get('model_type')} is mapped"
            " without one (Mistral's and GPT-OSS's windows are)"
        )
    heads = _need(cfg, "num_attention_heads")
    out = {
        "layers": _need(cfg, "num_hidden_layers"),
        "hidden": _need(cfg, "hidden_size"),
        "heads": heads,
        "kv_heads": _count(cfg, "num_key_value_heads", heads),
        "vocab": _need(cfg, "vocab_size"),
        "ffn_hidden": _need(cfg, "intermediate_size"),
        "mlp": gates[act],
        "position": "rope",
        "norm": "rmsnorm",
        "bias": False,
        "tied_embeddings": _flag(cfg, "tie_word_embeddings", tied),
    }
    if _count(cfg, "head_dim") is not None:
        out["head_dim"] = cfg["head_dim"]
    if slides:
        out["sliding_window"] = cfg["sliding_window"]
    return out


#: the fields _dense reads (it refuses those that would leave the decoder it counts)
DENSE_FIELDS = frozenset(
    {
        "num_hidden_layers",
        "hidden_size",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "intermediate_size",
        "head_dim",
        "tie_word_embeddings",
        "hidden_act",
        "hidden_activation",
        "attention_bias",
        "mlp_bias",
        "use_sliding_window",
        "sliding_window",
    }
)


def _llama(cfg):
    return _dense(cfg), DENSE_FIELDS


def _mistral(cfg):
    """Mistral: Llama's decoder with a sliding window on every layer (Mistral 7B, arXiv 2310.06825
    §2)."""
    return _dense(cfg, window=True), DENSE_FIELDS


def _gpt_oss(cfg):
    """GPT-OSS: a SwiGLU MoE (its clamp, swiglu_limit, changes no count) with biases on the
    attention (QKV and output), on every expert and the router, a sink logit per head, and a sliding
    window on the layers ``layer_types`` names so (OpenAI 2025, gpt-oss model card §2.1)."""
    out = _dense({k: v for k, v in cfg.items() if k not in ("attention_bias", "sliding_window")})
    types = cfg.get("layer_types")
    # GptOssConfig.__post_init__: sliding on the even layers, full on the odd ones
    if types is None:
        types = [
            "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(out["layers"])
        ]
    if (
        not isinstance(types, list)
        or len(types) != out["layers"]
        or not all(t in ("sliding_attention", "full_attention") for t in types)
    ):
        raise InputError(
            f"config: layer_types must name each of the {out['layers']} layers sliding_attention or"
            " full_attention"
        )
    topk = {
        _count(cfg, k)
        for k in ("num_experts_per_tok", "experts_per_token")
        if cfg.get(k) is not None
    }
    if len(topk) != 1:
        raise InputError(
            "config: num_experts_per_tok / experts_per_token: expected one value, got"
            f" {sorted(topk)}"
        )
    sliding = types.count("sliding_attention")
    out.update(
        bias=_flag(cfg, "attention_bias", True),
        experts=_need(cfg, "num_local_experts"),
        topk=topk.pop(),
        expert_ffn_hidden=out["ffn_hidden"],
        attention_sinks=True,
        expert_bias=True,
        sliding_window=_need(cfg, "sliding_window") if sliding else 0,
        sliding_layers=sliding or None,
    )
    # initial_context_length: the pre-training context, before YaRN extends it (no count changes)
    return out, DENSE_FIELDS | {
        "num_local_experts",
        "num_experts_per_tok",
        "experts_per_token",
        "layer_types",
        "swiglu_limit",
        "initial_context_length",
    }


def _gemma(cfg):
    """Gemma (1): GeGLU (a GELU gate, counted as SwiGLU: Model.mlp_formulas), head_dim 256, tied
    embeddings by default; its RMSNorm's (1 + w) and embedding scaling add no parameters."""
    return _dense(cfg, {"gelu": "geglu", "gelu_pytorch_tanh": "geglu"}, tied=True), DENSE_FIELDS


def _mixtral(cfg):
    out, used = _llama(cfg)
    out.update(
        experts=_need(cfg, "num_local_experts"),
        topk=_need(cfg, "num_experts_per_tok"),
        expert_ffn_hidden=out["ffn_hidden"],
    )
    return out, used | {"num_local_experts", "num_experts_per_tok"}


def _qwen2(cfg):
    out, used = _llama(cfg)
    return {**out, "qkv_bias": True}, used  # Qwen2's attention has QKV biases and no output bias


def _qwen3(cfg):
    out, used = _llama(cfg)
    return {**out, "qk_norm": True}, used


def _qwen3_moe(cfg):
    out, used = _qwen3(cfg)
    dense = cfg.get("mlp_only_layers") or []
    if (
        not isinstance(dense, list)
        or dense != list(range(len(dense)))
        or _count(cfg, "decoder_sparse_step", 1) != 1
    ):
        raise InputError(
            "config: mlp_only_layers / decoder_sparse_step: only the first layers may be dense "
            f"(got {_value(dense)}, step {_value(cfg.get('decoder_sparse_step'))})"
        )
    out.update(
        experts=_need(cfg, "num_experts"),
        topk=_need(cfg, "num_experts_per_tok"),
        expert_ffn_hidden=_need(cfg, "moe_intermediate_size"),
        dense_layers=len(dense),
    )
    return out, used | {
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "mlp_only_layers",
        "decoder_sparse_step",
    }


def _deepseek(cfg):
    out, used = _llama(cfg)
    nope, v = _need(cfg, "qk_nope_head_dim"), _need(cfg, "v_head_dim")
    if nope != v:
        raise InputError(
            f"config: qk_nope_head_dim {nope} ≠ v_head_dim {v}: MLA is counted with equal key and"
            " value head dimensions"
        )
    if _count(cfg, "moe_layer_freq", 1) != 1:
        raise InputError(
            f"config: moe_layer_freq {cfg['moe_layer_freq']}: only every layer after the dense ones"
            " being MoE is modelled"
        )
    groups, reach = _count(cfg, "n_group"), _count(cfg, "topk_group")
    if groups and reach and reach > groups:
        raise InputError(
            f"config: topk_group {reach} is more than n_group {groups}: a token cannot reach more"
            " expert groups than there are"
        )
    if cfg.get("q_lora_rank", 0) is None:
        raise InputError(
            "config: q_lora_rank null (queries projected without compression, as"
            " DeepSeek-V2-Lite's) is not modelled: MLA is counted with a query down-projection"
        )
    out.update(
        attention="mla",
        head_dim=nope,
        q_lora_rank=_need(cfg, "q_lora_rank"),
        kv_lora_rank=_need(cfg, "kv_lora_rank"),
        rope_dim=_need(cfg, "qk_rope_head_dim"),
        experts=_need(cfg, "n_routed_experts"),
        shared_experts=_count(cfg, "n_shared_experts", 0, minimum=0),
        topk=_need(cfg, "num_experts_per_tok"),
        expert_ffn_hidden=_need(cfg, "moe_intermediate_size"),
        dense_layers=_count(cfg, "first_k_dense_replace", 0, minimum=0),
        mtp_modules=_count(cfg, "num_nextn_predict_layers", 0, minimum=0),
        # group-limited routing: DeepSeek places one expert group per node (V3 §3.2.2: at
        # most 4 nodes)
        nodes_per_token=reach if groups and reach and reach < groups else 0,
    )
    return out, used | {
        "qk_nope_head_dim",
        "v_head_dim",
        "moe_layer_freq",
        "n_group",
        "topk_group",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_rope_head_dim",
        "n_routed_experts",
        "n_shared_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "first_k_dense_replace",
        "num_nextn_predict_layers",
    }


# HF's layers_block_type names
_BLOCK_TYPES = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}

#: Nemotron-H fields that change no count: the SSM's step-size initialisation and limits, the scan's
#: chunk (a kernel tile), expand (the inner width is mamba_num_heads × mamba_head_dim), the
#: inference cache, residual precision and init, the router's score scaling and groups of one,
#: n_shared_experts (their width is moe_shared_expert_intermediate_size); and the fields _nemotron_h
#: reads and checks
NEMOTRON_NEUTRAL = frozenset(
    {
        "time_step_min",
        "time_step_max",
        "time_step_floor",
        "time_step_limit",
        "chunk_size",
        "mamba_hidden_act",
        "mamba_ssm_cache_dtype",
        "use_mamba_kernels",
        "residual_in_fp32",
        "rescale_prenorm_residual",
        "layer_norm_epsilon",
        "hidden_dropout",
        "num_logits_to_keep",
        "partial_rotary_factor",
        "moe_shared_expert_overlap",
        "expand",
        "n_group",
        "topk_group",
        "mlp_hidden_act",
        "use_bias",
        "mamba_proj_bias",
        "use_conv_bias",
        "n_shared_experts",
        "num_hidden_layers",
        "hybrid_override_pattern",
        "layers_block_type",
        "mtp_hybrid_override_pattern",
        "mtp_layers_block_type",
    }
)


def _pattern(cfg: dict, key: str, listed: str) -> str | None:
    """A hybrid pattern from ``key`` (Megatron's characters) or ``listed`` (HF's block-type
    names)."""
    if cfg.get(listed) is not None:
        types = cfg[listed]
        if not isinstance(types, list) or not all(
            isinstance(t, str) and t in _BLOCK_TYPES for t in types
        ):
            raise InputError(f"config: {listed}: expected a list of {', '.join(_BLOCK_TYPES)}")
        return "".join(_BLOCK_TYPES[t] for t in types)
    return _text(cfg, key)


def _nemotron_h(cfg):
    """Nemotron-H and Nemotron 3: one part a layer in ``hybrid_override_pattern`` (Mamba-2,
    attention, MLP, MoE), squared-ReLU MLPs and experts without biases, shared experts of
    ``moe_shared_expert_intermediate_size`` (as many experts of ``moe_intermediate_size``),
    LatentMoE where ``moe_latent_size`` is given, no position embedding (NVIDIA 2025, Nemotron-H
    arXiv 2504.03624 §2; Nemotron 3 Nano arXiv 2512.20848 §2)."""
    pattern = _pattern(cfg, "hybrid_override_pattern", "layers_block_type")
    _check_nemotron_h(cfg, pattern)
    out = _dense(
        {
            **{k: v for k, v in cfg.items() if k != "num_hidden_layers"},
            "num_hidden_layers": len(pattern),
            "hidden_act": "silu",
        }
    )
    out.update(
        mlp="relu2",
        position="none",
        layer_pattern=pattern,
        ssm_heads=_need(cfg, "mamba_num_heads"),
        ssm_head_dim=_need(cfg, "mamba_head_dim"),
        ssm_state=_need(cfg, "ssm_state_size"),
        ssm_groups=_need(cfg, "n_groups"),
        ssm_conv=_need(cfg, "conv_kernel"),
    )
    if "E" in pattern:
        h_e = _need(cfg, "moe_intermediate_size")
        shared = _count(cfg, "moe_shared_expert_intermediate_size", 0, minimum=0)
        if shared % h_e:
            raise InputError(
                f"config: moe_shared_expert_intermediate_size {shared} is not a multiple of "
                f"moe_intermediate_size {h_e}"
            )
        out.update(
            experts=_need(cfg, "n_routed_experts"),
            topk=_need(cfg, "num_experts_per_tok"),
            expert_ffn_hidden=h_e,
            shared_experts=shared // h_e,
            moe_latent=_count(cfg, "moe_latent_size", 0, minimum=0),
        )
    mtp = _count(cfg, "num_nextn_predict_layers", 0, minimum=0)
    module = _pattern(cfg, "mtp_hybrid_override_pattern", "mtp_layers_block_type")
    if mtp and module not in (None, "*E" if "E" in pattern else "*-"):
        raise InputError(
            f"config: an MTP module {_value(module)}: mapped as an attention and an FFN layer"
            " ('*E')"
        )
    out["mtp_modules"] = mtp
    return out, DENSE_FIELDS | NEMOTRON_NEUTRAL | NEMOTRON_READ


#: the Nemotron-H fields _nemotron_h reads beyond a dense model's
NEMOTRON_READ = frozenset(
    {
        "mamba_num_heads",
        "mamba_head_dim",
        "ssm_state_size",
        "n_groups",
        "conv_kernel",
        "n_routed_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "moe_shared_expert_intermediate_size",
        "moe_latent_size",
        "num_nextn_predict_layers",
    }
)


def _check_nemotron_h(cfg, pattern: str) -> None:
    """What a Nemotron-H config may hold that the mapping does not model, refused."""
    if _count(cfg, "n_group", 1) != 1 or _count(cfg, "topk_group", 1) != 1:
        raise InputError(
            "config: n_group / topk_group other than 1 (group-limited routing) is not mapped for"
            " nemotron_h"
        )
    if not pattern:
        raise InputError("config: nemotron_h needs hybrid_override_pattern (or layers_block_type)")
    if _count(cfg, "num_hidden_layers", len(pattern)) != len(pattern):
        raise InputError(
            f"config: num_hidden_layers {cfg['num_hidden_layers']} ≠ the pattern's {len(pattern)}"
            " layers"
        )
    if _text(cfg, "mlp_hidden_act", "relu2") != "relu2":
        raise InputError(
            f"config: mlp_hidden_act {_value(cfg['mlp_hidden_act'])}: Nemotron-H is mapped with"
            " relu2"
        )
    for key, expected in (("use_bias", False), ("mamba_proj_bias", False), ("use_conv_bias", True)):
        if _flag(cfg, key, expected) != expected:
            raise InputError(
                f"config: {key} {str(not expected).lower()} is not modelled (Mamba-2 counted with "
                "biases on the convolution only)"
            )


#: model_type → mapping
ARCHITECTURES = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "gemma": _gemma,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "gpt_oss": _gpt_oss,
    "nemotron_h": _nemotron_h,
}


#: a field written under another name in some configs (OpenAI's own gpt-oss config.json): no default
#: where given
ALIASES = {"num_experts_per_tok": "experts_per_token"}


def defaults(kind: str) -> dict:
    """The fields transformers' config class of ``kind`` fills where a config omits them
    (presets/hf_defaults.toml, each class and commit cited there)."""
    from ..core.cache import package_toml

    return dict(package_toml(Path(__file__).parent / "hf_defaults.toml")[kind])


def model_fields(config, name: str | None = None) -> dict:
    """Model keyword arguments from a config (path or dict), each omitted field read as
    transformers' config class of its model_type fills it; an InputError names what is not
    understood."""
    cfg = read(config)
    kind = cfg.get("model_type")
    if not isinstance(kind, str) or kind not in ARCHITECTURES:
        raise InputError(
            f"config: model_type {_value(kind)} is not one the library maps; supported: "
            f"{', '.join(ARCHITECTURES)}"
        )
    cfg = {**{k: v for k, v in defaults(kind).items() if ALIASES.get(k) not in cfg}, **cfg}
    fields, used = ARCHITECTURES[kind](cfg)
    unknown = sorted(set(cfg) - used - NEUTRAL)
    if unknown:
        raise InputError(
            f"config: {', '.join(unknown)} not understood for {kind}: the library would have to"
            " guess what it changes"
        )
    given = _text(cfg, "_name_or_path") if name is None else name
    if given is not None and not (
        given.isprintable()
        and len(given) <= 200
        and given.encode("utf-8", "ignore").decode("utf-8") == given
    ):
        raise InputError(
            "config: _name_or_path: expected a printable name of at most 200 characters, got "
            f"{_value(given)}"
        )
    return {**fields, "name": given or f"hf:{kind}"}
