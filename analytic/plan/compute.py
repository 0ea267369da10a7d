"""Stage 3b of a plan: FLOPs per step — the model FLOPs of each convention and the FLOPs the
hardware executes (recomputation, FlashAttention's backward, MTP modules, what FP8 recipes keep in
16 bits)."""

from __future__ import annotations

from ..core.algebra import is_false
from ..core.choices import CONVENTIONS
from ..core.composition import cases
from ..core.formula import Formula
from ..core.values import choice
from .inputs import Inputs


def model_flops(inp: Inputs, convention: str) -> Formula:
    """Model FLOPs per step (no recomputation): ``6nd`` (6·N_active·D), ``palm`` (6N + 12LHQT per
    token), ``megatron`` (Narayanan eq. 3, GPT shape, with recompute), ``megatron-core`` (the count
    behind Megatron-Core's logged TFLOP/s)."""
    choice("convention", convention, CONVENTIONS)
    m, tokens = inp.model, inp.tokens_per_step
    if convention == "6nd":
        return inp.f("compute.training_flops", params=m.active_params_formula(), tokens=tokens)
    if convention == "palm":
        palm = inp.f(
            f"compute.flops_per_token_palm{m.attention_suffix}",
            params=m.active_params_formula(),
            layers=m.attention_layers,
        )
        return (palm + _scans(inp, m.mamba_blocks)) * tokens
    if convention == "megatron-core":
        return _megatron_core(inp) * tokens
    return inp.f("compute.megatron_flops")


def _megatron_core(inp: Inputs) -> Formula:
    """Megatron-Core's count per token: the GEMM weights a token passes through, kind by kind (the
    attention blocks, the dense MLPs, the MoE FFNs without their routers, an output head per MTP
    module and the main one, the MTP projections with their three norms); a hybrid model as
    ``hybrid_flops`` counts it: the pattern's layers, Mamba-2 mixers by their own count, one head,
    no MTP."""
    m, f = inp.model, inp.f
    mtp = 0 if m.is_hybrid else m.mtp_modules
    params = f("model.params.attention" + ("_mla" if m.attention == "mla" else "")) * (
        m.attention_layers + mtp
    ) + f("model.params.embedding") * (1 + mtp)
    dense = m.dense_blocks - (m.mtp_modules if m.is_hybrid and not m.is_moe else 0)
    params = params + f(f"model.params.mlp.{m.mlp_formulas}") * dense
    if m.is_moe:
        gated = "" if m.mlp_formulas == "swiglu" else "_gelu"
        moe = f(f"model.params.moe_active{gated}") - f("model.params.router")
        moe = moe + f("model.params.moe_latent") if m.moe_latent else moe
        params = params + moe * (m.moe_layers if m.is_hybrid else m.moe_blocks)
    if mtp:
        params = params + (f("model.params.mtp_projection") + f("model.params.norm.rmsnorm")) * mtp
    per_token = f(
        f"compute.flops_per_token_megatron_core{m.attention_suffix}",
        params=params,
        layers=m.attention_layers + mtp,
    )
    if m.mamba_blocks:
        per_token = per_token + f("compute.megatron_core_mamba_flops_per_token") * m.mamba_blocks
    return per_token


def _recomputed(inp: Inputs, training: Formula, core_forward: Formula) -> Formula:
    """Training FLOPs plus what recomputation repeats: a whole forward (a third) for full, of the
    recomputed share of the layers; for selective, its modules' forwards (the attention core, MLA's
    up-projections, the dense layers' MLPs), or under the op-level policy every second matmul's."""
    lay, m = inp.deg, inp.model
    if inp.selective == "op":
        selective = (
            inp.f("compute.recompute.op_sac_flops_per_token") * m.blocks * inp.tokens_per_step
        )
    else:
        selective = cases("core", training.unit, (core_forward, lay.core_recomputed), (0, True))
        if not is_false(lay.up_proj_recomputed):
            up_proj = inp.f("compute.recompute.mla_up_proj_flops_per_token")
            selective = selective + up_proj * m.blocks * inp.tokens_per_step
        if not is_false(lay.mlp_recomputed):
            mlp = inp.f(f"compute.mlp_forward_flops_per_token.{m.mlp_formulas}")
            selective = selective + mlp * m.dense_blocks * inp.tokens_per_step
    return training + cases(
        "recomputed",
        training.unit,
        (training / 3 * inp.recomputed, lay.recompute_is("full")),
        (selective, lay.recompute_is("selective")),
        (0, True),
    )


def _scans(inp: Inputs, layers) -> Formula:
    """Training FLOPs per token of ``layers`` Mamba-2 scans (three forwards: PaLM's count extended
    to the SSM's sequence mixing, as Megatron-LM's hybrid_flops counts it); zero without them."""
    if not layers:
        return Formula("0", 0, "FLOP/token", "")
    return inp.f("compute.mamba2_scan_flops_per_token") * (3 * layers)


def _attention_core(inp: Inputs) -> Formula:
    """Forward FLOPs of every attention core (MTP blocks included) and Mamba-2 scan over the step's
    tokens."""
    m = inp.model
    core = (
        inp.f(f"compute.attention_core_forward_flops_per_token{m.attention_suffix}")
        * m.attention_blocks
    )
    return (
        core + _scans(inp, m.mamba_blocks) / 3 if m.mamba_blocks else core
    ) * inp.tokens_per_step


def _flash_backward(inp: Inputs) -> Formula:
    """What a FlashAttention backward adds by recomputing every block's QKᵀ (zero without it)."""
    if not inp.flash_attention:
        return Formula("0", 0, "FLOP", "")
    m = inp.model
    return (
        inp.f(f"compute.flash_backward_recompute_flops_per_token{m.attention_suffix}")
        * m.attention_blocks
        * inp.tokens_per_step
    )


def hardware_flops(inp: Inputs) -> Formula:
    """PaLM's count over everything a token passes through: the model (Mamba-2's scans included),
    each MTP module's projection, block and (shared) output head, and the padded rows of experts
    padded to a capacity (c − 1 more copies of each of a token's k routed experts' GEMMs);
    FlashAttention's backward recomputation of QKᵀ."""
    m = inp.model
    params = m.active_params_formula()
    if m.mtp_modules:
        params = (
            params
            + m.mtp_params_formula(active=True)
            + inp.f("model.params.embedding") * m.mtp_modules
        )
    if inp.expert_capacity is not None:
        padded = inp.routed_topk - m.topk  # copies of a token beyond its k, in every MoE block
        params = params + m.routed_experts_formula() * m.moe_blocks * padded / m.experts
    per_token = inp.f(
        f"compute.flops_per_token_palm{m.attention_suffix}",
        params=params,
        layers=m.attention_blocks,
    )
    per_token = per_token + _scans(inp, m.mamba_blocks) if m.mamba_blocks else per_token
    return _recomputed(
        inp, per_token * inp.tokens_per_step, _attention_core(inp)
    ) + _flash_backward(inp)
