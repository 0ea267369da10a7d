"""Time of a step's operations: GEMMs by shape, the fused attention kernel, memory-bound kernels at
HBM bandwidth and the optimizer step. FLOPs, not MACs; elements are counted per token and pass."""

from fractions import Fraction

from ..core.algebra import ceiling
from ._catalogue import S, define

M, N, K, G = S("gemm_m", "gemm_n", "gemm_k", "gemm_count")
Tm, Tn, sms = S("tile_m", "tile_n", "sms")
F, eta, B, beta, e = S(
    "peak_flops", "matmul_efficiency", "hbm_bandwidth", "memory_efficiency", "element_bytes"
)
h, h_ff, a, a_kv, d_h, V = S("hidden", "ffn_hidden", "heads", "kv_heads", "head_dim", "vocab")

GUIDE = (
    "NVIDIA, Matrix Multiplication Background User's Guide, DU-09799-001 (2023) §3.1 tile"
    " quantization, §3.2 wave quantization"
)
ROOFLINE = "Williams, Waterman and Patterson 2009, Roofline, CACM 52(4) 65-76"
DERIVED = "derived: derivations/op_time.py"

tiles = G * ceiling(M / Tm) * ceiling(N / Tn)
wave = G * M * N / (ceiling(tiles / sms) * sms * Tm * Tn)
define(
    "compute.gemm.wave_efficiency",
    wave,
    "",
    f"{GUIDE}; {DERIVED}",
    (
        "each SM computes one T_m × T_n output tile at a time; a partial tile costs a whole one",
        "the G GEMMs of a grouped kernel share the waves",
    ),
    "share of the SMs' tile slots that compute useful outputs (tile and wave quantisation)",
)
define(
    "compute.gemm.flops",
    2 * G * M * N * K,
    "FLOP",
    f"{GUIDE} ch. 1; {DERIVED}",
    ("2 FLOPs per multiply-add",),
    "FLOPs of G GEMMs of shape M×K by K×N",
    coefficient_unit="FLOP",
)
ASSUMPTIONS = (
    (
        "the math and the operand traffic do not overlap (the sum form of the roofline: efficiency "
        "saturates as I/(I + I*) in arithmetic intensity I, I* = F·η·W/(B_hbm·η_hbm))"
    ),
    "each operand and the output cross HBM once, in element_bytes per element",
)
define(
    "compute.gemm.math_time",
    2 * G * M * N * K / (F * eta * wave),
    "s",
    f"{GUIDE}; {ROOFLINE}; {DERIVED}",
    ASSUMPTIONS + ("η: the efficiency of a large GEMM that fills whole waves",),
    "time of G GEMMs' multiply-adds at the wave-quantised fraction of peak",
    coefficient_unit="FLOP",
)
define(
    "compute.gemm.math_time.unquantised",
    2 * G * M * N * K / (F * eta),
    "s",
    f"{ROOFLINE}; {DERIVED}",
    ASSUMPTIONS + ("no tile or wave quantisation (an accelerator without SM counts)",),
    "time of G GEMMs' multiply-adds at a fixed fraction of peak",
    coefficient_unit="FLOP",
)
define(
    "compute.gemm.memory_time",
    e * G * (M * K + K * N + M * N) / (B * beta),
    "s",
    f"{ROOFLINE}; {DERIVED}",
    ASSUMPTIONS,
    "time of G GEMMs' operand and output traffic at HBM bandwidth",
)

Q = S("kernel_bytes")
define(
    "compute.memory_bound.time",
    Q / (B * beta),
    "s",
    f"{ROOFLINE}; {DERIVED}",
    ("a streaming kernel: its bytes at the achievable HBM bandwidth, its arithmetic hidden",),
    "time of memory-bound kernels that move Q bytes",
)

COUNT = (
    "Megatron-LM / Transformer Engine kernel sequence of a pre-norm block; bias-dropout-add and"
    " the activation fused, each fused kernel reads its inputs and writes its outputs once;"
    f" {DERIVED}"
)
define(
    "compute.memory_bound.residual_forward",
    10 * h,
    "",
    COUNT,
    ("two norms (read h, write h) and two residual adds (read 2h, write h)",),
    "elements per token the forward's residual-stream kernels of one block move",
)
define(
    "compute.memory_bound.norms_forward",
    4 * h,
    "",
    COUNT,
    ("two norms (read h, write h): compute.memory_bound.residual_forward's norms",),
    "elements per token one block's two norms move forward (again, where they are recomputed)",
)
define(
    "compute.memory_bound.residual_backward",
    12 * h,
    "",
    COUNT,
    (
        (
            "two norm backwards (read x and dy, write dx) and two residual-gradient adds (read 2h,"
            " write h)"
        ),
    ),
    "elements per token the backward's residual-stream kernels of one block move",
)
define(
    "compute.memory_bound.mlp_forward.swiglu",
    3 * h_ff,
    "",
    COUNT,
    ("SiLU(gate)·up: read 2h_ff, write h_ff",),
    "elements per token of a SwiGLU activation's forward",
)
define(
    "compute.memory_bound.mlp_backward.swiglu",
    5 * h_ff,
    "",
    COUNT,
    ("read gate, up and dy, write two gradients",),
    "elements per token of a SwiGLU activation's backward",
)
define(
    "compute.memory_bound.mlp_forward.gelu",
    2 * h_ff,
    "",
    COUNT,
    ("GELU: read h_ff, write h_ff",),
    "elements per token of a GELU activation's forward",
)
define(
    "compute.memory_bound.mlp_backward.gelu",
    3 * h_ff,
    "",
    COUNT,
    ("read x and dy, write dx",),
    "elements per token of a GELU activation's backward",
)
define(
    "compute.memory_bound.rope",
    2 * (a + a_kv) * d_h,
    "",
    COUNT,
    ("rotary embedding of queries and keys: read and write each (forward; the backward likewise)",),
    "elements per token one pass of rotary embeddings moves",
)
define(
    "compute.memory_bound.sp_relayout",
    8 * h,
    "",
    "pytorch/torchtitan pull request #437 (2024): sequence-parallel all-gathers and"
    " reduce-scatters on dim 1 (the sequence) of [batch, sequence, hidden] instead of a folded dim"
    " 0 incur an extra aten.cat after each collective (two of them about 0.18 ms of a 3 ms FFN at"
    " 8K tokens on H100); torchtitan parallelize_llama.py apply_tp, NOTE on folding the batch and"
    f" sequence dimensions; eager and compiled: analytic.reference.sequence_parallel; {DERIVED}",
    (
        (
            "a block's four sequence-parallel collectives (two all-gathers, two reduce-scatters)"
            " each copy the whole gathered tensor once: read h, write h per token of the microbatch"
        ),
        (
            "one pass: the forward (a recomputed forward again), or the backward, whose collectives"
            " are the forward's transposed"
        ),
        "async TP's fused kernels, which move the dimension to the front and back, counted alike",
        "the output layer's all-gather not counted",
    ),
    "elements per token the copies around one block's sequence-parallel collectives move in one"
    " pass, where they gather and scatter along the sequence dimension",
)
define(
    "compute.memory_bound.moe_permute",
    4 * (1 + S("topk")) * h,
    "",
    f"Megatron-Core MoE token dispatcher (permute before the experts, unpermute after); {DERIVED}",
    (
        (
            "permute reads h and writes k copies, unpermute reads k and writes their weighted sum;"
            " the backward likewise"
        ),
    ),
    "elements per token the MoE permutations of one block move",
)
_inner, _xbc = S("ssm_heads") * S("ssm_head_dim"), S("ssm_heads") * S("ssm_head_dim") + 2 * S(
    "ssm_groups"
) * S("ssm_state")
define(
    "compute.memory_bound.mamba2_forward",
    2 * _xbc + 3 * _inner,
    "",
    "state-spaces/mamba mamba_ssm/ops/triton/ssd_combined.py (mamba_split_conv1d_scan_combined:"
    f" the causal convolution and the gated RMSNorm around the scan); {DERIVED}",
    (
        "the convolution reads x, B and C (H·P + 2G·N) and writes them",
        "the gated norm reads the scan's output and z (2H·P) and writes H·P",
        "the scan itself is timed by its FLOPs",
    ),
    "elements per token the forward's memory-bound kernels of one Mamba-2 layer move",
)
define(
    "compute.memory_bound.mamba2_backward",
    3 * _xbc + 5 * _inner,
    "",
    f"state-spaces/mamba mamba_ssm/ops/triton/ssd_combined.py (its backward); {DERIVED}",
    (
        "the convolution's backward reads x, B, C and their gradient and writes the input gradient",
        "the gated norm's reads y, z and the output gradient and writes the gradients of y and z",
    ),
    "elements per token the backward's memory-bound kernels of one Mamba-2 layer move",
)
define(
    "compute.memory_bound.cross_entropy",
    3 * V,
    "",
    f"Megatron-LM fused vocab-parallel cross-entropy; {DERIVED}",
    ("forward reads the logits, backward reads them again and writes their gradient",),
    "elements per token of the softmax cross-entropy, forward and backward",
)
define(
    "compute.memory_bound.scores",
    5 * a * S("seq_len"),
    "",
    f"Megatron-LM fused scale-mask-softmax (no FlashAttention); {DERIVED}",
    ("forward reads and writes the s scores of each head, backward reads two and writes one",),
    "elements per token the attention scores' softmax moves without a fused attention kernel",
)
define(
    "compute.memory_bound.fp8_cast",
    4 * G * M * (N + K),
    "byte",
    "NVIDIA Transformer Engine DelayedScaling recipe (the scale from the amax history, the amax of"
    " this tensor recorded by the cast-transpose kernel itself); Micikevicius et al. 2022, FP8"
    f" formats, arXiv 2209.05433; {DERIVED}",
    (
        (
            "forward: the M×K input cast to FP8 with its transpose for the weight gradient (read 2"
            " bytes, write 1 + 1)"
        ),
        "backward: the M×N output gradient likewise",
        "weights cast once a step (not counted)",
    ),
    "bytes the FP8 casts around G GEMMs of shape M×K by K×N move (delayed scaling)",
    coefficient_unit="byte",
)
define(
    "compute.memory_bound.fp8_current_cast",
    6 * G * M * (N + K),
    "byte",
    "NVIDIA Transformer Engine Float8CurrentScaling recipe (one FP32 scale per tensor from its own"
    " amax: transformer_engine/pytorch/tensor/float8_tensor.py, Float8CurrentScalingQuantizer,"
    " tex.compute_amax before the cast); pytorch/torchtitan docs/float8.md (tensor-wise scaling"
    f" with dynamic scales, torchao Float8Linear); {DERIVED}",
    (
        (
            "forward: the M×K input read once for its amax (2 bytes), then cast to FP8 with its"
            " transpose (read 2, write 1 + 1)"
        ),
        "backward: the M×N output gradient likewise",
        "weights cast once a step (not counted)",
    ),
    "bytes the FP8 casts around G GEMMs of shape M×K by K×N move (per-tensor current scaling)",
    coefficient_unit="byte",
)
BLOCKWISE = (
    "DeepSeek-V3 Technical Report, arXiv 2412.19437 §3.3.2 (activations scaled per 1×128 tile,"
    " weights per 128×128 block, FP32 scales); NVIDIA Transformer Engine docs, FP8 Blockwise"
    " Scaling (Float8BlockScaling: one FP32 scale per 128 elements along a row of the operand, so"
    f" the transposed copy a backward GEMM reads is quantised on its own); {DERIVED}"
)
define(
    "compute.memory_bound.fp8_blockwise_cast",
    (2 + 2 * (1 + Fraction(1, 32))) * G * M * (N + K),
    "byte",
    BLOCKWISE,
    (
        (
            "forward: the M×K input read in 16 bits (2 bytes) and written twice in FP8, rowwise"
            " and columnwise, each element 1 byte and its 128-element tile's FP32 scale 4/128 of a"
            " byte"
        ),
        "backward: the M×N output gradient likewise",
        "weights cast once a step (not counted)",
    ),
    "bytes the blockwise FP8 casts around G GEMMs of shape M×K by K×N move",
    coefficient_unit="byte",
)
MX = (
    "Open Compute Project, OCP Microscaling Formats (MX) Specification v1.0 (2023) §5: MXFP8, 32"
    " elements sharing one E8M0 scale; NVIDIA Transformer Engine docs, FP8 and FP4 recipes"
    " (MXFP8BlockScaling): 1×32 blocks along the reduction dimension, so a tensor read transposed"
    f" by a backward GEMM is quantised again (rowwise and columnwise copies); {DERIVED}"
)
define(
    "compute.memory_bound.mxfp8_cast",
    (2 + 2 * (1 + Fraction(1, 32))) * G * M * (N + K),
    "byte",
    MX,
    (
        (
            "forward: the M×K input read in 16 bits (2 bytes) and written twice in MXFP8, rowwise"
            " and columnwise, each element 1 byte and its block's scale 1/32 of a byte"
        ),
        "backward: the M×N output gradient likewise",
        "weights cast once a step (not counted)",
    ),
    "bytes the MXFP8 casts around G GEMMs of shape M×K by K×N move",
    coefficient_unit="byte",
)
NV = (
    "NVIDIA 2025, Pretraining Large Language Models with NVFP4, arXiv 2509.25149 §2-§4 (E2M1"
    " elements, one E4M3 scale per 16, an FP32 scale per tensor; 2-D 16×16 blocks for weights;"
    " random Hadamard transforms on the weight-gradient GEMM's inputs; stochastic rounding of"
    " gradients); NVIDIA Transformer Engine docs (NVFP4BlockScaling: the transform and the"
    f" rounding fused into the cast); {DERIVED}"
)
define(
    "compute.memory_bound.nvfp4_cast",
    (2 + 2 * (Fraction(1, 2) + Fraction(1, 16))) * G * M * (N + K),
    "byte",
    NV,
    (
        (
            "forward: the M×K input read in 16 bits (2 bytes) and written twice in NVFP4, rowwise"
            " and columnwise, each element half a byte and its block's scale 1/16 of a byte (the"
            " per-tensor scale not counted)"
        ),
        (
            "backward: the M×N output gradient likewise; the random Hadamard transform of the"
            " weight-gradient inputs and the stochastic rounding run inside the same cast"
        ),
        "weights cast once a step (not counted)",
    ),
    "bytes the NVFP4 casts around G GEMMs of shape M×K by K×N move",
    coefficient_unit="byte",
)

ADAM = (
    "Kingma and Ba 2015, Adam, Algorithm 1; Micikevicius et al. 2018, Mixed Precision Training,"
    f" arXiv 1710.03740 §3.1 (fp32 master weights); {DERIVED}"
)
define(
    "compute.optimizer.bytes_per_param",
    26 + S("grad_bytes"),
    "byte/parameter",
    ADAM,
    (
        "reads the fp32 master weight, both moments and the gradient (e_g bytes)",
        "writes the master weight, both moments and the 16-bit weight (4 + 4 + 4 + 2)",
    ),
    "HBM bytes one Adam step moves per parameter of its shard",
    coefficient_unit="byte/parameter",
)
define(
    "compute.optimizer.bytes_per_param_bf16_moments",
    18 + S("grad_bytes"),
    "byte/parameter",
    f"{ADAM}; DeepSeek-V3 arXiv 2412.19437 §3.3.3 (bf16 moments)",
    (
        "reads the fp32 master weight, both bf16 moments and the gradient (e_g bytes)",
        "writes the master weight, both moments and the 16-bit weight (4 + 2 + 2 + 2)",
    ),
    "HBM bytes one Adam step with bf16 moments moves per parameter of its shard",
    coefficient_unit="byte/parameter",
)
TORCH_ADAM = "PyTorch torch/optim/adam.py _multi_tensor_adam (AdamW, foreach=True, capturable off)"
COUNTED = "counted on PyTorch's dispatched operations by analytic.reference.optimizer_traffic"
COMPOSER_ADAM = (
    "mosaicml/composer composer/optim/decoupled_weight_decay.py DecoupledAdamW.adamw, the "
    "decoupled_adamw of mosaicml/llm-foundry's yamls"
)
PASSES = (
    "each pass reads its operands and writes its result in HBM (nothing stays in cache between"
    " passes)"
)
define(
    "compute.optimizer.bytes_per_param_foreach",
    8 + 14 * S("moment_bytes") + 2 * S("grad_bytes"),
    "byte/parameter",
    f"{TORCH_ADAM}; {COUNTED}; {DERIVED}",
    (
        "e_m: bytes of a moment (4 in fp32), e_g of a gradient; the fp32 master weight 4",
        (
            "_foreach_lerp_ of m (2e_m + e_g), _foreach_mul_ and _foreach_addcmul_ of v (2e_m; 2e_m"
            " + e_g: the gradient, both its operands, read once), _foreach_sqrt of v into a new"
            " tensor, _foreach_div_ and _foreach_add_ on it (2e_m each), _foreach_addcdiv_ of the"
            " master weight (4 + 2e_m + 4); PyTorch's for-loop AdamW runs the same passes"
        ),
        "weight decay not counted (compute.optimizer.weight_decay_bytes_per_param)",
        PASSES,
    ),
    "HBM bytes a foreach Adam step moves per parameter of its shard",
    coefficient_unit="byte/parameter",
)
define(
    "compute.optimizer.bytes_per_param_decoupled_adamw",
    8 + 16 * S("moment_bytes") + 2 * S("grad_bytes"),
    "byte/parameter",
    f"{COMPOSER_ADAM}; {DERIVED}",
    (
        "e_m: bytes of a moment (4 in fp32), e_g of a gradient; the fp32 master weight 4",
        (
            "a tensor at a time: exp_avg.mul_ and .add_ (2e_m; 2e_m + e_g), exp_avg_sq.mul_ and"
            " .addcmul_ (2e_m; 2e_m + e_g), exp_avg_sq.sqrt(), its division and .add_(eps) (2e_m"
            " each), param.addcdiv_ (4 + 2e_m + 4)"
        ),
        "weight decay not counted (compute.optimizer.weight_decay_bytes_per_param)",
        PASSES,
    ),
    "HBM bytes a step of Composer's DecoupledAdamW moves per parameter of its shard",
    coefficient_unit="byte/parameter",
)
define(
    "compute.optimizer.weight_decay_bytes_per_param",
    8,
    "byte/parameter",
    f"{TORCH_ADAM} (_foreach_mul_ of the parameters by 1 - lr·λ); {COMPOSER_ADAM} (param.mul_);"
    f" {COUNTED}; {DERIVED}",
    (
        (
            "an unfused AdamW with weight decay scales the fp32 master weight in a pass of its own:"
            " read 4, write 4"
        ),
        "a fused step decays in its one pass",
    ),
    "HBM bytes an unfused AdamW's weight decay moves per parameter of its shard",
    coefficient_unit="byte/parameter",
)
MUON = (
    "Jordan 2024, Muon (kellerjordan.github.io/posts/muon): M ← μM + G; X ← M/‖M‖, then 5"
    " steps of X ← aX + (bA + cA²)X with A = XXᵀ on the m×n matrix (m ≤ n, transposed"
    f" where taller); Liu et al. 2025, arXiv 2502.16982 §2; {DERIVED}"
)
define(
    "compute.optimizer.bytes_per_param_muon",
    10 + S("grad_bytes") + 2 * S("moment_bytes"),
    "byte/parameter",
    MUON,
    (
        (
            "reads the gradient (e_g bytes) and the momentum, writes the momentum (2·e_m), reads"
            " and writes the fp32 master weight (8) and writes the 16-bit weight (2)"
        ),
        "the Newton-Schulz steps are GEMMs, timed apart (compute.optimizer.newton_schulz_flops)",
    ),
    "HBM bytes one Muon step's elementwise kernels move per parameter it updates",
    coefficient_unit="byte/parameter",
)
define(
    "compute.optimizer.newton_schulz_flops",
    5 * (4 * M**2 * N + 2 * M**3),
    "FLOP",
    MUON,
    "an m×n matrix, m ≤ n (M_g = m, N_g = n): each of the 5 steps forms A = XXᵀ (2m²n), A²"
    " (2m³) and (bA + cA²)X (2m²n); the scalings and sums not counted",
    "FLOPs of Muon's Newton-Schulz orthogonalisation of one m×n update",
    coefficient_unit="FLOP",
)
define(
    "compute.optimizer.newton_schulz_time",
    S("flops") / (F * eta),
    "s",
    MUON,
    (
        (
            "C: the Newton-Schulz FLOPs this GPU runs (compute.optimizer.newton_schulz_flops of the"
            " matrices it updates)"
        ),
        "GEMMs in 16 bits at the device's GEMM ceiling η_mm over its peak F",
    ),
    "seconds of a GPU's share of Muon's Newton-Schulz steps",
)
define(
    "compute.optimizer.device_params",
    (1 - S("optimizer_offload")) * S("params"),
    "parameter",
    "NVIDIA/Megatron-LM megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py"
    " (HybridDeviceOptimizer: the device's optimizer steps the parameters not offloaded); DeepSpeed"
    " ZeRO-Offload (DeepSpeedCPUAdam steps the offloaded partition on the host)",
    (
        "Ψ: the parameters this rank's optimizer updates (its ZeRO shard)",
        (
            "the host's share (its gradients copied to the host, CPU Adam, the parameters copied"
            " back) is not timed"
        ),
    ),
    "parameters whose Adam step runs on the device",
)
define(
    "compute.attention.time",
    S("flops") / (F * S("attention_efficiency") * S("attention_factor")),
    "s",
    "Dao 2023, FlashAttention-2, arXiv 2307.08691 §4; Shah et al. 2024, FlashAttention-3, arXiv"
    f" 2407.08608 §4; {DERIVED}",
    (
        "C: the FLOPs the fused kernel executes (causal: half the score matrix)",
        (
            "η_att: the kernel's efficiency in its own benchmarks; κ_att: the share of it a"
            " training step keeps (causal masks, grouped KV heads, context-parallel chunks), fitted"
            " on published step times"
        ),
    ),
    "time of the fused attention kernel",
)
define(
    "compute.mamba2.scan_time",
    S("flops") / (F * eta),
    "s",
    "Dao & Gu 2024, Transformers are SSMs, arXiv 2405.21060 §6 (the SSD algorithm: a chunked scan"
    f" as batched matrix multiplications); {DERIVED}",
    (
        "C: the scan's FLOPs (compute.mamba2_scan_flops_per_token)",
        "run at the 16-bit GEMM ceiling η: no measured efficiency of the SSD kernels is published",
    ),
    "time of Mamba-2's chunked scan",
)
define(
    "compute.stack_time",
    S("ideal_time") / S("stack_efficiency"),
    "s",
    "derived: derivations/op_time.py; the efficiency fitted per stack on published step times "
    "(analytic calibrate --published)",
    (
        "t: the op-level time of the step's kernels at the device's measured ceilings",
        (
            "η_stack: what the framework realises of it (launch gaps, unfused or slower kernels,"
            " host synchronisation, power caps), one constant per stack family"
        ),
    ),
    "time of a step's kernels as a stack runs them",
)
define(
    "compute.attention.causal_share",
    Fraction(1, 2),
    "",
    "Dao 2023, FlashAttention-2, arXiv 2307.08691 §3.1.1 (causal masking skips the blocks above"
    " the diagonal)",
    ("long sequences: the diagonal blocks' share is neglected",),
    "share of the full score matrix a causal fused kernel computes",
)
define(
    "compute.attention.window_share",
    S("sliding_window") / S("seq_len") * (1 - S("sliding_window") / (2 * S("seq_len"))),
    "",
    "Beltagy et al. 2020, Longformer, arXiv 2004.05150 §3.1 (a sliding window of w keys: O(n·w));"
    " Jiang et al. 2023, Mistral 7B, arXiv 2310.06825 §2 (each token attends to at most W tokens);"
    " derived: the band of width W below the diagonal of the s × s score matrix covers Ws −"
    " W²/2 of its s² entries",
    (
        (
            "W ≤ s (a window as long as the sequence is the causal share, 1/2); the diagonal"
            " blocks' share neglected, as in the causal share"
        ),
        (
            "a fused kernel that skips the blocks outside the band (FlashAttention-2's local "
            "attention); unfused attention computes the whole score matrix"
        ),
    ),
    "share of the full score matrix a sliding-window fused kernel computes",
    domain=(
        (
            S("sliding_window") <= S("seq_len"),
            "a window longer than the sequence: the layer is causal",
        ),
    ),
)
