"""Parameter counts computed from the architecture (weights only; 1 parameter = 1 weight
element)."""

from ._catalogue import S, define

h, a, a_kv, d_h, h_ff, V, s_max = S(
    "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab", "max_seq_len"
)
E, E_s, k, h_e = S("experts", "shared_experts", "topk", "expert_ffn_hidden")
r_q, r_kv, d_r = S("q_lora_rank", "kv_lora_rank", "rope_dim")
l, s = S("layers", "seq_len")

ARCH = (
    "counting the weight matrices of the layer (checked against published counts:"
    " validation/identities.toml)"
)
P = "parameter"
GPT_OSS = (
    "OpenAI 2025, gpt-oss-120b & gpt-oss-20b model card §2.1 (attention sinks, biased experts and"
    " router); Hugging Face transformers GptOssExperts/GptOssTopKRouter"
)

define(
    "model.params.embedding",
    V * h,
    P,
    "token embedding table V×h (untied output layer: the same again)",
    (),
    "parameters of an embedding or output layer",
    coefficient_unit=P,
)
define(
    "model.params.positions",
    s_max * h,
    P,
    "learned absolute positions (GPT-2/GPT-3, Megatron)",
    (),
    "parameters of a learned position table",
    coefficient_unit=P,
)
define(
    "model.params.attention",
    h * d_h * (2 * a + 2 * a_kv),
    P,
    ARCH,
    ("Q and O: h×(a·d_h); K and V: h×(a_kv·d_h) (GQA)", "no biases"),
    "weights of one attention block",
    coefficient_unit=P,
)
define(
    "model.params.attention_bias",
    d_h * (a + 2 * a_kv) + h,
    P,
    ARCH,
    ("QKV bias and output bias (GPT-style)",),
    "biases of one attention block",
    coefficient_unit=P,
)
define(
    "model.params.qkv_bias",
    d_h * (a + 2 * a_kv),
    P,
    "Qwen Team 2023, Qwen technical report, arXiv 2309.16609 §2.2 (biases in the QKV projection"
    " only), kept in Qwen2 (arXiv 2407.10671)",
    ("one bias per query, key and value output channel; none on the output projection",),
    "biases of one attention block's QKV projection",
    coefficient_unit=P,
)
define(
    "model.params.attention_mla",
    h * r_q
    + r_q
    + r_q * a * (d_h + d_r)
    + h * (r_kv + d_r)
    + r_kv
    + r_kv * a * 2 * d_h
    + a * d_h * h,
    P,
    "DeepSeek-V2 arXiv 2405.04434 §2.1 (multi-head latent attention); DeepSeek-V3 arXiv 2412.19437"
    " §4.2",
    (
        "query down-projection h×r_q with RMSNorm, up-projection r_q×a(d_h+d_r)",
        "KV down-projection h×(r_kv+d_r) with RMSNorm, up-projection r_kv×a·2d_h (keys and"
        " values)",
        "output a·d_h×h; value head dimension = d_h",
    ),
    "weights of one multi-head latent attention block",
    coefficient_unit=P,
)
define(
    "model.params.qk_norm",
    2 * d_h,
    P,
    "Qwen3 Technical Report, arXiv 2505.09388 §2 (QK-Norm)",
    ("an RMSNorm over each head's query and key, gains shared across heads",),
    "parameters of QK-Norm in one layer",
    coefficient_unit=P,
)
define(
    "model.params.mlp.swiglu",
    3 * h * h_ff,
    P,
    "Shazeer 2020, GLU Variants, arXiv 2002.05202 (gate, up, down)",
    ("no biases",),
    "weights of a SwiGLU MLP",
    coefficient_unit=P,
)
define(
    "model.params.mlp.gelu",
    2 * h * h_ff,
    P,
    "Vaswani et al. 2017; GPT-2/GPT-3 (two matrices)",
    ("biases counted separately",),
    "weights of a GELU MLP",
    coefficient_unit=P,
)
define(
    "model.params.mlp_bias.gelu",
    h_ff + h,
    P,
    "GPT-2/GPT-3 MLP biases",
    (),
    "biases of a GELU MLP",
    coefficient_unit=P,
)
define(
    "model.params.norm.rmsnorm",
    h,
    P,
    "Zhang & Sennrich 2019, RMSNorm (a gain per channel)",
    (),
    "parameters of an RMSNorm",
    coefficient_unit=P,
)
define(
    "model.params.norm.layernorm",
    2 * h,
    P,
    "Ba et al. 2016, LayerNorm (gain and bias)",
    (),
    "parameters of a LayerNorm",
    coefficient_unit=P,
)
define(
    "model.params.moe",
    (E + E_s) * 3 * h * h_e + E * h,
    P,
    "DeepSeekMoE (arXiv 2401.06066); DeepSeek-V3 arXiv 2412.19437 §2.1.2",
    ("SwiGLU experts of inner size h_e", "router h×E, no bias counted"),
    "parameters of one MoE FFN (all experts)",
    coefficient_unit=P,
)
define(
    "model.params.routed_experts",
    E * 3 * h * h_e,
    P,
    "DeepSeek-V3 arXiv 2412.19437 §2.1.2",
    ("SwiGLU experts of inner size h_e",),
    "parameters of the routed experts of one MoE layer (sharded by EP)",
    coefficient_unit=P,
)
define(
    "model.params.moe_active",
    (k + E_s) * 3 * h * h_e + E * h,
    P,
    "DeepSeek-V3 arXiv 2412.19437 §2.1.2 (top-k routed + shared experts)",
    ("a token uses k routed and all shared experts, and the whole router",),
    "parameters of one MoE FFN used by one token",
    coefficient_unit=P,
)
define(
    "model.params.router",
    E * h,
    P,
    "DeepSeek-V3 arXiv 2412.19437 §2.1.2 (the gating affinities s = u·e)",
    ("one centroid of width h per routed expert; no bias counted",),
    "parameters of one MoE FFN's router (within model.params.moe and moe_active)",
    coefficient_unit=P,
)
define(
    "model.params.attention_sinks",
    a,
    P,
    GPT_OSS,
    ("one learned sink logit per attention head",),
    "attention sink logits of one attention block",
    coefficient_unit=P,
)
define(
    "model.params.moe_bias",
    (E + E_s) * (2 * h_e + h) + E,
    P,
    GPT_OSS,
    ("each expert's gate-and-up bias (2·h_e) and down bias (h)", "the router's bias (E)"),
    "biases of one MoE FFN (all experts and the router)",
    coefficient_unit=P,
)
define(
    "model.params.moe_bias_active",
    (k + E_s) * (2 * h_e + h) + E,
    P,
    GPT_OSS,
    ("a token uses k routed and all shared experts' biases, and the whole router's",),
    "biases of one MoE FFN used by one token",
    coefficient_unit=P,
)
define(
    "model.params.routed_experts_bias",
    E * (2 * h_e + h),
    P,
    GPT_OSS,
    ("each routed expert's gate-and-up bias (2·h_e) and down bias (h)",),
    "biases of the routed experts of one MoE layer (sharded by EP)",
    coefficient_unit=P,
)
define(
    "model.params.mtp_projection",
    2 * h * h + 2 * h,
    P,
    "DeepSeek-V3 arXiv 2412.19437 §2.2 eq. (21) (multi-token prediction)",
    (
        "projection M ∈ R^{h×2h} of the concatenated hidden state and embedding",
        "two RMSNorms (hidden state and embedding)",
        "embedding and output head shared with the main model",
        (
            "the released weights also keep an h-vector norm before the shared head; eqs."
            " (21)–(23) have none"
        ),
    ),
    "parameters of one MTP module besides its transformer block",
    coefficient_unit=P,
)
define(
    "model.params.megatron",
    12 * l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * l * h)),
    P,
    "Narayanan et al. 2021, Megatron-LM PTD-P, arXiv 2104.04473 §5.1 eq. (2)",
    (
        "GPT layer with biases, MLP 4h, learned positions of length s, tied embeddings",
        "final LayerNorm not counted",
    ),
    "parameters of a GPT model (Megatron's count)",
    coefficient_unit=P,
)

# Hybrid models (Nemotron-H, Nemotron 3): a layer is one mixer (Mamba-2 or attention) or one FFN
# (an MLP or an MoE), each after its own norm. Squared-ReLU FFNs are ungated: two matrices.
H_m, P_m, N_m, G_m, K_m, w = S(
    "ssm_heads", "ssm_head_dim", "ssm_state", "ssm_groups", "ssm_conv", "expert_width"
)
MAMBA2 = (
    "Dao & Gu 2024, Transformers are SSMs, arXiv 2405.21060 §7.1 (the Mamba-2 block);"
    " state-spaces/mamba mamba_ssm/modules/mamba2.py and NVIDIA/Megatron-LM"
    " megatron/core/ssm/mamba_mixer.py (its weights)"
)
define(
    "model.params.mamba2",
    h * (2 * H_m * P_m + 2 * G_m * N_m + H_m)
    + (H_m * P_m + 2 * G_m * N_m) * (K_m + 1)
    + 3 * H_m
    + H_m * P_m
    + H_m * P_m * h,
    P,
    MAMBA2,
    (
        "input projection h×(2H·P + 2G·N + H) to z, x, B, C and the step sizes dt, no bias",
        "a causal depthwise convolution of width K over x, B and C, with a bias",
        "A (as A_log), D and dt's bias: one each per head",
        "a gated RMSNorm over the H·P inner channels",
        "output projection H·P×h, no bias",
        "the layer's input norm counted apart (model.params.norm.*)",
    ),
    "weights of one Mamba-2 mixer",
    coefficient_unit=P,
)
NEMOTRON_MOE = (
    "NVIDIA 2025, Nemotron 3 Nano technical report, arXiv 2512.20848 §2 (squared-ReLU experts,"
    " shared experts); NVIDIA/Megatron-LM megatron/core/transformer/moe (moe_latent_size:"
    " LatentMoE's fc1 and fc2 latent projections, Nemotron 3 Super)"
)
define(
    "model.params.moe_gelu",
    E * 2 * w * h_e + E_s * 2 * h * h_e + E * h,
    P,
    NEMOTRON_MOE,
    (
        "ungated experts (squared ReLU, GELU): two matrices each",
        "routed experts work in width w (h, or LatentMoE's latent size), shared experts in h",
        "router h×E, no bias counted",
    ),
    "parameters of one MoE FFN with ungated experts (all experts)",
    coefficient_unit=P,
)
define(
    "model.params.moe_active_gelu",
    k * 2 * w * h_e + E_s * 2 * h * h_e + E * h,
    P,
    NEMOTRON_MOE,
    ("a token uses k routed and all shared experts, and the whole router",),
    "parameters of one MoE FFN with ungated experts used by one token",
    coefficient_unit=P,
)
define(
    "model.params.routed_experts_gelu",
    E * 2 * w * h_e,
    P,
    NEMOTRON_MOE,
    ("ungated experts in width w",),
    "parameters of the ungated routed experts of one MoE layer (sharded by EP)",
    coefficient_unit=P,
)
define(
    "model.params.moe_latent",
    2 * h * w,
    P,
    NEMOTRON_MOE,
    (
        (
            "LatentMoE: a down-projection h×w before the routed experts and an up-projection w×h"
            " after them"
        ),
        "used by every token; replicated over expert parallelism",
    ),
    "parameters of one MoE layer's latent projections",
    coefficient_unit=P,
)
