"""Model: a transformer architecture; its parameter counts come from the catalogue's formulas (read
when a count is first asked for: building and checking a Model imports neither sympy nor the
catalogue)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from ..core.errors import InputError
from ..core.symbols import canonical
from ..core.values import choice, count, flag

if TYPE_CHECKING:
    from ..core.formula import Formula

_MLPS = ("gelu", "swiglu", "geglu", "relu2")
# Megatron-Core's hybrid pattern
_KINDS = {"M": "Mamba-2", "*": "attention", "-": "MLP", "E": "MoE"}
_POSITIONS = ("learned", "rope", "alibi", "none")
_NORMS = ("layernorm", "rmsnorm")
_ATTENTIONS = ("mha", "mla")


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer. Counts may be sympy symbols (e.g. ``an.sym("layers")``).

    Defaults follow DESIGN.md: ``ffn_hidden = 4·hidden``, ``kv_heads = heads``, ``head_dim = hidden
    // heads``. GELU models default to LayerNorm with biases, SwiGLU models to RMSNorm without.
    ``attention="mla"`` counts DeepSeek's multi-head latent attention. ``nodes_per_token`` > 0
    limits how many nodes an MoE token is sent to (node-limited routing). ``mtp_modules``
    multi-token prediction modules (DeepSeek-V3 §2.2) each add a projection and one transformer
    block of the model's last kind, sharing the embedding and output head; they are trained, stored
    and computed, but not in ``total_params`` / ``active_params`` (the papers' counts leave them
    out) — see :meth:`mtp_params_formula`. ``qk_norm``: an RMSNorm over each head's query and key
    (Qwen3). ``qkv_bias``: biases on the QKV projection only (Qwen, Qwen2). ``sliding_window`` W > 0
    limits the attention of ``sliding_layers`` of the layers (None: all) to the last W keys
    (Mistral, GPT-OSS); ``attention_sinks`` adds a learned sink logit per head and ``expert_bias``
    biases on every expert and the router (GPT-OSS). :meth:`from_hf` reads a Hugging Face
    ``config.json``.

    A hybrid model (Nemotron-H, Nemotron 3) gives ``layer_pattern`` in Megatron-Core's hybrid
    grammar, one character a layer: ``M`` a Mamba-2 mixer (``ssm_heads`` of ``ssm_head_dim``, state
    ``ssm_state``, ``ssm_groups``, a convolution of ``ssm_conv``), ``*`` attention, ``-`` an MLP,
    ``E`` an MoE; each layer is that one part after its own norm. Its MTP module is an attention and
    an FFN layer (Nemotron 3 Super's ``*E``). ``moe_latent`` > 0 runs the routed experts in that
    width between two projections (LatentMoE). ``mlp="relu2"``: squared ReLU, ungated (two matrices,
    counted as GELU's)."""

    layers: object
    hidden: object
    heads: object
    vocab: object
    ffn_hidden: object = None
    kv_heads: object = None
    head_dim: object = None
    mlp: str = "gelu"
    tied_embeddings: bool = False
    position: str = "learned"
    max_seq_len: object = None
    experts: object = 0
    topk: object = 0
    shared_experts: object = 0
    expert_ffn_hidden: object = None
    dense_layers: object = 0
    name: str | None = None
    norm: str | None = None
    bias: bool | None = None
    attention: str = "mha"
    q_lora_rank: object = 0
    kv_lora_rank: object = 0
    rope_dim: object = 0
    nodes_per_token: object = 0
    mtp_modules: object = 0
    qk_norm: bool = False
    qkv_bias: bool = False
    sliding_window: object = 0
    sliding_layers: object = None
    attention_sinks: bool = False
    expert_bias: bool = False
    layer_pattern: str | None = None
    ssm_heads: object = 0
    ssm_head_dim: object = 0
    ssm_state: object = 0
    ssm_groups: object = 0
    ssm_conv: object = 4
    moe_latent: object = 0

    def __post_init__(self):
        self._read_shape()
        self._read_experts()
        self._read_attention()
        self._check_hybrid()
        self._set("attention_sinks", flag("attention_sinks", self.attention_sinks))
        self._set("expert_bias", flag("expert_bias", self.expert_bias))
        if self.expert_bias and not self.experts:
            raise InputError("expert_bias: a dense model (experts = 0) has no experts to bias")

    def _set(self, k: str, v) -> None:
        """A field of the frozen model set, a user's Symbol("layers") as ours."""
        object.__setattr__(self, k, canonical(v))

    def _read_shape(self) -> None:
        """The widths, heads, norm, biases and positions, read and checked."""
        for k in ("layers", "hidden", "heads", "vocab"):
            self._set(k, count(k, getattr(self, k)))
        self._set("mlp", choice("mlp", self.mlp, _MLPS))
        self._set("position", choice("position", self.position, _POSITIONS))
        self._set("attention", choice("attention", self.attention, _ATTENTIONS))
        self._set(
            "ffn_hidden",
            count("ffn_hidden", 4 * self.hidden if self.ffn_hidden is None else self.ffn_hidden),
        )
        self._set(
            "kv_heads", count("kv_heads", self.heads if self.kv_heads is None else self.kv_heads)
        )
        if self.head_dim is None:
            if (
                isinstance(self.hidden, int)
                and isinstance(self.heads, int)
                and self.hidden % self.heads
            ):
                raise InputError(
                    f"head_dim: hidden {self.hidden} is not divisible by heads {self.heads}; give"
                    " head_dim"
                )
            self._set(
                "head_dim",
                (
                    self.hidden // self.heads
                    if isinstance(self.hidden, int) and isinstance(self.heads, int)
                    else self.hidden / self.heads
                ),
            )
        self._set("head_dim", count("head_dim", self.head_dim))
        if (
            isinstance(self.heads, int)
            and isinstance(self.kv_heads, int)
            and self.heads % self.kv_heads
        ):
            raise InputError(
                f"kv_heads: heads {self.heads} is not divisible by kv_heads {self.kv_heads}"
            )
        self._set(
            "norm",
            choice("norm", self.norm or ("layernorm" if self.mlp == "gelu" else "rmsnorm"), _NORMS),
        )
        self._set("bias", (self.mlp == "gelu") if self.bias is None else flag("bias", self.bias))
        self._set("tied_embeddings", flag("tied_embeddings", self.tied_embeddings))
        self._set("qk_norm", flag("qk_norm", self.qk_norm))
        self._set("qkv_bias", flag("qkv_bias", self.qkv_bias))
        if self.qkv_bias and self.bias:
            raise InputError(
                "qkv_bias: bias=True already counts the QKV biases (and the output projection's)"
            )
        if self.position == "learned":
            if self.max_seq_len is None:
                raise InputError(
                    "max_seq_len: required with position='learned' (it sizes the position table)"
                )
            self._set("max_seq_len", count("max_seq_len", self.max_seq_len))

    def _read_experts(self) -> None:
        """The experts, their routing and widths, and the counts of MLA and MTP, read and
        checked."""
        for k in (
            "experts",
            "topk",
            "shared_experts",
            "dense_layers",
            "q_lora_rank",
            "kv_lora_rank",
            "rope_dim",
            "nodes_per_token",
            "mtp_modules",
        ):
            self._set(k, count(k, getattr(self, k), minimum=0))
        if self.experts:
            if not self.topk:
                raise InputError("topk: an MoE model (experts > 0) needs topk ≥ 1")
            if (
                isinstance(self.topk, int)
                and isinstance(self.experts, int)
                and self.topk > self.experts
            ):
                raise InputError(f"topk: {self.topk} exceeds experts {self.experts}")
            self._set(
                "expert_ffn_hidden",
                count(
                    "expert_ffn_hidden",
                    self.ffn_hidden if self.expert_ffn_hidden is None else self.expert_ffn_hidden,
                ),
            )
            if (
                isinstance(self.dense_layers, int)
                and isinstance(self.layers, int)
                and self.dense_layers > self.layers
            ):
                raise InputError(f"dense_layers: {self.dense_layers} exceeds layers {self.layers}")
        elif self.topk or self.shared_experts:
            raise InputError(
                "experts: topk or shared_experts given for a dense model (experts = 0)"
            )

    def _read_attention(self) -> None:
        """MLA's ranks, RoPE's even dimensions and the sliding window, checked."""
        if self.attention == "mla" and not (
            self.q_lora_rank and self.kv_lora_rank and self.rope_dim
        ):
            raise InputError("attention='mla' needs q_lora_rank, kv_lora_rank and rope_dim")
        rotated = "rope_dim" if self.attention == "mla" else "head_dim"
        if (
            self.position == "rope"
            and isinstance(getattr(self, rotated), int)
            and getattr(self, rotated) % 2
        ):
            # RoPE rotates pairs of dimensions (Su et al. 2021, RoFormer, arXiv 2104.09864 §3.2: d
            # even)
            raise InputError(
                f"{rotated}: rotary embeddings rotate pairs of dimensions; {getattr(self, rotated)}"
                " is odd"
            )
        self._set("sliding_window", count("sliding_window", self.sliding_window, minimum=0))
        if self.sliding_layers is not None:
            self._set("sliding_layers", count("sliding_layers", self.sliding_layers, minimum=0))
            if not self.sliding_window:
                raise InputError("sliding_layers: given without a sliding_window")
        if (
            isinstance(self.sliding_layers, int)
            and isinstance(self.layers, int)
            and self.sliding_layers > self.layers
        ):
            raise InputError(f"sliding_layers: {self.sliding_layers} exceeds layers {self.layers}")

    def _check_hybrid(self):
        """Validate the hybrid pattern, the Mamba-2 sizes and LatentMoE's width."""
        self._set("moe_latent", count("moe_latent", self.moe_latent, minimum=0))
        if self.moe_latent and (not self.experts or self.mlp_formulas == "swiglu"):
            raise InputError(
                "moe_latent: LatentMoE is counted for an MoE model with ungated experts"
                " (mlp='relu2')"
            )
        ssm = ("ssm_heads", "ssm_head_dim", "ssm_state", "ssm_groups", "ssm_conv")
        if self.layer_pattern is None:
            if any(getattr(self, k) for k in ssm[:4]):
                raise InputError(
                    "ssm_heads: Mamba-2 sizes are given for a model without a layer_pattern"
                )
            return
        p = self.layer_pattern
        if not isinstance(p, str) or not p or set(p) - set(_KINDS):
            raise InputError(
                f"layer_pattern: expected a string of {', '.join(_KINDS)} (one layer each: "
                f"{', '.join(f'{c} {k}' for c, k in _KINDS.items())}), got {p!r:.80}"
            )
        # PaLM's FLOP count, which the plans use, has an attention term over L ≥ 1 layers
        if "*" not in p:
            raise InputError(
                "layer_pattern: a hybrid model without an attention layer (*) is not modelled"
            )
        if isinstance(self.layers, int) and len(p) != self.layers:
            raise InputError(f"layer_pattern: {len(p)} layers, but layers is {self.layers}")
        for k in ssm:
            self._set(k, count(k, getattr(self, k), minimum=1 if "M" in p else 0))
        if (
            isinstance(self.ssm_heads, int)
            and isinstance(self.ssm_groups, int)
            and self.ssm_groups
            and self.ssm_heads % self.ssm_groups
        ):
            raise InputError(
                f"ssm_groups: {self.ssm_heads} heads do not split into {self.ssm_groups} groups"
            )
        if ("E" in p) != bool(self.experts):
            raise InputError(
                "layer_pattern: an MoE layer (E) needs experts, and experts need an E layer"
            )
        for k, why in (
            ("dense_layers", "the pattern places the MLP layers"),
            ("attention", "attention is MHA/GQA"),
            ("sliding_window", "no window"),
        ):
            if (
                k == "attention"
                and self.attention == "mla"
                or k != "attention"
                and getattr(self, k)
            ):
                raise InputError(f"{k}: not modelled with a layer_pattern ({why})")

    @property
    def is_hybrid(self) -> bool:
        return self.layer_pattern is not None

    def _kind(self, c: str):
        return self.layer_pattern.count(c)

    @classmethod
    def gpt(
        cls, layers, hidden, heads, vocab=51200, seq_len=2048, name=None, **overrides
    ) -> "Model":
        """A GPT/Megatron-style model in one line: learned positions, GELU MLP of 4h, LayerNorm,
        biases, tied embeddings, vocabulary 51,200 (Narayanan et al. 2021 §5.1)."""
        return cls(
            layers=layers, hidden=hidden, heads=heads, vocab=vocab, mlp="gelu", position="learned",
            max_seq_len=seq_len, tied_embeddings=True, name=name, **overrides,
        )

    @classmethod
    def from_hf(cls, config, name: str | None = None) -> "Model":
        """A model from a Hugging Face ``config.json`` (a path or its dict): Llama, Mistral,
        Mixtral, Gemma, Qwen2, Qwen3, Qwen3-MoE, DeepSeek-V2/V3, GPT-OSS, Nemotron-H and Nemotron
        3 (:mod:`analytic.presets.hf`). A field the mapping does not know is refused, never
        guessed."""
        from .hf import model_fields

        return cls(**model_fields(config, name))

    @property
    def mlp_formulas(self) -> str:
        """The MLP kind whose catalogue formulas count this one: GeGLU (Gemma) as SwiGLU, whose
        gate, up and down matrices, FLOPs, saved tensors and elementwise traffic it shares; only
        the gate's nonlinearity differs (Shazeer 2020, GLU Variants, arXiv 2002.05202); squared
        ReLU (So et al. 2021, Primer, arXiv 2109.08668) as GELU: two matrices and an elementwise
        activation."""
        return {"geglu": "swiglu", "relu2": "gelu"}.get(self.mlp, self.mlp)

    @property
    def is_moe(self) -> bool:
        return bool(self.experts)

    @property
    def moe_layers(self):
        if self.is_hybrid:
            return self._kind("E")
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def attention_suffix(self) -> str:
        """Suffix of the catalogue's attention FLOP formulas for this attention: ``.mla`` (QKᵀ
        over d_h + d_r) or none."""
        return ".mla" if self.attention == "mla" else ""

    @property
    def windowed_layers(self):
        """Layers whose attention the sliding window limits: ``sliding_layers``, all layers where it
        is None, none without a window."""
        if not self.sliding_window:
            return 0
        return self.layers if self.sliding_layers is None else self.sliding_layers

    @property
    def mtp_layers(self):
        """Layers of the MTP modules: a transformer block each, or a hybrid model's attention and
        FFN layers."""
        return self.mtp_modules * (2 if self.is_hybrid else 1)

    @property
    def blocks(self):
        """Layers a token passes through in training: the layers and the MTP modules' (transformer
        blocks, or a hybrid model's single-part layers)."""
        return self.layers + self.mtp_layers

    @property
    def moe_blocks(self):
        """Blocks whose FFN is a mixture of experts (an MTP block is of the last layer's kind)."""
        return self.moe_layers + self.mtp_modules if self.is_moe else 0

    @property
    def attention_layers(self):
        """Layers with an attention mixer: every layer, a hybrid model's ``*`` layers (MTP modules
        not counted)."""
        return self._kind("*") if self.is_hybrid else self.layers

    @property
    def attention_blocks(self):
        """Blocks with an attention mixer: the attention layers and one per MTP module."""
        return self.attention_layers + self.mtp_modules

    @property
    def mamba_blocks(self):
        """A hybrid model's Mamba-2 layers."""
        return self._kind("M") if self.is_hybrid else 0

    @property
    def dense_blocks(self):
        """Blocks with a dense MLP: a transformer's blocks that are not MoE, a hybrid model's ``-``
        layers."""
        if self.is_hybrid:
            return self._kind("-") + (0 if self.is_moe else self.mtp_modules)
        return self.blocks - self.moe_blocks

    @property
    def sublayers(self):
        """Residual branches (a norm, one mixer or FFN, an add): two per transformer block, one per
        hybrid layer."""
        return self.blocks if self.is_hybrid else 2 * self.blocks

    @property
    def block_tensors(self):
        """Parameter tensors in the transformer blocks, as Megatron-LM lays a block out: a norm
        before attention and one before the MLP (LayerNorm: gain and bias), fused QKV and output
        projections (MLA: query and KV down- and up-projections, their two norms, the output), the
        MLP's two linear layers (SwiGLU's gate and up fused), each with a bias where the model has
        them; an MoE FFN: the router, two per routed expert, two for the shared experts. What a
        per-tensor ZeRO-3 gathers one by one (embeddings and the final norm not counted)."""
        linear = 2 if self.bias else 1
        norm = 2 if self.norm == "layernorm" else 1
        attention = (
            5 + 2 if self.attention == "mla" else 2 * linear + (1 if self.qkv_bias else 0)
        ) + self.attention_sinks
        attention += 2 if self.qk_norm else 0
        router = (
            (2 if self.expert_bias else 1)
            + (2 if self.shared_experts else 0)
            + (2 if self.moe_latent else 0)
        )
        # a norm each; Mamba-2: in and out projections, convolution and its bias, A, D, dt's bias,
        # norm
        if self.is_hybrid:
            return (
                self.sublayers * norm
                + self.attention_blocks * attention
                + self.mamba_blocks * 8
                + self.dense_blocks * 2 * linear
                + self.moe_blocks * router
                + self.routed_expert_tensors
            )
        moe = self.moe_blocks * (2 * norm + attention + router) + self.routed_expert_tensors
        return (self.blocks - self.moe_blocks) * (2 * norm + attention + 2 * linear) + moe

    @property
    def routed_expert_tensors(self):
        """The routed experts' parameter tensors among :attr:`block_tensors`: two per expert per MoE
        block (four with their biases)."""
        return self.moe_blocks * (4 if self.expert_bias else 2) * self.experts

    def counts(self) -> dict:
        """keyword → value of every architecture symbol the model has: ints, or sympy
        expressions."""
        out = {
            "layers": self.layers,
            "hidden": self.hidden,
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "ffn_hidden": self.ffn_hidden,
            "vocab": self.vocab,
        }
        if self.position == "learned":
            out["max_seq_len"] = self.max_seq_len
        if self.is_moe:
            out.update(
                experts=self.experts, shared_experts=self.shared_experts, topk=self.topk,
                expert_ffn_hidden=self.expert_ffn_hidden, moe_layers=self.moe_layers,
            )
        if self.attention == "mla":
            out.update(
                q_lora_rank=self.q_lora_rank, kv_lora_rank=self.kv_lora_rank, rope_dim=self.rope_dim
            )
        if self.sliding_window:
            out.update(sliding_window=self.sliding_window, sliding_layers=self.windowed_layers)
        if self.is_moe:
            out["expert_width"] = self.moe_latent or self.hidden
        if self.mamba_blocks:
            out.update(
                ssm_heads=self.ssm_heads, ssm_head_dim=self.ssm_head_dim, ssm_state=self.ssm_state,
                ssm_groups=self.ssm_groups, ssm_conv=self.ssm_conv,
            )
        return out

    def inputs(self) -> dict:
        """:meth:`counts`, for binding catalogue formulas (``Formula.bind``)."""
        return self.counts()

    def _part(self, name: str) -> Formula:
        from ..formulas import formula

        return formula(name).bind(self.inputs())

    def _layer_parts(self, active: bool) -> tuple[Formula, Formula, Formula | None]:
        """(attention with two norms, dense MLP, MoE FFN or None) of one transformer layer."""
        attn = self._part(
            "model.params.attention_mla" if self.attention == "mla" else "model.params.attention"
        )
        mlp = self._part(f"model.params.mlp.{self.mlp_formulas}")
        if self.bias:
            attn = attn + self._part("model.params.attention_bias")
            if self.mlp == "gelu":
                mlp = mlp + self._part("model.params.mlp_bias.gelu")
        moe = self._moe_part(active) if self.is_moe else None
        if self.attention_sinks:
            attn = attn + self._part("model.params.attention_sinks")
        if self.qk_norm:
            attn = attn + self._part("model.params.qk_norm")
        if self.qkv_bias:
            attn = attn + self._part("model.params.qkv_bias")
        return attn + self._part(f"model.params.norm.{self.norm}") * 2, mlp, moe

    def _moe_part(self, active: bool) -> Formula:
        """One MoE FFN's parameters (all, or those one token uses): gated or ungated experts,
        GPT-OSS's biases, LatentMoE's projections."""
        ungated = "" if self.mlp_formulas == "swiglu" else "_gelu"
        moe = self._part(("model.params.moe_active" if active else "model.params.moe") + ungated)
        if self.expert_bias:
            moe = moe + self._part(
                "model.params.moe_bias_active" if active else "model.params.moe_bias"
            )
        if self.moe_latent:
            moe = moe + self._part("model.params.moe_latent")
        return moe

    def _hybrid_kinds(self, active: bool) -> dict:
        """pattern character → (parameters of one such layer, its norm included; how many)."""
        attn, mlp, moe = self._layer_parts(active)
        norm = self._part(f"model.params.norm.{self.norm}")
        attn = attn - norm  # a hybrid attention layer has one norm
        kinds = {"*": attn, "-": mlp + norm}
        if self.mamba_blocks:
            kinds["M"] = self._part("model.params.mamba2") + norm
        if self.is_moe:
            kinds["E"] = moe + norm
        return {c: (f, self._kind(c)) for c, f in kinds.items() if self._kind(c)}

    def _params(self, active: bool) -> Formula:
        if self.is_hybrid:
            emb = self._part("model.params.embedding")
            total = emb * (1 if self.tied_embeddings else 2) + self._part(
                f"model.params.norm.{self.norm}"
            )
            for f, n in self._hybrid_kinds(active).values():
                total = total + f * n
            return total.renamed(
                f"model.params.{'active' if active else 'total'}"
                + (f"[{self.name}]" if self.name else ""),
                source="derived: sum of the model.params.* formulas over the layer pattern",
                assumptions=(f"hybrid {self.layer_pattern}; {self.mlp} MLP, {self.norm}",),
            )
        layer, mlp, moe = self._layer_parts(active)
        emb = self._part("model.params.embedding")
        total = (
            emb * (1 if self.tied_embeddings else 2)
            + self._part(f"model.params.norm.{self.norm}")
            + layer * self.layers
        )
        if self.position == "learned":
            total = total + self._part("model.params.positions")
        total = total + mlp * (self.layers - self.moe_layers)
        if self.is_moe:
            total = total + moe * self.moe_layers
        kind = "active" if active else "total"
        return total.renamed(
            f"model.params.{kind}" + (f"[{self.name}]" if self.name else ""),
            source="derived: sum of the model.params.* formulas over the architecture",
            assumptions=(
                f"{self.mlp} MLP, {self.norm}, {self.attention} attention, "
                f"{'tied' if self.tied_embeddings else 'untied'} embeddings, "
                f"{self.position} positions" + (", biases" if self.bias else ""),
            ),
        )

    def mtp_params_formula(self, active: bool = False) -> Formula:
        """Parameters of the MTP modules (all, or those one token uses): per module the projection
        and norms of model.params.mtp_projection and a transformer block of the last layer's
        kind."""
        # a hybrid model's: an attention and an FFN layer, a norm each
        layer, mlp, moe = self._layer_parts(active)
        module = self._part("model.params.mtp_projection") + layer + (moe if self.is_moe else mlp)
        return (module * self.mtp_modules).renamed(
            "model.params.mtp" + (f"[{self.name}]" if self.name else ""),
            source=(
                "derived: model.params.mtp_projection + one transformer block, per MTP module"
                " (DeepSeek-V3 §2.2)"
            ),
        )

    def routed_experts_formula(self) -> Formula:
        """Parameters of one MoE layer's routed experts (sharded by EP), biases included."""
        routed = self._part(
            "model.params.routed_experts" + ("" if self.mlp_formulas == "swiglu" else "_gelu")
        )
        return (
            routed + self._part("model.params.routed_experts_bias") if self.expert_bias else routed
        )

    def stage_params_formulas(
        self, start, layers, first, last, kinds=None, dense=None
    ) -> tuple[Formula, Formula]:
        """(parameters outside the routed experts, routed-expert parameters) of a pipeline stage
        holding ``layers`` layers from layer ``start`` (the first ``dense_layers`` are dense), or
        ``dense`` of them dense where given (a pipeline layout's stage of several chunks); a
        hybrid model's ``kinds`` (pattern character → layers of it on the stage; None: the
        pattern's mean layer on every stage). ``first`` and ``last`` (booleans or sympy
        conditions) add the embedding and learned positions, and the final norm, the output layer
        and the MTP modules. A tied embedding is kept again on the last stage of a pipeline to
        compute the logits (Megatron-LM's shared embedding)."""
        from ..core.algebra import Max, Min, Piecewise
        from ..core.formula import Formula

        one = lambda cond: Piecewise((1, cond), (0, True))  # noqa: E731
        norm = self._part(f"model.params.norm.{self.norm}")
        if self.is_hybrid and kinds is not None:
            rest, experts = self._hybrid_stage(kinds)
        elif self.is_hybrid:  # the pattern's mix of kinds on every stage: its mean layer
            rest, experts = (per_layer * layers for per_layer in self._hybrid_mean_layer())
        else:
            layer, mlp, moe = self._layer_parts(active=False)
            if dense is None:
                dense = (
                    Max(0, Min(self.dense_layers - start, layers, decide=True), decide=True)
                    if self.is_moe
                    else layers
                )
            routed = (
                self.routed_experts_formula() if self.is_moe else Formula("0", 0, "parameter", "")
            )
            rest, experts = layer * layers + mlp * dense, routed * (layers - dense)
            if self.is_moe:
                rest = rest + (moe - routed) * (layers - dense)
        rest = rest + self.stage_ends_formula(first, last) + norm * one(last)
        if self.mtp_modules:  # their routed experts sharded with the others
            mtp_routed = self.routed_experts_formula() * self.mtp_modules if self.is_moe else 0
            rest = rest + (self.mtp_params_formula() - mtp_routed) * one(last)
            experts = experts + mtp_routed * one(last)
        return rest, experts

    def _hybrid_stage(self, kinds: dict) -> tuple[Formula, Formula]:
        """(parameters outside the routed experts, routed-expert parameters) of a hybrid model's
        layers ``kinds`` (pattern character → how many)."""
        from ..core.formula import Formula

        rest, experts = Formula("0", 0, "parameter", ""), Formula("0", 0, "parameter", "")
        for c, (f, _) in self._hybrid_kinds(active=False).items():
            n = kinds[c]
            if c == "E":
                routed = self.routed_experts_formula()
                rest, experts = rest + (f - routed) * n, experts + routed * n
            else:
                rest = rest + f * n
        return rest, experts

    def _hybrid_mean_layer(self) -> tuple[Formula, Formula]:
        """(parameters outside the routed experts, routed-expert parameters) of a hybrid model's
        mean layer."""
        counts = {c: n for c, (_, n) in self._hybrid_kinds(active=False).items()}
        rest, experts = self._hybrid_stage(counts)
        return rest / self.layers, experts / self.layers

    def stage_ends_formula(self, first, last) -> Formula:
        """Parameters of a pipeline stage's ends: the embedding and learned positions where
        ``first``, the output layer where ``last`` (a tied embedding kept again on the last stage of
        a pipeline)."""
        from ..core.algebra import And, Not, Piecewise

        one = lambda cond: Piecewise((1, cond), (0, True))  # noqa: E731
        emb = self._part("model.params.embedding")
        emb_first = (
            emb + self._part("model.params.positions") if self.position == "learned" else emb
        )
        return emb_first * one(first) + emb * one(
            And(last, Not(first)) if self.tied_embeddings else last
        )

    def params_formula(self) -> Formula:
        """Total parameter count as a Formula (in the model's free symbols, if any)."""
        return self._params(active=False)

    def active_params_formula(self) -> Formula:
        """Parameters used per token (= total for dense models)."""
        return self._params(active=True) if self.is_moe else self._params(active=False)

    @property
    def total_params(self) -> int:
        return round(self.params_formula().value().magnitude)

    @property
    def active_params(self) -> int:
        return round(self.active_params_formula().value().magnitude)

    def replace(self, **changes) -> "Model":
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return Model(**values)
