"""Memory per accelerator: model states (ZeRO) and activations (Korthikanti et al.)."""

from fractions import Fraction

from ..core.algebra import Min, Piecewise
from ._catalogue import S, define

Psi, Nd = S("params", "dp")
s, b, h, a, t, V, e = S(
    "seq_len", "microbatch_size", "hidden", "heads", "tp", "vocab", "element_bytes"
)
a_kv, d_h, h_ff = S("kv_heads", "head_dim", "ffn_hidden")

ZERO = "Rajbhandari et al. 2020, ZeRO, arXiv 1910.02054"
KORTHIKANTI = "Korthikanti et al. 2022, Reducing Activation Recomputation, arXiv 2205.05198"
ADAM = (
    (
        "mixed-precision Adam: 2 bytes fp16/bf16 parameters + 2 bytes gradients + K=12 bytes "
        "optimizer state (fp32 master parameters, momentum, variance)"
    ),
)
KORTHIKANTI_ASSUMPTIONS = (
    "GPT layer: multi-head attention, GELU MLP of 4h, two LayerNorms, dropout",
    "16-bit activations, 1-byte dropout masks",
    "attention scores and softmax stored (no flash attention)",
)
FLASH_ASSUMPTIONS = (
    (
        "16-bit activations; flash attention: Q, K, V, the attention output and the fp32 "
        "softmax statistics (4 bytes per row) are saved, no s^2 tensor"
    ),
    (
        "saved: both norm inputs, the QKV and MLP matmul inputs (8sbh), Q (2sb·a·d_h), "
        "K and V (2sb·a_kv·d_h each), the attention output (2sb·a·d_h)"
    ),
    "no dropout; norm statistics (fp32, one value per row) not counted",
)

define(
    "memory.model_states.zero0",
    16 * Psi,
    "byte",
    f"{ZERO} §3.1 (2Ψ + 2Ψ + KΨ, K = 12)",
    ADAM + ("replicated on every data-parallel rank",),
    "model states per GPU, plain data parallelism",
    coefficient_unit="byte",
)
define(
    "memory.model_states.zero1",
    4 * Psi + 12 * Psi / Nd,
    "byte",
    f"{ZERO} §5.1, Fig. 1 (P_os)",
    ADAM + ("optimizer state sharded over N_d",),
    "model states per GPU, ZeRO stage 1",
    coefficient_unit="byte",
)
define(
    "memory.model_states.zero2",
    2 * Psi + 14 * Psi / Nd,
    "byte",
    f"{ZERO} §5.2, Fig. 1 (P_os+g: 2Ψ + (2+K)Ψ/N_d)",
    ADAM + ("optimizer state and gradients sharded over N_d",),
    "model states per GPU, ZeRO stage 2",
    coefficient_unit="byte",
)
define(
    "memory.model_states.zero3",
    16 * Psi / Nd,
    "byte",
    f"{ZERO} §5.3 (P_os+g+p)",
    ADAM + ("parameters, gradients and optimizer state sharded over N_d",),
    "model states per GPU, ZeRO stage 3",
    coefficient_unit="byte",
)
define(
    "memory.zero3_gathered",
    3 * Psi * S("element_bytes"),
    "byte",
    "PyTorch FSDP notes, docs.pytorch.org/docs/stable/notes/fsdp.html (prefetching allocates the"
    " next unit's all-gather output while the current one is in use); Zhao et al. 2023, PyTorch"
    " FSDP, arXiv 2304.11277",
    (
        "Ψ: parameters of one unit (a transformer block) on this GPU",
        "two units of parameters gathered at once (the one computing and the one prefetched)",
        "one unit of gradients before its reduce-scatter",
    ),
    "ZeRO-3's working set: unsharded parameters and gradients of the units in flight",
)
define(
    "memory.zero3_held",
    2 * Psi * S("element_bytes"),
    "byte",
    "PyTorch torch.distributed.pipelining PipelineStage.backward_maybe_with_nosync (an FSDP stage"
    " turns reshard-after-backward and gradient sync off until the step's last backward);"
    " torchtitan apply_fsdp (under pipeline parallelism reshard_after_forward is off 'to avoid"
    " per-microbatch all-gathers'); derived: derivations/zero3_pipeline.py",
    (
        "Ψ: parameters of the pipeline stage on this GPU",
        (
            "ZeRO-3 under a pipeline schedule: the stage's parameters are gathered at its first"
            " microbatch and kept, with their unsharded gradients, until the step's last backward"
        ),
    ),
    "ZeRO-3's stage held unsharded through a pipelined step: its parameters and gradients",
)
define(
    "memory.zero3_held_fp32_gradients",
    6 * Psi,
    "byte",
    "PyTorch torch/distributed/fsdp/_fully_shard/_fsdp_param.py to_accumulated_grad_if_needed (with"
    " gradient sync off, FSDP2 accumulates a parameter's unsharded gradient in its reduce_dtype);"
    " derived: derivations/zero3_pipeline.py",
    (
        "Ψ: parameters of the pipeline stage on this GPU",
        (
            "ZeRO-3 (FSDP2) under a pipeline schedule with MixedPrecisionPolicy(param_dtype=bf16,"
            " reduce_dtype=fp32): the stage's 16-bit parameters (2Ψ) and fp32 accumulated"
            " gradients (4Ψ) held until the last backward"
        ),
    ),
    "ZeRO-3's stage held unsharded through a pipelined step, gradients accumulated in fp32",
    coefficient_unit="byte",
)
define(
    "memory.model_states.weights",
    2 * Psi,
    "byte",
    f"{ZERO} §3.1 (fp16/bf16 parameters, 2Ψ)",
    ADAM,
    "16-bit parameters (unsharded)",
    coefficient_unit="byte",
)
define(
    "memory.model_states.gradients",
    2 * Psi,
    "byte",
    f"{ZERO} §3.1 (fp16/bf16 gradients, 2Ψ)",
    ADAM,
    "16-bit gradients (unsharded)",
    coefficient_unit="byte",
)
define(
    "memory.model_states.gradients_fp32",
    4 * Psi,
    "byte",
    "Megatron-LM docs, distributed optimizer (bf16 parameters, fp32 main gradients, fp32 master"
    " parameters and Adam state: 18 bytes per parameter); Llama 3 arXiv 2407.21783 §3.3.2"
    " (gradients accumulated in fp32)",
    ("fp32 gradient accumulation buffers (main_grad), reduced across data-parallel ranks in fp32",),
    "fp32 gradients (unsharded)",
    coefficient_unit="byte",
)
define(
    "memory.model_states.optimizer_bf16_moments",
    8 * Psi,
    "byte",
    "DeepSeek-V3 arXiv 2412.19437 §3.3.3 (Adam's moments in bf16, master weights in fp32);"
    " NVIDIA/Megatron-LM --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype"
    " bf16",
    ("fp32 master parameters (4Ψ) and Adam's two moments in bf16 (2Ψ each)",),
    "Adam state with bf16 moments and fp32 master parameters (unsharded)",
    coefficient_unit="byte",
)
MUON = (
    "Jordan 2024, Muon: an optimizer for hidden layers in neural networks"
    " (kellerjordan.github.io/posts/muon: one momentum buffer, its update orthogonalised by 5"
    " Newton-Schulz steps); Liu et al. 2025, Muon is Scalable for LLM Training, arXiv 2502.16982"
    " §2 (fp32 master weights; AdamW for the embedding and the output layer); NVIDIA 2026,"
    " Advancing emerging optimizers for accelerated LLM training with NVIDIA Megatron"
    " (Megatron-Core's layer-wise distributed optimizer: each data-parallel rank updates whole"
    " matrices)"
)
define(
    "memory.model_states.optimizer_muon",
    (4 + S("moment_bytes")) * Psi,
    "byte",
    MUON,
    (
        (
            "Ψ: the parameters Muon updates: every matrix of the blocks (the embedding and the"
            " output layer take AdamW, memory.model_states.optimizer; norm gains and biases, under"
            " 0.1 %, counted with the matrices)"
        ),
        "an fp32 master weight (4 bytes) and one momentum buffer of e_m bytes a parameter",
    ),
    "Muon's state and fp32 master parameters (unsharded)",
    coefficient_unit="byte",
)
define(
    "memory.model_states.optimizer",
    12 * Psi,
    "byte",
    f"{ZERO} §3.1 (KΨ, K = 12)",
    ADAM,
    "Adam state and fp32 master parameters (unsharded)",
    coefficient_unit="byte",
)

define(
    "memory.fp8_weight_cache",
    2 * Psi,
    "byte",
    "NVIDIA/Megatron-LM megatron/core/extensions/transformer_engine.py (TELinear and its kin pass"
    " is_first_microbatch to Transformer Engine unless disable_parameter_transpose_cache, off by"
    " default); NVIDIA TransformerEngine transformer_engine/pytorch/module/linear.py"
    " (get_weight_workspace with cache_name 'weight': the FP8 weight and its transpose, made at a"
    " step's first microbatch and kept for the rest)",
    (
        (
            "Ψ: the parameters of this GPU's Transformer Engine linears: all but the embedding and"
            " the output layer (their norms and an MoE layer's router, under 0.1% of a layer,"
            " counted with them)"
        ),
        (
            "1 byte for the FP8 weight and 1 for its transpose (the backward's GEMM reads it"
            " transposed)"
        ),
        (
            "under ZeRO-3 the weights are gathered block by block: what Transformer Engine caches"
            " of them is not counted"
        ),
        (
            "with quantized primary weights (Megatron's --fp8-param-gather; Layout"
            " quantized_params) these are the parameters: a plan keeps no 16-bit copy of them"
        ),
    ),
    "Transformer Engine's cached FP8 weights and transposes on one GPU",
    coefficient_unit="byte",
)
define(
    "memory.mxfp8_weight_cache",
    2 * (1 + Fraction(1, 32)) * Psi,
    "byte",
    "as memory.fp8_weight_cache; OCP Microscaling Formats (MX) Specification v1.0 §5 (MXFP8: one"
    " E8M0 scale per 32 elements); NVIDIA Transformer Engine docs (MXFP8BlockScaling keeps rowwise"
    " and columnwise quantised weights: the blocks run along the reduction dimension)",
    (
        "Ψ: the parameters of this GPU's Transformer Engine linears, as memory.fp8_weight_cache",
        "two copies, rowwise and columnwise, each 1 byte an element and 1/32 of a byte of scale",
    ),
    "Transformer Engine's cached MXFP8 weights on one GPU",
    coefficient_unit="byte",
)
define(
    "memory.fp8_blockwise_weight_cache",
    2 * (1 + Fraction(1, 4096)) * Psi,
    "byte",
    "as memory.fp8_weight_cache; DeepSeek-V3 Technical Report, arXiv 2412.19437 §3.3.2 (weights"
    " scaled per 128×128 block, FP32 scales); NVIDIA Transformer Engine docs, FP8 Blockwise"
    " Scaling (Float8BlockScaling)",
    (
        "Ψ: the parameters of this GPU's Transformer Engine linears, as memory.fp8_weight_cache",
        (
            "two copies, the weight and its transpose, each 1 byte an element and 4/16384 of a byte"
            " of FP32 scale"
        ),
    ),
    "Transformer Engine's cached blockwise-FP8 weights on one GPU",
    coefficient_unit="byte",
)
define(
    "memory.nvfp4_weight_cache",
    2 * (Fraction(1, 2) + Fraction(1, 16)) * Psi,
    "byte",
    "as memory.fp8_weight_cache; NVIDIA 2025, Pretraining Large Language Models with NVFP4, arXiv"
    " 2509.25149 §4 (weights quantised in 2-D 16×16 blocks, the same in the forward and the"
    " backward); NVIDIA Transformer Engine docs (NVFP4BlockScaling)",
    (
        "Ψ: the parameters of this GPU's Transformer Engine linears, as memory.fp8_weight_cache",
        (
            "two copies, rowwise and columnwise, each half a byte an element and 1/16 of a byte of"
            " E4M3 scale (one FP32 scale per tensor not counted)"
        ),
    ),
    "Transformer Engine's cached NVFP4 weights on one GPU",
    coefficient_unit="byte",
)
define(
    "memory.activations.layer",
    s * b * h * (34 + 5 * a * s / h),
    "byte",
    f"{KORTHIKANTI} §4.1 eq. (1)",
    KORTHIKANTI_ASSUMPTIONS,
    "activations saved by one layer, no parallelism",
    coefficient_unit="byte",
)
define(
    "memory.activations.layer_tp",
    s * b * h * (10 + 24 / t + 5 * a * s / (h * t)),
    "byte",
    f"{KORTHIKANTI} §4.2.1 eq. (2)",
    KORTHIKANTI_ASSUMPTIONS
    + ("10sbh (LayerNorm inputs, dropout masks, block inputs) not split by TP",),
    "activations of one layer with tensor parallelism",
    coefficient_unit="byte",
)
define(
    "memory.activations.layer_tp_sp",
    s * b * h / t * (34 + 5 * a * s / h),
    "byte",
    f"{KORTHIKANTI} §4.2.2 eq. (4)",
    KORTHIKANTI_ASSUMPTIONS
    + ("sequence parallelism splits the LayerNorm/dropout regions along s",),
    "activations of one layer with tensor and sequence parallelism",
    coefficient_unit="byte",
)
define(
    "memory.activations.layer_tp_selective",
    s * b * h * (10 + 24 / t),
    "byte",
    f"{KORTHIKANTI} §5 Table 2",
    KORTHIKANTI_ASSUMPTIONS
    + ("selective recomputation of QK^T, softmax, softmax dropout, attention over V",),
    "activations of one layer, TP with selective recomputation",
    coefficient_unit="byte",
)
define(
    "memory.activations.layer_tp_sp_selective",
    34 * s * b * h / t,
    "byte",
    f"{KORTHIKANTI} §5 Table 2, eq. (6)",
    KORTHIKANTI_ASSUMPTIONS
    + ("selective recomputation of QK^T, softmax, softmax dropout, attention over V",),
    "activations of one layer, TP + SP with selective recomputation",
    coefficient_unit="byte",
)
define(
    "memory.activations.layer_full_recompute",
    2 * s * b * h,
    "byte",
    f"{KORTHIKANTI} §5 Table 2",
    ("only the 16-bit layer input is kept; the layer is recomputed in the backward pass",),
    "activations of one layer with full recomputation",
    coefficient_unit="byte",
)
define(
    "memory.activations.backward.swiglu_gradients",
    4 * s * b * h_ff / t,
    "byte",
    "derived: the SwiGLU backward holds the 16-bit gradients of its gate and up projections'"
    " outputs, [s·b, h_ff/t] each, at once; measured by"
    " analytic.reference.checkpointing.backward_peak_bytes (a Llama block's backward on the CPU"
    " peaks at exactly these bytes beyond its saved tensors and output)",
    (
        (
            "a dense SwiGLU MLP with h_ff ≥ 2.75h (its backward's peak is the MLP's, not the"
            " attention's)"
        ),
        (
            "the gradients cover every token of the microbatch: the column-parallel projections'"
            " outputs are not split by sequence parallelism"
        ),
        (
            "under full recomputation added to the recomputed layer's activations, of which the"
            " backward has freed about one [s·b, h] tensor by then (measured: 1.6–1.9 of the two"
            " gradients' size beyond them)"
        ),
    ),
    "bytes a layer's backward holds beyond its saved activations",
    coefficient_unit="byte",
)
PYTORCH_CP = (
    "pytorch/pytorch torch/distributed/tensor/experimental/_attention.py (Dec 2024, the torch of"
    " TorchTitan's benchmarks, 1963fc8): _templated_ring_attention_backward, K and V all-gathered"
    " by _AllGatherRotater, dK and dV passed on by _AllToAllRotater; pytorch/torchtitan c97876e"
    " (context_parallel_rotate_method, 'allgather' by default)"
)
define(
    "memory.activations.backward.cp_ring_attention",
    s * b * a * d_h / t * (4 * S("cp") + 36),
    "byte",
    f"{PYTORCH_CP}; measured by analytic.reference.context_parallel",
    (
        (
            "s: the rank's tokens; X = s·b·a·d_h/t, the elements of its Q; K and V repeated to a"
            " heads before the kernel (TorchTitan's Llama repeat_kv), so each has X elements too;"
            " Q, K, V and their gradients in 16 bits"
        ),
        (
            "the K and V of all cp ranks, gathered once (4·cp·X bytes), and the rank's own"
            " concatenated to send (4X)"
        ),
        (
            "fp32 accumulators of dQ, dK and dV (12X) and the fp32 dK and dV pair going out and the"
            " one coming in (16X)"
        ),
        (
            "the previous step's dQ, dK and dV held while the next step computes its own, of the"
            " whole Q and half of K and V under load balancing: 4X beyond a plain backward's"
            " outputs"
        ),
        (
            "the peak of every rank but the first; measured: exactly 4X more per rank, the level"
            " within 5% (the CPU kernel's own buffers)"
        ),
    ),
    "bytes PyTorch's context-parallel attention backward holds beyond a plain flash-attention"
    " backward",
    coefficient_unit="byte",
)
define(
    "memory.activations.first_stage_interleaved_factor",
    1 + (S("pp") - 1) / (S("pp") * S("vpp")),
    "",
    f"{KORTHIKANTI} §4.2.3 (after eq. 5); Narayanan et al. 2021 §2.2.2",
    (
        (
            "interleaved 1F1B: the first stage holds this many times the activations of"
            " non-interleaved 1F1B"
        ),
    ),
    "activation-memory factor of interleaved 1F1B",
)

_swiglu_seq = 8 * h
_swiglu_head = 4 * a * d_h + 4 * a_kv * d_h + 4 * a
define(
    "memory.activations.layer_flash_swiglu",
    s * b * (_swiglu_seq + (_swiglu_head + 6 * h_ff) / t),
    "byte",
    "derived: derivations/activations.py (tensor-by-tensor count in the style of Korthikanti et al."
    " §4.1)",
    FLASH_ASSUMPTIONS
    + (
        (
            "fused SwiGLU: saves the gate and up projections and their product (3 × 2sb·h_ff); "
            "SiLU recomputed"
        ),
        "RMSNorm; GQA with a_kv key/value heads",
        "tensor parallelism t splits heads and h_ff; the 8sbh sequence part is replicated",
    ),
    "activations of one Llama-style layer (flash attention, GQA, SwiGLU), TP without SP",
    coefficient_unit="byte",
)
define(
    "memory.activations.layer_flash_swiglu_sp",
    s * b * (_swiglu_seq + _swiglu_head + 6 * h_ff) / t,
    "byte",
    "derived: derivations/activations.py (Korthikanti et al. §4.2.2 sequence parallelism applied)",
    FLASH_ASSUMPTIONS
    + ("fused SwiGLU (3 × 2sb·h_ff saved)", "sequence parallelism splits the 8sbh part by t"),
    "activations of one Llama-style layer (flash attention, GQA, SwiGLU), TP + SP",
    coefficient_unit="byte",
)
define(
    "memory.activations.layer_flash_gelu",
    s * b * (_swiglu_seq + (_swiglu_head + 4 * h_ff) / t),
    "byte",
    "derived: derivations/activations.py (Korthikanti et al. §4.1 without dropout and without the"
    " s^2 terms)",
    FLASH_ASSUMPTIONS
    + (
        "GELU MLP: saves the fc1 output and the GELU output (2 × 2sb·h_ff)",
        "the 8sbh sequence part is replicated over TP",
    ),
    "activations of one GPT-style layer with flash attention, TP without SP",
    coefficient_unit="byte",
)
define(
    "memory.activations.layer_flash_gelu_sp",
    s * b * (_swiglu_seq + _swiglu_head + 4 * h_ff) / t,
    "byte",
    "derived: derivations/activations.py",
    FLASH_ASSUMPTIONS
    + ("GELU MLP (2 × 2sb·h_ff saved)", "sequence parallelism splits the 8sbh part by t"),
    "activations of one GPT-style layer with flash attention, TP + SP",
    coefficient_unit="byte",
)

# The halves of a layer, for models whose attention or MLP the whole-layer counts above do not
# cover (MLA, MoE); a layer is an attention half plus an MLP half. "seq" parts are replicated over
# TP and split by it under SP; head and inner parts are split by TP.
r_q, r_kv, d_r = S("q_lora_rank", "kv_lora_rank", "rope_dim")
k, E_s, h_e, rho = S("topk", "shared_experts", "expert_ffn_hidden", "quantized_ratio")
FP8_CACHE = (
    "DeepSeek-V3 arXiv 2412.19437 §3.3.2, Low-Precision Storage: the activations a Linear operator"
    " saves for its backward, and the SwiGLU's inputs, cached in FP8; NVIDIA TransformerEngine"
    " transformer_engine/pytorch/module/linear.py and layernorm_linear.py (a linear under a"
    " quantization recipe saves its input, or its fused norm's output, quantized)"
)
#: what caching an element quantized frees of its 2 bytes: 2(1 − ρ_q), its scales kept
FREED = 2 * (1 - rho)
QUANTIZED = (
    "ρ_q: bytes of an element saved quantized, its scales included, per byte of its 16-bit form"
    " (the recipe's operand bytes over 2: 1/2 for per-tensor FP8, 33/64 for blockwise FP8 and"
    " MXFP8, 9/32 for NVFP4)"
)
LEGACY = (
    "derived: derivations/activations.py; NVIDIA/Megatron-LM megatron/model/transformer.py (2023,"
    " the model before Megatron-Core: ParallelAttention with FlashSelfAttention, ParallelMLP's"
    " swiglu, bias_dropout_add); measured by analytic.reference.saved"
)
HALVES = (
    "derived: derivations/activations.py (tensor-by-tensor count, measured by"
    " analytic.reference.saved)"
)
MEGATRON_MLA = "NVIDIA/Megatron-LM megatron/core/transformer/multi_latent_attention.py"
MEGATRON_MOE = (
    "NVIDIA/Megatron-LM megatron/core/transformer/moe/experts.py (2025: TEGroupedMLP applies the"
    " routing probabilities inside the activation, weighted_bias_swiglu_impl)"
)
_gqa_seq, _gqa_head = 4 * h, 4 * a * d_h + 4 * a_kv * d_h + 4 * a
_mla_seq = 4 * h + 4 * r_q + 2 * (r_kv + d_r) + 2 * r_kv
_mla_head = 4 * a * (d_h + d_r) + 4 * a * d_h + 4 * a
_moe_inner = 6 * (k + E_s) * h_e
H_m, P_m, N_m, G_m, w_e = S("ssm_heads", "ssm_head_dim", "ssm_state", "ssm_groups", "expert_width")
# z, x, B, C, dt; the scan's output; the group norm's input and output (Megatron-Core)
_mamba_inner = 2 * (2 * H_m * P_m + 2 * G_m * N_m + H_m) + 2 * H_m * P_m + 4 * H_m * P_m
MAMBA_SAVED = (
    "state-spaces/mamba mamba_ssm/ops/triton/ssd_combined.py,"
    " MambaSplitConv1dScanCombinedFn.forward (save_for_backward: zxbcdt, out_x), the path"
    " Megatron-Core's MambaMixer takes with use_mem_eff_path; NVIDIA/Megatron-LM"
    " megatron/core/ssm/mamba_mixer.py (2026) _ssm_training: the kernel without its norm and"
    " output projection, then ExtendedRMSNorm (mamba_ssm layernorm_gated LayerNormFn saves its"
    " input) and out_proj, a TERowParallelLinear (saves its input)"
)
for sp, split, where in (
    ("", lambda seq, inner: seq + inner / t, "TP without SP"),
    ("_sp", lambda seq, inner: (seq + inner) / t, "TP + SP"),
):
    define(
        f"memory.activations.attention_gqa{sp}",
        s * b * split(_gqa_seq, _gqa_head),
        "byte",
        HALVES,
        FLASH_ASSUMPTIONS[:1]
        + (
            (
                "saved: the norm's input and output (the QKV input), Q, K, V (GQA: a_kv key/value "
                "heads), the attention output and its statistics"
            ),
        ),
        f"activations of the attention half of a layer (flash attention, GQA), {where}",
        coefficient_unit="byte",
    )
    define(
        f"memory.activations.attention_mla{sp}",
        s * b * split(_mla_seq, _mla_head),
        "byte",
        f"{HALVES}; {MEGATRON_MLA}",
        FLASH_ASSUMPTIONS[:1]
        + (
            (
                "saved: the norm's input and output (the down-projections' input), the query latent"
                " and its norm's output (2 × 2r_q), the key/value latent with the RoPE key (2(r_kv"
                " + d_r)) and its norm's output (2r_kv)"
            ),
            "Q and K of a(d_h + d_r) each, V of a·d_h, the attention output and its statistics",
            (
                "the latents are split like the sequence part (Megatron-Core gathers them inside"
                " the up-projections)"
            ),
        ),
        f"activations of the attention half of a multi-head latent attention layer, {where}",
        coefficient_unit="byte",
    )
    define(
        f"memory.activations.mlp_swiglu{sp}",
        s * b * split(4 * h, 6 * h_ff),
        "byte",
        HALVES,
        (
            "16-bit activations",
            (
                "saved: the norm's input and output (the MLP input), the gate and up projections "
                "and their product (3 × 2sb·h_ff); SiLU recomputed"
            ),
        ),
        f"activations of the SwiGLU MLP half of a layer, {where}",
        coefficient_unit="byte",
    )
    define(
        f"memory.activations.mlp_moe{sp}",
        s * b * (split(4 * h, _moe_inner) + 2 * k * h),
        "byte",
        f"{HALVES}; {MEGATRON_MOE}",
        (
            "16-bit activations; SwiGLU experts, split by TP like a dense MLP (expert TP = TP)",
            (
                "saved: the norm's input and output (the router's and shared experts' input), each"
                " token's k routed copies (the experts' input, 2k·h, whole on every TP rank:"
                " tokens are gathered over TP before the experts), the gate and up projections and"
                " the probability-weighted product of its k routed and E_s shared experts (6(k +"
                " E_s)·h_e)"
            ),
            "as many tokens on each expert-parallel rank as it sends (balanced routing)",
            "the router's scores and probabilities (E + k values per token) not counted",
        ),
        f"activations of the MoE MLP half of a layer, {where}",
        coefficient_unit="byte",
    )
    define(
        f"memory.activations.mamba2{sp}",
        s * b * split(4 * h, _mamba_inner),
        "byte",
        f"{HALVES}; {MAMBA_SAVED}",
        (
            "16-bit activations",
            (
                "saved: the norm's input and output (the input projection's input), the input"
                " projection's output z, x, B, C, dt (2(2H·P + 2G·N + H)), the scan's output"
                " (2H·P), its gated output, the input of the group norm after the kernel (2H·P),"
                " and that norm's output, the output projection's input (2H·P); the convolution"
                " and the chunk states recomputed in the backward"
            ),
            "tensor parallelism splits the heads and groups",
        ),
        f"activations of one Mamba-2 layer, {where}",
        coefficient_unit="byte",
    )
    define(
        f"memory.activations.mlp_gelu{sp}",
        s * b * split(4 * h, 4 * h_ff),
        "byte",
        HALVES,
        (
            "16-bit activations",
            (
                "saved: the norm's input and output (the MLP input), the first matrix's output and "
                "the activation's output (2 × 2sb·h_ff)"
            ),
        ),
        "activations of an ungated MLP (GELU, squared ReLU) standing as a layer of its own,"
        f" {where}",
        coefficient_unit="byte",
    )
    define(
        f"memory.activations.mlp_moe_gelu{sp}",
        s * b * (split(4 * h, 4 * (k + E_s) * h_e) + 2 * k * w_e),
        "byte",
        f"{HALVES}; {MEGATRON_MOE}",
        (
            "16-bit activations; ungated experts (squared ReLU), split by TP like a dense MLP",
            (
                "saved: the norm's input and output, each token's k routed copies in the experts'"
                " width w (2k·w), the first matrix's output and the activation's output of its k"
                " routed and E_s shared experts (4(k + E_s)·h_e)"
            ),
            "LatentMoE's projections' own inputs (2w per token) not counted",
            "as many tokens on each expert-parallel rank as it sends (balanced routing)",
        ),
        f"activations of an MoE layer with ungated experts, {where}",
        coefficient_unit="byte",
    )
    define(
        f"memory.activations.freed.layernorm{sp}",
        s * b * split(4 * h, 0),
        "byte",
        "NVIDIA/Megatron-LM TransformerConfig.recompute_modules 'layernorm' (output-discarding"
        " checkpoint of input_layernorm and pre_mlp_layernorm); DeepSeek-V3 arXiv 2412.19437"
        " §3.2.3",
        (
            (
                "the outputs of a layer's two norms are freed after their consumers' forward and"
                " recomputed from the norms' inputs, which stay saved"
            ),
        ),
        f"bytes a layer's activations shrink by when its two norms are recomputed, {where}",
        coefficient_unit="byte",
    )
    define(
        f"memory.activations.freed.mla_up_proj{sp}",
        s * b * split(2 * r_q + 2 * r_kv, 4 * a * (d_h + d_r) + 2 * a * d_h),
        "byte",
        f"NVIDIA/Megatron-LM TransformerConfig.recompute_modules 'mla_up_proj' ({MEGATRON_MLA}:"
        " qkv_up_proj_and_rope_apply under an output-discarding checkpoint); DeepSeek-V3 arXiv"
        " 2412.19437 §3.2.3",
        (
            (
                "Q, K and V (the up-projections' outputs with RoPE applied) are freed after the"
                " attention's forward and recomputed from the latents before its backward"
            ),
            "the latents' norms are recomputed with them (as DeepSeek-V3 recomputes every RMSNorm)",
        ),
        "bytes an MLA layer's activations shrink by when its up-projections are recomputed,"
        f" {where}",
        coefficient_unit="byte",
    )
    define(
        f"memory.activations.head_inputs{sp}",
        s * b * split(4 * h, 0),
        "byte",
        "derived: derivations/activations.py (the last stage's final norm and output layer, counted"
        " as the layers' tensors are)",
        (
            (
                "the final norm's input and the output layer's input (the norm's output), 16-bit,"
                " held on the last stage from their forward to the backward after the loss"
            ),
        ),
        f"bytes of one microbatch's final-norm and output-layer inputs, {where}",
        coefficient_unit="byte",
    )
    define(
        f"memory.activations.legacy.dropout_masks{sp}",
        s * b * split(2 * h, 0),
        "byte",
        LEGACY,
        (
            (
                "hidden dropout after the attention and after the MLP (bias_dropout_add), each"
                " saving a 1-byte mask of the hidden states; attention dropout inside the fused"
                " kernel saves no mask"
            ),
        ),
        f"bytes of a layer's dropout masks on a stack that keeps them, {where}",
        coefficient_unit="byte",
    )
    define(
        f"memory.activations.fp8_freed.norm_outputs{sp}",
        s * b * split(2 * h, 0) * FREED,
        "byte",
        FP8_CACHE,
        (
            (
                "the two norms' outputs (the inputs of the QKV or down-projections and of the MLP)"
                " kept quantized, 2ρ_q bytes an element, not 2"
            ),
            QUANTIZED,
        ),
        "bytes a layer's activations shrink by when its norms' outputs are cached quantized,"
        f" {where}",
        coefficient_unit="byte",
    )
    define(
        f"memory.activations.fp8_freed.norm_output{sp}",
        s * b * split(h, 0) * FREED,
        "byte",
        FP8_CACHE,
        (
            (
                "one norm's output (the input of the QKV projection, or of the MLP) kept quantized,"
                " 2ρ_q bytes an element, not 2"
            ),
            QUANTIZED,
        ),
        "bytes a layer's activations shrink by when one norm's output is cached quantized,"
        f" {where}",
        coefficient_unit="byte",
    )
    define(
        f"memory.activations.quantized_copy.norm_output{sp}",
        s * b * split(h, 0) * 2 * rho,
        "byte",
        "NVIDIA/Megatron-LM megatron/core/transformer/multi_latent_attention.py (the query and the"
        " key/value down-projections, two TELinear, each quantize the input norm's output) and"
        " moe/moe_layer.py, moe/moe_utils.py (the shared experts' linear_fc1 quantizes the pre-MLP"
        " norm's output, which the router saves in 16 bits); NVIDIA TransformerEngine"
        " transformer_engine/pytorch/module/linear.py (each linear saves its own quantized input)",
        (
            (
                "a second copy of a norm's output, 2ρ_q bytes an element: MLA's second"
                " down-projection's, or the shared experts' beside the router's 16-bit one"
            ),
            QUANTIZED,
        ),
        f"bytes a layer keeps for a second quantized copy of a norm's output, {where}",
        coefficient_unit="byte",
    )
    define(
        f"memory.activations.fp8_freed.mla_latents{sp}",
        s * b * split(r_q + r_kv, 0) * FREED,
        "byte",
        FP8_CACHE,
        (
            (
                "the latents' norms' outputs (the up-projections' inputs) kept quantized, not in 2"
                " bytes"
            ),
            QUANTIZED,
        ),
        "bytes an MLA layer's activations shrink by when its up-projections' inputs are cached"
        f" quantized, {where}",
        coefficient_unit="byte",
    )
DTENSOR_TP = (
    "derived: derivations/activations.py; pytorch/torchtitan"
    " torchtitan/parallelisms/parallelize_llama.py (2024) apply_tp: SequenceParallel norms,"
    " PrepareModuleInput(Shard(1) → Replicate()) before the attention and the feed-forward,"
    " ColwiseParallel(input_layouts=Shard(1)) output layer: the all-gathered input is what the"
    " column-parallel matmuls save"
)
define(
    "memory.activations.gathered.norm_outputs",
    s * b * (4 * h - 4 * h / t),
    "byte",
    DTENSOR_TP,
    (
        (
            "sequence parallelism: the two norms' outputs are all-gathered over TP before the"
            " matmuls they feed, which save them whole in 16 bits, where the split count holds them"
            " split by t (Megatron gathers them again in the backward, Korthikanti et al. §4.2.2)"
        ),
    ),
    "bytes a layer's activations grow by when its column-parallel matmuls save their all-gathered"
    " inputs",
    coefficient_unit="byte",
)
define(
    "memory.activations.gathered.norm_outputs_fp8",
    s * b * (2 * h - 4 * h / t),
    "byte",
    f"{DTENSOR_TP}; Float8ColwiseParallel and PrepareFloat8ModuleInput (float8 all-gather);"
    " pytorch/ao torchao/float8/float8_linear.py matmul_with_hp_or_float8_args (saves its input as"
    " given)",
    (
        (
            "as memory.activations.gathered.norm_outputs, but the norms' outputs are cast to FP8"
            " before the all-gather and saved in 1 byte"
        ),
    ),
    "bytes a layer's activations grow by when its Float8 column-parallel matmuls save their"
    " all-gathered inputs",
    coefficient_unit="byte",
    domain=(
        (
            t >= 2,
            (
                "sequence parallelism splits over tp ≥ 2 ranks: with one, nothing is"
                " all-gathered, and the 1-byte copies would count as fewer bytes than the 16-bit"
                " split they replace"
            ),
        ),
    ),
)
define(
    "memory.activations.gathered.output_input",
    s * b * (2 * h - 2 * h / t),
    "byte",
    f"{DTENSOR_TP}; the output layer is left in 16 bits by Float8 training (torchtitan's float8"
    " filter_fqns)",
    (
        (
            "sequence parallelism: the final norm's output is all-gathered before the output layer,"
            " which saves it whole"
        ),
    ),
    "bytes the last stage's head grows by when the output layer saves its all-gathered input",
    coefficient_unit="byte",
)
define(
    "memory.activations.legacy.attention_output_copy",
    Piecewise((s * b * 2 * a * d_h / t, b > 1), (0, True)),
    "byte",
    LEGACY,
    (
        (
            "the attention's output is saved by the kernel in (b·s, a, d_h) order and rearranged"
            " into a contiguous (s, b, a·d_h) copy, which the output projection saves too; with"
            " one sequence a microbatch the rearranged tensor is already contiguous and no copy is"
            " made"
        ),
    ),
    "bytes of a layer's second copy of the attention output on a stack that makes one",
    coefficient_unit="byte",
)
define(
    "memory.activations.legacy.silu_output",
    s * b * 2 * h_ff / t,
    "byte",
    LEGACY,
    (
        (
            "an unfused SwiGLU, silu(gate)·up, saves the SiLU's output for the product's backward,"
            " besides the gate and up projections and the product the fused count holds"
        ),
    ),
    "bytes of a layer's SiLU output on a stack whose SwiGLU is not fused",
    coefficient_unit="byte",
)
define(
    "memory.activations.fp8_freed.swiglu_inputs",
    s * b * 2 * h_ff / t * FREED,
    "byte",
    FP8_CACHE,
    ("the gate and up projections (2h_ff) kept quantized, not in 2 bytes", QUANTIZED),
    "bytes a layer's activations shrink by when its SwiGLU's inputs are cached quantized",
    coefficient_unit="byte",
)
define(
    "memory.activations.fp8_freed.swiglu_products",
    s * b * h_ff / t * FREED,
    "byte",
    FP8_CACHE,
    (
        (
            "the activation's output (the down projection's input, h_ff; a SwiGLU's product) kept"
            " quantized, not in 2 bytes"
        ),
        QUANTIZED,
    ),
    "bytes a layer's activations shrink by when its down projection's input is cached quantized",
    coefficient_unit="byte",
)
define(
    "memory.activations.fp8_freed.mamba2_out_proj_input",
    s * b * H_m * P_m / t * FREED,
    "byte",
    FP8_CACHE + "; " + MAMBA_SAVED,
    (
        (
            "a Mamba-2 layer's output projection's input, its group norm's output (H·P, split by"
            " TP), kept quantized, not in 2 bytes"
        ),
        QUANTIZED,
    ),
    "bytes a Mamba-2 layer's activations shrink by when its output projection's input is cached"
    " quantized",
    coefficient_unit="byte",
)
define(
    "memory.activations.fp8_freed.expert_inputs",
    s * b * k * w_e * FREED,
    "byte",
    FP8_CACHE
    + "; §3.3.2 (activations before the MoE up-projections quantized to FP8 and dispatched)",
    (
        "each token's k routed copies, in the experts' width w (LatentMoE's latent or h), kept"
        " quantized, not in 2 bytes",
        QUANTIZED,
    ),
    "bytes an MoE layer's activations shrink by when its dispatched tokens are cached quantized",
    coefficient_unit="byte",
)
define(
    "memory.activations.quantized_copy.attention_output",
    s * b * a * d_h / t * 2 * rho,
    "byte",
    "NVIDIA/Megatron-LM megatron/core/transformer/attention.py (linear_proj saves its original"
    " input, the attention kernel's saved output, only for FP8 recipes other than delayed scaling"
    " and for FP4); NVIDIA TransformerEngine transformer_engine/pytorch/module/linear.py"
    " (save_original_input is refused with delayed scaling's Float8Quantizer)",
    (
        (
            "under FP8 delayed scaling the output projection saves a quantized copy of the"
            " attention output (a·d_h, split by TP) beside the 16-bit one the attention kernel"
            " saves"
        ),
        QUANTIZED,
    ),
    "bytes a layer keeps for its output projection's quantized copy of the attention output",
    coefficient_unit="byte",
)
define(
    "memory.activations.freed.moe_act",
    s * b * 2 * k * h_e / t,
    "byte",
    f"NVIDIA/Megatron-LM TransformerConfig.recompute_modules 'moe_act' ({MEGATRON_MOE});"
    " DeepSeek-V3 arXiv 2412.19437 §3.3.2 (the SwiGLU's inputs cached, its output recomputed)",
    (
        (
            "the routed experts' weighted SwiGLU product (the down projections' input) is freed and"
            " recomputed from the gate and up projections, which stay saved"
        ),
    ),
    "bytes an MoE layer's activations shrink by when its experts' activation is recomputed",
    coefficient_unit="byte",
)
for kind, inner, saved in (
    ("swiglu", 6, "the gate and up projections and their product (3 × 2sb·h_ff)"),
    ("gelu", 4, "the first matrix's output and the activation's output (2 × 2sb·h_ff)"),
):
    define(
        f"memory.activations.freed.mlp_{kind}",
        s * b * inner * h_ff / t,
        "byte",
        "NVIDIA/Megatron-LM TransformerConfig.recompute_modules 'mlp' ('recompute the dense MLP"
        " layer', with normal checkpointing: TransformerLayer checkpoints self.mlp on the"
        f" pre-MLP norm's output); {HALVES}",
        (
            (
                f"what the dense MLP saves inside it, {saved}, split by TP, is freed and recomputed"
                " from its input, the norm's output, which the checkpoint keeps (as do the norm's"
                " input and the MoE layers, which the module leaves alone)"
            ),
        ),
        f"bytes a dense {kind} MLP layer's activations shrink by when its MLP is recomputed",
        coefficient_unit="byte",
    )

OP_SAC = (
    "pytorch/torchtitan parallelize_llama.py (2024), selective activation checkpointing 'op': the"
    " outputs of the ops of _save_list (matmuls, SDPA, reduce-scatters) are saved except every"
    " second matmul of a block"
)
define(
    "memory.activations.layer_flash_swiglu_op_sac",
    s * b * (4 * h + (4 * a * d_h + 2 * a_kv * d_h + 4 * a + 2 * h_ff) / t),
    "byte",
    f"{OP_SAC}; derived: derivations/activations.py, measured by analytic.reference.checkpointing",
    (
        "Llama block of 7 matmuls in the order wq, wk, wv, wo, w1, w3, w2: wq, wv, w1 and w2 saved",
        (
            "saved: the block input (2sbh), Q (2sb·a·d_h), V (2sb·a_kv·d_h), the attention"
            " output and its fp32 log-sum-exp (2sb·a·d_h + 4sb·a), w1's output (2sb·h_ff), w2's"
            " output before TP's reduction (2sbh)"
        ),
        "norms, K, the attention output projection, w3 and the SwiGLU product recomputed",
        "tensor parallelism without SP: the block input replicated, the rest split by t",
    ),
    "activations of one Llama layer under TorchTitan's op-level selective checkpointing, TP"
    " without SP",
    coefficient_unit="byte",
)
define(
    "memory.activations.layer_flash_swiglu_op_sac_sp",
    s * b * (2 * h + (6 * h + 4 * a * d_h + 2 * a_kv * d_h + 4 * a + 2 * h_ff) / t),
    "byte",
    f"{OP_SAC}; derived: derivations/activations.py",
    (
        (
            "as layer_flash_swiglu_op_sac, with sequence parallelism: the block input split by t,"
            " w2's output whole before its reduce-scatter, and the two reduce-scatters' outputs (2"
            " × 2sbh/t) saved"
        ),
    ),
    "activations of one Llama layer under TorchTitan's op-level selective checkpointing, TP + SP",
    coefficient_unit="byte",
)
OP_SAC_COMPILED = (
    f"{OP_SAC}; pytorch/torchtitan parallelize_llama.py at 9dec370 (Dec 2024) apply_compile: each"
    " checkpointed TransformerBlock compiled by torch.compile, whose partitioner saves what the"
    " backward and the recomputation read; derived: derivations/activations.py"
)
define(
    "memory.activations.layer_flash_swiglu_op_sac_compiled",
    s * b * (2 * h + (4 * a * d_h + 2 * a_kv * d_h + 4 * a + 2 * h_ff) / t),
    "byte",
    f"{OP_SAC_COMPILED}, measured by analytic.reference.checkpointing",
    (
        (
            "as layer_flash_swiglu_op_sac, the block compiled: w2's output, which only the residual"
            " sum reads, is not kept (eager checkpointing caches it until the recomputation)"
        ),
        "tensor parallelism without SP: the block input replicated, the rest split by t",
    ),
    "activations of one compiled Llama layer under TorchTitan's op-level selective checkpointing,"
    " TP without SP",
    coefficient_unit="byte",
)
define(
    "memory.activations.layer_flash_swiglu_op_sac_compiled_sp",
    s * b * (4 * h + 4 * a * d_h + 2 * a_kv * d_h + 4 * a + 2 * h_ff) / t,
    "byte",
    OP_SAC_COMPILED,
    (
        (
            "as layer_flash_swiglu_op_sac_sp, the block compiled: neither w2's output nor the"
            " reduce-scatter after it, which only the residual sum reads, is kept; the"
            " reduce-scatter after wo is, the norms' recomputation reads it"
        ),
        (
            "derived by the rule the TP-without-SP count is measured under: one process runs no"
            " reduce-scatter"
        ),
    ),
    "activations of one compiled Llama layer under TorchTitan's op-level selective checkpointing,"
    " TP + SP",
    coefficient_unit="byte",
)
define(
    "memory.loss",
    s * b * V * S("loss_bytes"),
    "byte",
    "derived: the logits [b, s, V] of Megatron-LM's output layer times the bytes per logit the"
    " stack's loss holds at its peak (presets/stacks.toml loss_bytes, measured by"
    " analytic.reference.loss)",
    (
        (
            "one microbatch's logits and the loss's own tensors, from the logits to their 16-bit"
            " gradient"
        ),
        "vocabulary-parallel TP divides it by t",
    ),
    "the loss's peak working set of one microbatch (9.5 GB for 8192 × 128256 at Megatron's 6 bytes"
    " per logit)",
)
define(
    "memory.logits",
    s * b * V * e,
    "byte",
    "Megatron-LM output layer: logits [b, s, V] in the activation dtype",
    ("one microbatch's logits, before the loss; vocabulary-parallel TP divides it by t",),
    "logits of one microbatch (2.1 GB for 8192 × 128256 in bf16)",
)

define(
    "memory.optimizer_step.foreach",
    Psi * S("element_bytes"),
    "byte",
    "PyTorch torch/optim/adam.py _multi_tensor_adam (AdamW with foreach=True): torch._foreach_sqrt"
    " of the second moments allocates a tensor of their size, divided and offset in place and freed"
    " after the update; analytic.reference.step_memory measures it",
    (
        "Ψ: the parameters this GPU's optimizer updates (its ZeRO shard)",
        "e: bytes of a second moment (4 in fp32)",
        "the step runs after the backward: the activations and ZeRO-3's unsharded copies are freed",
        (
            "a fused step (torch._fused_adamw_, apex's and Transformer Engine's multi_tensor_adam)"
            " updates in place and allocates nothing of this size"
        ),
    ),
    "memory a foreach AdamW step allocates beyond the model states: the square roots of the second"
    " moments",
)

DS_COPY = (
    "DeepSpeed deepspeed/runtime/zero/stage_1_and_2.py DeepSpeedZeroOptimizer.step (2021-2026):"
    " flatten(averaged_gradients[i]).to(fp32) becomes the fp32 master partition's .grad; the 16-bit"
    " gradients are freed after the copy, the fp32 one after Adam's step"
)
COPY = (
    (
        "Ψ: the parameters this GPU's optimizer updates (its ZeRO shard), one parameter group"
        " holding nearly all"
    ),
    (
        "the flattened 16-bit copy (2 bytes) is alive while its fp32 copy (4 bytes) is made, beside"
        " the gradient partition it flattens"
    ),
    (
        "the step runs after the backward: the activations and ZeRO-3's unsharded copies are freed;"
        " the gradients outside the partition (ZeRO-1) are freed first (free_grad_in_param_list)"
    ),
    "ZeRO stage 0 (DeepSpeed's FP16_Optimizer and BF16_Optimizer) is not counted",
)
define(
    "memory.optimizer_step.fp32_gradient_copy",
    6 * Psi,
    "byte",
    DS_COPY,
    COPY,
    "memory a ZeRO-1/2 step allocates beyond the model states: the gradient partition flattened and"
    " in fp32",
    coefficient_unit="byte",
)
define(
    "memory.optimizer_step.fp32_gradient_copy_subgroup",
    6 * Min(Psi, 10**9),
    "byte",
    "DeepSpeed deepspeed/runtime/zero/stage3.py"
    " DeepSpeedZeroOptimizer_Stage3._prepare_fp32_grad_for_sub_group"
    " (flatten(averaged_gradients[sub_group]).to(fp32), a sub-group at a time);"
    " deepspeed/runtime/zero/config.py (sub_group_size, default 10⁹ parameters)",
    COPY[:1]
    + ("ZeRO-3 copies one sub-group of at most sub_group_size = 10⁹ of its parameters at a time",)
    + COPY[1:3],
    "memory a ZeRO-3 step allocates beyond the model states: the largest sub-group's gradients"
    " flattened and in fp32",
    coefficient_unit="byte",
)

define(
    "memory.zero_reduce_bucket",
    5 * 10**8 * 2,
    "byte",
    "DeepSpeed deepspeed/runtime/zero/config.py (reduce_bucket_size, default 5·10⁸ elements;"
    " contiguous_gradients on by default); stage_1_and_2.py DeepSpeedZeroOptimizer.backward"
    " (ipg_buffer, released at the backward's end, _release_ipg_buffers); stage3.py"
    " DeepSpeedZeroOptimizer_Stage3 (__ipg_bucket_flat_buffer, allocated with the optimizer and"
    " kept)",
    (
        "one bucket of reduce_bucket_size 16-bit elements (2 bytes), DeepSpeed's default",
        "ZeRO-1 and 2 hold it through the backward, ZeRO-3 through the whole step",
        "below ZeRO-3, overlap_comm (off by default there) adds a second bucket: not counted",
    ),
    "DeepSpeed's contiguous gradient bucket: gradients gathered for their reduction",
    coefficient_unit="byte",
)
