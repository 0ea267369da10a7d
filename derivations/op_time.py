"""Op-level time: a GEMM's time from its shape (tile and wave quantisation, the roofline's sum
form), what the memory-bound kernels of a block move, the causal share of fused attention, one Adam
step."""

import sympy

from analytic.fit.derive import Derivation, S


def derive() -> Derivation:
    d = Derivation(
        "Op-level time of a training step",
        "How long does each operation of a step take, from its shape and the accelerator's"
        " numbers?",
    )
    _gemm(d)
    _memory_bound(d)
    _other_kernels(d)
    _casts(d)
    _optimizer(d)
    _attention_and_stack(d)
    return d


def _gemm(d: Derivation) -> None:
    """A GEMM's time from its shape: tiles, waves and the roofline's sum form."""
    M, N, K, G = S("gemm_m", "gemm_n", "gemm_k", "gemm_count")
    Tm, Tn, sms = S("tile_m", "tile_n", "sms")
    F, eta, B, beta, e = S(
        "peak_flops", "matmul_efficiency", "hbm_bandwidth", "memory_efficiency", "element_bytes"
    )
    flops = d.step(
        "G GEMMs of an M×K by a K×N matrix: M·N outputs of K multiply-adds each", 2 * G * M * N * K
    )
    d.check(flops, "compute.gemm.flops")
    tiles = d.step(
        "Each SM computes one T_m × T_n output tile at a time; a partial tile costs a whole one "
        "(NVIDIA's GEMM guide §3.1)",
        G * sympy.ceiling(M / Tm) * sympy.ceiling(N / Tn),
    )
    waves = d.step(
        "The tiles run in waves of one per SM; the last wave may be part empty (§3.2)",
        sympy.ceiling(tiles / sms),
    )
    wave = d.step(
        "So the share of tile slots that compute useful outputs is",
        G * M * N / (waves * sms * Tm * Tn),
    )
    d.check(wave, "compute.gemm.wave_efficiency")
    H100 = {M: 8192, N: 1536, G: 1, Tm: 128, Tn: 256, sms: 132}
    d.step(
        "Llama 3 8B's QKV projection at TP 4 on an H100: 8,192 tokens × 1,536 outputs in 128×256"
        " tiles: 384 tiles in 3 waves of 132",
        wave.subs(H100),
        "wave_llama3_8b_qkv_tp4",
    )
    d.step(
        "At TP 8 the 768 outputs make 192 tiles, 2 waves of which the second is half empty",
        wave.subs({**H100, N: 768}),
        "wave_llama3_8b_qkv_tp8",
    )
    math = d.step(
        "Its multiply-adds at the efficiency η of a large GEMM that fills whole waves",
        flops / (F * eta * wave),
    )
    d.check(math, "compute.gemm.math_time")
    d.check(
        flops / (F * eta),
        "compute.gemm.math_time.unquantised",
        "Where the SM count or tile is not known, without quantisation:",
    )
    traffic = d.step(
        "Its operands and output cross HBM once, e bytes an element",
        e * G * (M * K + K * N + M * N),
    )
    mem = d.step(
        "at the share η_hbm of the HBM bandwidth a streaming kernel reaches", traffic / (B * beta)
    )
    d.check(mem, "compute.gemm.memory_time")
    I, Istar = sympy.symbols("I I^*", positive=True)
    rate = d.step(
        "Math and traffic do not overlap, so with arithmetic intensity I = C/Q the achieved rate "
        "C/(t_math + t_mem) is",
        sympy.simplify(flops / (math + flops / (I * B * beta))),
    )
    ridge = F * eta * wave / (B * beta)
    assert sympy.simplify(rate - F * eta * wave * I / (I + ridge)) == 0
    d.step(
        "that is F·η·W · I/(I + I*) with the ridge I* = F·η·W/(B_hbm·η_hbm): the efficiency"
        " saturates in arithmetic intensity (the roofline's sum form)",
        F * eta * wave * I / (I + Istar),
    )


def _memory_bound(d: Derivation) -> None:
    """What a transformer block's memory-bound kernels move, per token."""
    F, eta, B, beta, e = S(
        "peak_flops", "matmul_efficiency", "hbm_bandwidth", "memory_efficiency", "element_bytes"
    )
    d.check(
        S("kernel_bytes") / (B * beta),
        "compute.memory_bound.time",
        "A memory-bound kernel that moves Q bytes takes, its arithmetic hidden behind its traffic:",
    )
    h, h_ff, a, a_kv, d_h, V, k, s = S(
        "hidden", "ffn_hidden", "heads", "kv_heads", "head_dim", "vocab", "topk", "seq_len"
    )
    d.step(
        "Memory-bound kernels move what they read and write; per token of one pre-norm block, in"
        " elements:"
    )
    d.check(
        2 * (h + h) + 2 * (2 * h + h),
        "compute.memory_bound.residual_forward",
        "forward residual stream: two norms (read h, write h), two residual adds (read 2h,"
        " write h):",
    )
    d.check(
        2 * (h + h),
        "compute.memory_bound.norms_forward",
        "of which the two norms (read h, write h), what recomputing them runs again:",
    )
    d.check(
        2 * (2 * h + h) + 2 * (2 * h + h),
        "compute.memory_bound.residual_backward",
        "backward: two norm backwards (read x and dy, write dx), two residual-gradient adds (read"
        " 2h, write h):",
    )
    d.check(
        2 * h_ff + h_ff,
        "compute.memory_bound.mlp_forward.swiglu",
        "SwiGLU forward: read gate and up, write their product:",
    )
    d.check(
        3 * h_ff + 2 * h_ff,
        "compute.memory_bound.mlp_backward.swiglu",
        "SwiGLU backward: read gate, up and dy, write the two gradients:",
    )
    d.check(
        h_ff + h_ff, "compute.memory_bound.mlp_forward.gelu", "GELU forward: read h_ff, write h_ff:"
    )
    d.check(
        2 * h_ff + h_ff,
        "compute.memory_bound.mlp_backward.gelu",
        "GELU backward: read x and dy, write dx:",
    )
    d.check(
        2 * (a + a_kv) * d_h,
        "compute.memory_bound.rope",
        "rotary embedding, one pass: read and write q and k:",
    )
    d.check(
        2 * (h + k * h) + 2 * (k * h + h),
        "compute.memory_bound.moe_permute",
        "MoE permute (read h, write k copies) and unpermute (read k, write one), forward and"
        " backward:",
    )
    d.check(
        4 * (h + h),
        "compute.memory_bound.sp_relayout",
        "eager DTensor's copies around a block's four sequence-parallel collectives (two"
        " all-gathers, two reduce-scatters on the sequence dimension), one pass: each reads and"
        " writes the whole tensor:",
    )


def _other_kernels(d: Derivation) -> None:
    """Mamba-2's scan and kernels, the loss and unfused softmax."""
    F, eta, B, beta, e = S(
        "peak_flops", "matmul_efficiency", "hbm_bandwidth", "memory_efficiency", "element_bytes"
    )
    h, h_ff, a, a_kv, d_h, V, k, s = S(
        "hidden", "ffn_hidden", "heads", "kv_heads", "head_dim", "vocab", "topk", "seq_len"
    )
    d.check(
        S("flops") / (F * eta),
        "compute.mamba2.scan_time",
        "Mamba-2's chunked scan (SSD) is batched matrix multiplications; its FLOPs at the GEMM"
        " ceiling:",
    )
    H_m, P_m, N_m, G_m = S("ssm_heads", "ssm_head_dim", "ssm_state", "ssm_groups")
    xbc, inner = H_m * P_m + 2 * G_m * N_m, H_m * P_m
    d.check(
        (xbc + xbc) + (2 * inner + inner),
        "compute.memory_bound.mamba2_forward",
        "Mamba-2 forward around the scan: the convolution reads and writes x, B, C; the gated norm"
        " reads y and z, writes one:",
    )
    d.check(
        (2 * xbc + xbc) + (3 * inner + 2 * inner),
        "compute.memory_bound.mamba2_backward",
        "its backward: the convolution reads x, B, C and their gradient and writes one; the gated"
        " norm reads y, z and the output gradient and writes two:",
    )
    d.check(
        V + 2 * V,
        "compute.memory_bound.cross_entropy",
        "cross-entropy: the forward reads the logits, the backward reads them and writes their"
        " gradient:",
    )
    d.check(
        a * s * (2 + 3),
        "compute.memory_bound.scores",
        "softmax over the scores without a fused kernel: forward reads and writes s per head,"
        " backward reads two, writes one:",
    )


def _casts(d: Derivation) -> None:
    """The low-precision casts around a GEMM, in bytes."""
    M, N, K, G = S("gemm_m", "gemm_n", "gemm_k", "gemm_count")
    d.check(
        G * (M * K * (2 + 1 + 1) + M * N * (2 + 1 + 1)),
        "compute.memory_bound.fp8_cast",
        "FP8 casts around a GEMM, in bytes: the input read in 16 bits and written in FP8 with its"
        " transpose, the output gradient likewise:",
    )
    d.check(
        G * (M * K * (2 + 2 + 1 + 1) + M * N * (2 + 2 + 1 + 1)),
        "compute.memory_bound.fp8_current_cast",
        "FP8 casts with per-tensor current scaling: the same, after a pass that reads the 16-bit"
        " tensor for its amax:",
    )
    bw = 1 + sympy.Rational(4, 128)
    d.check(
        G * (M * K * (2 + bw + bw) + M * N * (2 + bw + bw)),
        "compute.memory_bound.fp8_blockwise_cast",
        "blockwise FP8 casts: two copies written (rowwise and columnwise, the 1×128 tiles running"
        " along the reduction dimension), each element a byte and its tile's FP32 scale 4 bytes per"
        " 128:",
    )
    mx, nv = 1 + sympy.Rational(1, 32), sympy.Rational(1, 2) + sympy.Rational(1, 16)
    d.check(
        G * (M * K * (2 + mx + mx) + M * N * (2 + mx + mx)),
        "compute.memory_bound.mxfp8_cast",
        "MXFP8 casts: the same reads, and two copies written (rowwise and columnwise, the blocks"
        " running along the reduction dimension), each element a byte and its 32-element block's"
        " E8M0 scale a byte:",
    )
    d.check(
        G * (M * K * (2 + nv + nv) + M * N * (2 + nv + nv)),
        "compute.memory_bound.nvfp4_cast",
        "NVFP4 casts: two copies of half a byte an element and one E4M3 scale byte per 16"
        " elements:",
    )


def _optimizer(d: Derivation) -> None:
    """One optimizer step's bytes and FLOPs per parameter."""
    M, N, K, G = S("gemm_m", "gemm_n", "gemm_k", "gemm_count")
    F, eta, B, beta, e = S(
        "peak_flops", "matmul_efficiency", "hbm_bandwidth", "memory_efficiency", "element_bytes"
    )
    e_g = S("grad_bytes")
    d.check(
        (4 + 4 + 4 + e_g) + (4 + 4 + 4 + 2),
        "compute.optimizer.bytes_per_param",
        "One Adam step per parameter: read the fp32 master weight, both moments and the gradient;"
        " write the three and the 16-bit weight:",
    )
    d.check(
        (4 + 2 + 2 + e_g) + (4 + 2 + 2 + 2),
        "compute.optimizer.bytes_per_param_bf16_moments",
        "The same with the moments in bf16 (DeepSeek-V3 §3.3.3):",
    )
    e_m = S("moment_bytes")
    lerp, mul, addcmul, unary, addcdiv = (
        2 * e_m + e_g,
        2 * e_m,
        2 * e_m + e_g,
        2 * e_m,
        4 + 2 * e_m + 4,
    )
    d.check(
        lerp + mul + addcmul + 3 * unary + addcdiv,
        "compute.optimizer.bytes_per_param_foreach",
        "An unfused Adam, a pass an operation, each reading its operands and writing its result"
        " (the gradient, addcmul's two operands, read once): PyTorch's foreach AdamW lerps the"
        " first moment, scales and accumulates the second, takes its square root into a new tensor,"
        " divides and offsets it, and updates the master weight:",
    )
    d.check(
        mul + (2 * e_m + e_g) + mul + addcmul + 3 * unary + addcdiv,
        "compute.optimizer.bytes_per_param_decoupled_adamw",
        "Composer's DecoupledAdamW scales the first moment and adds the gradient in two passes"
        " where lerp_ takes one:",
    )
    d.check(
        4 + 4,
        "compute.optimizer.weight_decay_bytes_per_param",
        "Weight decay in an unfused AdamW: the fp32 master weight read and written once more:",
    )
    d.check(
        e_g + 2 * e_m + (4 + 4) + 2,
        "compute.optimizer.bytes_per_param_muon",
        "One Muon step's elementwise kernels per parameter: the gradient read, the momentum read"
        " and written, the fp32 master weight read and written, the 16-bit weight written:",
    )
    d.check(
        5 * (2 * M**2 * N + 2 * M**3 + 2 * M**2 * N),
        "compute.optimizer.newton_schulz_flops",
        "Muon's 5 Newton-Schulz steps on an m×n update (m ≤ n): A = XXᵀ, A², and (bA + cA²)X, 2"
        " FLOPs a multiply-add:",
    )
    C = S("flops")
    d.check(
        C / (F * eta),
        "compute.optimizer.newton_schulz_time",
        "A GPU's share C of those FLOPs, GEMMs in 16 bits at the device's ceiling:",
    )


def _attention_and_stack(d: Derivation) -> None:
    """The causal share of fused attention, its time, and a stack's pace."""
    F, eta, B, beta, e = S(
        "peak_flops", "matmul_efficiency", "hbm_bandwidth", "memory_efficiency", "element_bytes"
    )
    h, h_ff, a, a_kv, d_h, V, k, s = S(
        "hidden", "ffn_hidden", "heads", "kv_heads", "head_dim", "vocab", "topk", "seq_len"
    )
    C = S("flops")
    q = sympy.Symbol("q", positive=True, integer=True)
    pairs = d.step(
        "Causal attention: query q meets keys 1..q, so a sequence has",
        sympy.summation(q, (q, 1, s)),
    )
    share = d.step(
        "pairs against s² for the full matrix; as s grows the share tends to",
        sympy.limit(pairs / s**2, s, sympy.oo),
    )
    d.check(share, "compute.attention.causal_share")
    C, eta_a, kappa = S("flops", "attention_efficiency", "attention_factor")
    d.check(
        C / (F * eta_a * kappa),
        "compute.attention.time",
        "A fused kernel executes those FLOPs at its benchmark efficiency times the share κ_att a"
        " training step keeps:",
    )
    t, eta_s = S("ideal_time", "stack_efficiency")
    d.check(
        t / eta_s,
        "compute.stack_time",
        "A framework runs the kernels of a step, each at the device's measured ceiling, in t; it"
        " realises the share η_stack of that pace (launch gaps, kernels it does not fuse, host"
        " synchronisation), so they take:",
    )
