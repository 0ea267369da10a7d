"""FLOPs per step and the time and utilisation they imply. FLOPs, not MACs (a multiply-add is 2)."""

from ._catalogue import S, define

N, D = S("params", "tokens")
C, T, n, F, eta = S("flops", "step_time", "gpus", "peak_flops", "mfu")
B, s, l, h, V = S("global_batch", "seq_len", "layers", "hidden", "vocab")
a, d_h, a_kv, h_ff = S("heads", "head_dim", "kv_heads", "ffn_hidden")
r_q, r_kv, d_r = S("q_lora_rank", "kv_lora_rank", "rope_dim")

NARAYANAN = "Narayanan et al. 2021, Megatron-LM PTD-P, arXiv 2104.04473"
KORTHIKANTI = "Korthikanti et al. 2022, Reducing Activation Recomputation, arXiv 2205.05198"
PALM = "Chowdhery et al. 2022, PaLM, arXiv 2204.02311 App. B"

define(
    "compute.training_flops",
    6 * N * D,
    "FLOP",
    "Kaplan et al. 2020 §2.1; Hoffmann et al. 2022 (C = 6ND); derived: derivations/time_wall.py",
    (
        "forward 2 FLOPs per parameter per token, backward 4",
        "attention scores and logits beyond N not counted",
        "MoE: N is the active parameter count",
    ),
    "training FLOPs of D tokens on N parameters",
    coefficient_unit="FLOP",
)
define(
    "compute.flops_per_token_palm",
    6 * N + 12 * l * a * d_h * s,
    "FLOP/token",
    f"{PALM} (6N + 12LHQT)",
    (
        "H heads of dimension Q, sequence T; attention counted in full (no causal halving)",
        "N: (active) parameters including embeddings",
    ),
    "model FLOPs per token, PaLM's MFU convention",
    coefficient_unit="FLOP",
)
define(
    "compute.megatron_flops",
    96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h)),
    "FLOP",
    f"{NARAYANAN} §5.1 eq. (3)",
    (
        "GPT layer: MHA, GELU MLP of 4h",
        "with full activation recomputation (one extra forward)",
        "attention counted in full",
        "logit layer counted",
    ),
    "FLOPs per iteration of a GPT model, including the recompute forward",
    coefficient_unit="FLOP",
)
define(
    "compute.model_flops_korthikanti",
    72 * B * l * s * h**2 * (1 + s / (6 * h) + V / (12 * h * l)),
    "FLOP",
    f"{KORTHIKANTI} App. A eq. (7)",
    ("GPT layer: MHA, GELU MLP of 4h", "no recomputation counted"),
    "model FLOPs per iteration of a GPT model",
    coefficient_unit="FLOP",
)
define(
    "compute.hardware_flops_korthikanti",
    72 * B * l * s * h**2 * (1 + s / (3 * h) + V / (12 * h * l)),
    "FLOP",
    f"{KORTHIKANTI} App. A eq. (8)",
    ("GPT layer", "selective recomputation of the attention core included"),
    "hardware FLOPs per iteration with selective recomputation",
    coefficient_unit="FLOP",
)
define(
    "compute.attention_forward_flops_per_token",
    4 * h * a * d_h + 4 * h * a_kv * d_h + 4 * a * d_h * s,
    "FLOP/token",
    "derived: derivations/time_wall.py",
    (
        "Q and O projections h×(a·d_h), K and V projections h×(a_kv·d_h), 2 FLOPs per"
        " multiply-add",
        (
            "QK^T and attention over V: 2·2·a·d_h·s per token, attention counted in full (no"
            " causal halving)"
        ),
    ),
    "forward FLOPs per token of one attention block",
    coefficient_unit="FLOP",
)
define(
    "compute.recompute.op_sac_flops_per_token",
    2 * h * (a_kv * d_h + a * d_h + h_ff),
    "FLOP/token",
    "pytorch/torchtitan parallelize_llama.py (2024), selective activation checkpointing 'op' (every"
    " second matmul of a block recomputed)",
    (
        "Llama block: wk, wo and w3, the second, fourth and sixth of its seven matmuls, run again",
        "FLOPs, not MACs",
    ),
    "forward FLOPs per token one layer recomputes under TorchTitan's op-level policy",
    coefficient_unit="FLOP",
)
define(
    "compute.recompute.mla_up_proj_flops_per_token",
    2 * a * (r_q * (d_h + d_r) + r_kv * 2 * d_h),
    "FLOP/token",
    "NVIDIA/Megatron-LM TransformerConfig.recompute_modules 'mla_up_proj'; the up-projections'"
    " shapes of model.params.attention_mla (DeepSeek-V2 arXiv 2405.04434 §2.1)",
    (
        (
            "the query up-projection r_q × a(d_h + d_r) and the key/value up-projection r_kv ×"
            " 2a·d_h run forward again"
        ),
        "FLOPs, not MACs",
    ),
    "forward FLOPs per token one MLA layer recomputes when its up-projections are recomputed",
    coefficient_unit="FLOP",
)
define(
    "compute.attention_core_forward_flops_per_token",
    4 * a * d_h * s,
    "FLOP/token",
    "derived: derivations/time_wall.py",
    (
        "QKᵀ and attention over V only (what selective recomputation repeats)",
        "attention counted in full",
    ),
    "forward FLOPs per token of one layer's attention core",
    coefficient_unit="FLOP",
)
DEEPSEEK_MLA = "DeepSeek-V2 arXiv 2405.04434 §2.1 (multi-head latent attention)"
define(
    "compute.attention_core_forward_flops_per_token.mla",
    2 * a * (2 * d_h + d_r) * s,
    "FLOP/token",
    f"{DEEPSEEK_MLA}; derived: derivations/time_wall.py",
    (
        "QKᵀ over d_h + d_r dimensions per head (decoupled RoPE key), attention over V of d_h",
        "attention counted in full",
    ),
    "forward FLOPs per token of one MLA layer's attention core",
    coefficient_unit="FLOP",
)
FLASH = (
    "Dao et al. 2022, FlashAttention, arXiv 2205.14135 §3.1 (the backward recomputes S = QKᵀ);"
    " Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py (backward = 2.5 × forward"
    " FLOPs)"
)
define(
    "compute.flash_backward_recompute_flops_per_token",
    2 * a * d_h * s,
    "FLOP/token",
    f"{FLASH}; derived: derivations/time_wall.py",
    (
        (
            "the QKᵀ product FlashAttention's backward recomputes from Q, K and the saved softmax"
            " statistics"
        ),
        "five matmuls in the backward against the forward's two: 2.5 × the core's forward, not 2"
        " ×",
        "attention counted in full",
    ),
    "FLOPs per token of one layer that a FlashAttention backward adds by recomputing QKᵀ",
    coefficient_unit="FLOP",
)
define(
    "compute.flash_backward_recompute_flops_per_token.mla",
    2 * a * (d_h + d_r) * s,
    "FLOP/token",
    f"{FLASH}; {DEEPSEEK_MLA}; derived: derivations/time_wall.py",
    (
        "QKᵀ over d_h + d_r dimensions per head (decoupled RoPE key), recomputed in the backward",
        "attention counted in full",
    ),
    "FLOPs per token of one MLA layer that a FlashAttention-style backward adds by recomputing"
    " QKᵀ",
    coefficient_unit="FLOP",
)
define(
    "compute.attention_forward_flops_per_token.mla",
    2 * (h * r_q + r_q * a * (d_h + d_r) + h * (r_kv + d_r) + r_kv * a * 2 * d_h + a * d_h * h)
    + 2 * a * (2 * d_h + d_r) * s,
    "FLOP/token",
    f"{DEEPSEEK_MLA}; derived: derivations/time_wall.py",
    (
        (
            "the five projections of model.params.attention_mla, 2 FLOPs per multiply-add; norms"
            " not counted"
        ),
        "attention core as compute.attention_core_forward_flops_per_token.mla",
    ),
    "forward FLOPs per token of one multi-head latent attention block",
    coefficient_unit="FLOP",
)
define(
    "compute.flops_per_token_palm.mla",
    6 * N + 6 * l * a * (2 * d_h + d_r) * s,
    "FLOP/token",
    f"{PALM} (6N + 12LHQT) with MLA's core ({DEEPSEEK_MLA}); derived: derivations/time_wall.py",
    (
        "PaLM's convention: 6 FLOPs per (active) parameter plus 3 × the attention core's forward",
        "QKᵀ over d_h + d_r, attention over V of d_h; attention counted in full",
    ),
    "model FLOPs per token of an MLA model, PaLM's MFU convention",
    coefficient_unit="FLOP",
)
define(
    "compute.mlp_forward_flops_per_token.swiglu",
    6 * h * h_ff,
    "FLOP/token",
    "derived: derivations/time_wall.py",
    ("three matrices h×h_ff (gate, up, down)", "elementwise SiLU and product not counted"),
    "forward FLOPs per token of a SwiGLU MLP",
    coefficient_unit="FLOP",
)
define(
    "compute.mlp_forward_flops_per_token.gelu",
    4 * h * h_ff,
    "FLOP/token",
    "derived: derivations/time_wall.py",
    ("two matrices h×h_ff", "elementwise GELU not counted"),
    "forward FLOPs per token of a GELU MLP",
    coefficient_unit="FLOP",
)
define(
    "compute.moe_forward_flops_per_token",
    6 * S("topk") * h * S("expert_ffn_hidden")
    + 6 * S("shared_experts") * h * S("expert_ffn_hidden")
    + 2 * h * S("experts"),
    "FLOP/token",
    "derived: derivations/time_wall.py",
    ("k routed and E_s shared SwiGLU experts of inner size h_e per token", "router h×E"),
    "forward FLOPs per token of an MoE FFN",
    coefficient_unit="FLOP",
)
define(
    "compute.mamba2_scan_flops_per_token",
    7 * S("ssm_heads") * S("ssm_head_dim") * S("ssm_state"),
    "FLOP/token",
    "NVIDIA/Megatron-LM megatron/training/training.py num_floating_point_operations,"
    " mamba_layer_flops (the scan's 7·d_in·N per token), with d_in the mixer's inner width H·P",
    (
        "the chunked state-space scan (SSD) of one Mamba-2 layer, forward",
        "its projections are counted with the parameters (6N)",
        "the convolution and gating not counted",
    ),
    "forward FLOPs per token of one Mamba-2 layer's scan",
    coefficient_unit="FLOP",
)
define(
    "compute.logits_forward_flops_per_token",
    2 * h * V,
    "FLOP/token",
    "derived: derivations/time_wall.py",
    ("output projection h×V",),
    "forward FLOPs per token of the logit layer",
    coefficient_unit="FLOP",
)
MCORE = (
    "NVIDIA/Megatron-LM megatron/training/training.py num_floating_point_operations "
    "(the count behind the TFLOP/s Megatron-Core logs)"
)
G_m, N_m, H_m = S("ssm_groups", "ssm_state", "ssm_heads")
define(
    "compute.flops_per_token_megatron_core",
    6 * N + 6 * l * a * d_h * s,
    "FLOP/token",
    f"{MCORE}, transformer_flops and hybrid_flops",
    (
        (
            "3 × 2 FLOPs per multiply-add of every GEMM weight a token passes through: N counts"
            " the attention projections, the MLP's or the k routed and the shared experts' matrices"
            " (the router not), the output layer once per head and the MTP projections, not the"
            " embedding lookup, norms or biases"
        ),
        "QKᵀ and attention over V over half the sequence (causal mask), in l layers of attention",
        (
            "the vocabulary as the model states it (Megatron-LM pads it to its "
            "--make-vocab-size-divisible-by times TP)"
        ),
    ),
    "model FLOPs per token, Megatron-Core's convention",
    coefficient_unit="FLOP",
)
define(
    "compute.flops_per_token_megatron_core.mla",
    6 * N + 3 * l * a * (2 * d_h + d_r) * s,
    "FLOP/token",
    f"{MCORE}, transformer_flops (multi_latent_attention)",
    (
        (
            "N as compute.flops_per_token_megatron_core, MLA's five projections with their two"
            " norms' gains (the count's '+ 1' per rank)"
        ),
        "QKᵀ over d_h + d_r and attention over V of d_h over half the sequence",
    ),
    "model FLOPs per token of an MLA model, Megatron-Core's convention",
    coefficient_unit="FLOP",
)
define(
    "compute.megatron_core_mamba_flops_per_token",
    6 * h * (4 * h + 2 * G_m * N_m + H_m) + 42 * h * N_m + 12 * h**2,
    "FLOP/token",
    f"{MCORE}, mamba_layer_flops",
    (
        (
            "three passes of the forward's input projection h×(2·d_in + 2G·N + H), scan"
            " 7·d_in·N and output projection d_in×h, with d_in = 2h as the count takes it (not"
            " the mixer's H·P)"
        ),
    ),
    "FLOPs per token of one Mamba-2 layer, Megatron-Core's convention",
    coefficient_unit="FLOP",
)
define(
    "compute.mfu",
    C / (T * n * F),
    "",
    f"{PALM} App. B (MFU); Llama 3 arXiv 2407.21783 §3.3.2",
    ("C: model FLOPs of one step (no recomputation)",),
    "model FLOPs utilisation",
    domain=(
        (
            C <= T * n * F,
            "MFU above 1: the step time is shorter than the FLOPs take at every GPU's peak",
        ),
    ),
)
define(
    "compute.train_time",
    C / (n * F * eta),
    "s",
    "definition of MFU solved for time (PaLM App. B)",
    ("η: the MFU sustained for the whole run",),
    "wall-clock time to do C FLOPs",
)
define(
    "compute.achieved_flops",
    C / (T * n),
    "FLOP/s",
    "definition (FLOPs per second per accelerator)",
    (),
    "achieved FLOP/s per accelerator",
)
define(
    "compute.sm_share",
    (S("sms") - S("comm_sms")) / S("sms"),
    "",
    "DeepSeek-V3 arXiv 2412.19437 §3.2.2, §3.5.1 (20 of the H800's 132 SMs run the all-to-all, "
    "which 'will limit the computational throughput')",
    (
        "compute kernels' throughput scales with the SMs they run on",
        "SMs reserved for communication are taken for the whole step",
    ),
    "share of the accelerator's compute left to the model when SMs are reserved for communication",
    domain=(
        (S("comm_sms") < S("sms"), "the SMs reserved for communication are all the SMs there are"),
    ),
)
define(
    "compute.steps",
    D / S("batch_tokens"),
    "",
    "definition (tokens over tokens per step)",
    (),
    "optimizer steps to train on D tokens",
)
