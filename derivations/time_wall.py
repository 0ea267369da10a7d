"""Time wall: 6ND from the cost of one matmul; the exact per-layer count; when 6ND is within 1% or
5%; PaLM's 6N + 12LHQT; what FlashAttention's backward adds; why MoE compute follows the active
parameters."""

import sympy

import analytic as an
from analytic.fit.derive import Derivation, S


def derive() -> Derivation:
    d = Derivation(
        "The time wall: FLOPs of training", "Where does 6ND come from, and when is it accurate?"
    )
    proj, scores = _flops_per_token(d)
    _flash_and_moe(d)
    _six_nd(d, proj, scores)
    return d


def _flops_per_token(d: Derivation):
    """A layer's FLOPs per token: projections, scores, MLP, logits, MLA."""
    m_, n_ = sympy.symbols("m n", positive=True)
    fwd = d.step(
        "A token through a weight matrix m×n costs m·n multiply-adds: 2mn FLOPs forward",
        2 * m_ * n_,
    )
    bwd = d.step(
        "Backward computes the input gradient (2mn) and the weight gradient (2mn)", 4 * m_ * n_
    )
    d.step(
        "So each weight costs 6 FLOPs per token; summed over N weights and D tokens",
        sympy.Eq(sympy.Symbol("C"), (fwd + bwd) / (m_ * n_) * S("params") * S("tokens")),
    )
    d.check((fwd + bwd) / (m_ * n_) * S("params") * S("tokens"), "compute.training_flops")

    h, a, a_kv, d_h, h_ff, s, V, L, b, B = S(
        "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "seq_len", "vocab", "layers",
        "microbatch_size", "global_batch",
    )
    proj = d.step(
        "Attention projections per token: Q and O are h×(a·d_h), K and V are h×(a_kv·d_h) (GQA)",
        2 * (2 * h * a * d_h) + 2 * (2 * h * a_kv * d_h),
    )
    scores = d.step(
        "QKᵀ and attention over V: each query meets s keys in each of a heads, d_h multiply-adds"
        " each (causal attention counted in full)",
        2 * (2 * a * d_h * s),
    )
    d.check(scores, "compute.attention_core_forward_flops_per_token")
    d.check(proj + scores, "compute.attention_forward_flops_per_token")
    d.check(
        2 * 3 * h * h_ff,
        "compute.mlp_forward_flops_per_token.swiglu",
        "SwiGLU: gate, up and down matrices:",
    )
    d.check(2 * 2 * h * h_ff, "compute.mlp_forward_flops_per_token.gelu", "GELU MLP: two matrices:")
    d.check(2 * h * V, "compute.logits_forward_flops_per_token", "Logits:")
    r_q, r_kv, d_r = S("q_lora_rank", "kv_lora_rank", "rope_dim")
    mla_proj = d.step(
        "MLA projections per token (DeepSeek-V2 §2.1): query down h×r_q and up r_q×a(d_h+d_r), "
        "KV down h×(r_kv+d_r) and up r_kv×2a·d_h, output a·d_h×h",
        2 * (h * r_q + r_q * a * (d_h + d_r) + h * (r_kv + d_r) + r_kv * 2 * a * d_h + a * d_h * h),
    )
    mla_scores = d.step(
        "MLA core: queries and keys carry d_h + d_r dimensions (the decoupled RoPE part),"
        " values d_h",
        2 * a * (d_h + d_r) * s + 2 * a * d_h * s,
    )
    d.check(mla_scores, "compute.attention_core_forward_flops_per_token.mla")
    d.check(mla_proj + mla_scores, "compute.attention_forward_flops_per_token.mla")
    d.check(
        6 * S("params") + 3 * L * mla_scores,
        "compute.flops_per_token_palm.mla",
        "PaLM's convention with MLA's core: 6N plus three times the core's forward, per layer:",
    )
    return proj, scores


def _flash_and_moe(d: Derivation):
    """FlashAttention's backward recomputation, and an MoE layer's FLOPs."""
    h, a, a_kv, d_h, h_ff, s, V, L, b, B = S(
        "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "seq_len", "vocab", "layers",
        "microbatch_size", "global_batch",
    )
    r_q, r_kv, d_r = S("q_lora_rank", "kv_lora_rank", "rope_dim")
    w_qk, w_v = sympy.symbols("w_qk w_v", positive=True)
    fa_fwd = d.step(
        "FlashAttention forward per token and head: S = QKᵀ over s keys, then O = PV",
        2 * s * w_qk + 2 * s * w_v,
    )
    fa_bwd = d.step(
        "Its backward: S = QKᵀ again, dV = PᵀdO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q",
        2 * s * w_qk + 2 * s * w_v + 2 * s * w_v + 2 * s * w_qk + 2 * s * w_qk,
    )
    d.step(
        "Backward over forward with w_qk = w_v (the 2.5 of FlashAttention's benchmarks)",
        sympy.simplify((fa_bwd / fa_fwd).subs(w_qk, w_v)),
        "flash_backward_ratio",
    )
    extra = d.step(
        "What it executes beyond the usual 2 × forward: the recomputed QKᵀ",
        sympy.expand(fa_bwd - 2 * fa_fwd),
    )
    d.check(
        a * extra.subs(w_qk, d_h),
        "compute.flash_backward_recompute_flops_per_token",
        "Over a heads of width d_h:",
    )
    d.check(
        a * extra.subs(w_qk, d_h + d_r),
        "compute.flash_backward_recompute_flops_per_token.mla",
        "MLA, queries and keys of d_h + d_r:",
    )
    k, E, E_s, h_e = S("topk", "experts", "shared_experts", "expert_ffn_hidden")
    d.check(
        (k + E_s) * 2 * 3 * h * h_e + 2 * h * E,
        "compute.moe_forward_flops_per_token",
        "MoE FFN: a token passes through its k routed and the shared SwiGLU experts, and the router"
        " h×E:",
    )


def _six_nd(d: Derivation, proj, scores):
    """The exact count of a GPT against 6ND, and PaLM's count."""
    h, a, a_kv, d_h, h_ff, s, V, L, b, B = S(
        "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "seq_len", "vocab", "layers",
        "microbatch_size", "global_batch",
    )
    gpt = {a_kv: a, d_h: h / a, h_ff: 4 * h}
    per_token = 3 * (L * (proj + scores + 2 * 2 * h * h_ff) + 2 * h * V)
    exact = sympy.simplify((per_token * B * s).subs(gpt))
    d.step(
        "Training FLOPs of a GPT model (3 × forward, every layer and the logits), per step of B"
        " sequences",
        exact,
    )
    d.check(
        exact, "compute.model_flops_korthikanti", "which is Korthikanti et al.'s model-FLOPs count:"
    )
    N = L * 12 * h**2 + V * h
    d.step("Its parameter count without biases, norms and positions", N)
    ratio = sympy.simplify(exact / (6 * N * B * s))
    d.step("Exact over 6ND", ratio, "ratio")
    x, y = sympy.symbols("x y", positive=True)  # x = s/h, y = V/(hL)
    r = sympy.simplify(ratio.subs(s, x * h).subs(V, y * h * L))
    d.step("in x = s/h and y = V/(hL)", r)
    for pct in (1, 5):
        bound = sympy.solve(sympy.Eq(r, 1 + sympy.Rational(pct, 100)), x)[0]
        d.step(f"6ND is within {pct}% while s/h ≤", bound, f"within_{pct}")
    # PaLM: 6N + 12LHQT counts the matmul weights (with the input embedding) plus the attention
    # scores
    palm = an.formula("compute.flops_per_token_palm").expr
    d.step("PaLM's per-token count, with N the matmul weights plus the input embedding table", palm)
    diff = sympy.simplify(
        palm.subs(S("params"), L * (proj / 2 + h_ff * 2 * h) + 2 * h * V) - per_token
    )
    d.step(
        "minus the exact count per token (untied embeddings: the input table has no FLOPs)", diff
    )
    assert sympy.simplify(diff - 6 * V * h) == 0
    d.step(
        "MoE: a token passes through k routed and the shared experts only, so every term above "
        "counts active parameters: C = 6·N_active·D (DeepSeek-V3: 37B of 671B)."
    )
