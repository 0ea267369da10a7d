"""What each parallel axis sends: DP gradients, TP all-reduces, PP boundaries, CP blocks, EP
tokens."""

from ..core.algebra import Max
from ._catalogue import S, define

Psi, e, s, b, h = S("params", "element_bytes", "seq_len", "microbatch_size", "hidden")
F, Bw, D, k, M = S("peak_flops", "bandwidth", "tokens", "topk", "nodes_per_token")
Bup, Bout = S("scale_up_bandwidth", "scale_out_bandwidth")
m, p, v = S("microbatches", "pp", "vpp")
a, a_kv, d_h = S("heads", "kv_heads", "head_dim")

SHOEYBI = "Shoeybi et al. 2019, Megatron-LM, arXiv 1909.08053 §3"
NARAYANAN = "Narayanan et al. 2021, Megatron-LM PTD-P, arXiv 2104.04473"
V3 = "DeepSeek-V3 Technical Report, arXiv 2412.19437"

define(
    "parallelism.dp.gradient_bytes",
    Psi * e,
    "byte",
    "Rajbhandari et al. 2020, ZeRO, arXiv 1910.02054 §7.1",
    ("one gradient per parameter in the element type (2Ψ bytes for bf16)",),
    "the gradient buffer a data-parallel rank reduces",
)
define(
    "parallelism.tp.allreduce_bytes",
    s * b * h * e,
    "byte",
    f"{SHOEYBI}, Fig. 3 (f and g operators)",
    (
        (
            "one activation-sized all-reduce: 2 per layer forward (after attention and MLP), 2"
            " backward"
        ),
        (
            "with sequence parallelism each becomes a reduce-scatter + all-gather of the same size "
            "(Korthikanti et al. 2022 §4.2.2)"
        ),
    ),
    "message of one tensor-parallel all-reduce",
)
define(
    "parallelism.tp.allreduces_per_layer",
    4,
    "",
    f"{SHOEYBI} §3 ('two all-reduces in the forward pass and two in the backward pass' per layer)",
    ("no recomputation; full recomputation adds the 2 forward all-reduces again",),
    "tensor-parallel all-reduces per layer per microbatch",
)
define(
    "parallelism.tp.allreduces_recomputed_per_layer",
    2,
    "",
    f"{SHOEYBI} (the forward's two all-reduces); Korthikanti et al. 2022, arXiv 2205.05198 §5"
    " (full recomputation runs each layer's forward again in the backward)",
    (
        (
            "full recomputation: the recomputed forward's two all-reduces (or, with sequence"
            " parallelism, its reduce-scatters and all-gathers) run again"
        ),
    ),
    "tensor-parallel all-reduces per layer per microbatch that full recomputation adds",
)
QK_GATHER = (
    "pytorch/torchtitan torchtitan/experiments/qwen3/infra/parallelize.py (Aug-Oct 2025): wq, wk,"
    " wv ColwiseParallel(use_local_output=False) and attention.q_norm, attention.k_norm"
    " NoParallel(use_local_output=False), whose output hook redistributes the head-sharded norm"
    " outputs to its Replicate() output layout; model.py: RoPE and the key heads' repetition"
    " (repeat_kv) follow on the gathered tensors before scaled_dot_product_attention, whose DTensor"
    " strategy shards the heads again; pytorch/torchtitan issue #1867 (Oct 2025, 'Qwen3 model"
    " parallel including unnecessary all_gather', fixed with SequenceParallel(sequence_dim=2))"
)
define(
    "parallelism.tp.qk_gather_bytes",
    s * b * (a + a_kv) * d_h * e,
    "byte",
    f"{QK_GATHER}; counted on a gloo process group by analytic.reference.qk_gather",
    (
        (
            "the queries' a and the keys' a_kv heads of one microbatch all-gathered over the TP"
            " group after their norms, once per forward pass (again in a recomputed forward)"
        ),
    ),
    "message of the all-gather of a layer's normalised queries and keys where a stack's TP plan"
    " replicates them",
)
define(
    "parallelism.tp.qk_gather_bytes_backward",
    s * b * 2 * a * d_h * e,
    "byte",
    f"{QK_GATHER}; counted on a gloo process group by analytic.reference.qk_gather",
    (
        (
            "the backward of the head-sharding redistribution before attention: attention's"
            " head-sharded gradients of the queries (a heads) and of the repeated keys (a heads)"
            " all-gathered, once per backward"
        ),
    ),
    "message of the backward's all-gather of a layer's query and repeated-key gradients where a"
    " stack's TP plan replicates its queries and keys",
)
define(
    "parallelism.pp.transfers_per_gpu",
    2 * m * (p * v - 1) / p,
    "",
    f"{NARAYANAN} §2.2 and §4.1; derived: each of the p·v − 1 chunk boundaries carries one"
    " activation forward and one gradient backward per microbatch, shared over the p stages",
    ("point-to-point transfers of parallelism.pp.p2p_bytes / t each (scatter/gather, §4.1)",),
    "stage-boundary transfers a GPU makes per step",
)
define(
    "parallelism.dp.zero3_gathers_per_microbatch",
    2,
    "",
    "Rajbhandari et al. 2020, ZeRO, arXiv 1910.02054 §7.2.2 (parameters all-gathered for the"
    " forward and again for the backward)",
    (
        (
            "ZeRO-3 without a pipeline; FSDP's per-block units wrap a checkpointed block, unshard"
            " it before the recomputation and keep it for the backward: still two"
        ),
    ),
    "times ZeRO-3 gathers each parameter per microbatch",
)
define(
    "parallelism.dp.zero3_gathers_per_microbatch_recomputed_per_tensor",
    3,
    "",
    "DeepSpeed ZeRO-3's module hooks fire again in a recomputed forward (deepspeedai/DeepSpeed"
    " issue #4784) and partition the parameters after it (PR #8130)",
    (
        (
            "per-tensor ZeRO-3 (DeepSpeed of 2021) under full recomputation: forward, recomputed"
            " forward, backward"
        ),
    ),
    "times per-tensor ZeRO-3 gathers each parameter per microbatch under full recomputation",
)
define(
    "parallelism.pp.p2p_bytes",
    s * b * h * e,
    "byte",
    f"{NARAYANAN} §2.2 and §4.1",
    (
        (
            "the activation [s, b, h] sent forward at a stage boundary; its gradient goes back,"
            " same size"
        ),
        "scatter/gather optimisation (§4.1) divides it by t on each TP rank",
    ),
    "bytes of one stage-boundary transfer of one microbatch",
)
define(
    "parallelism.cp.min_block",
    F / Bw,
    "token",
    "Liu et al. 2023, Ring Attention, arXiv 2310.01889 §3 (block size c ≥ F/B); derived:"
    " derivations/context_parallel.py",
    (
        (
            "a block of c tokens costs 4·d·c² FLOPs of attention and sends 4·c·d bytes of K"
            " and V (16-bit)"
        ),
        "communication hides behind compute when c ≥ F/B",
    ),
    "smallest block (tokens per device) that hides the ring exchange",
    coefficient_unit="token*byte/FLOP",
)
define(
    "parallelism.cp.kv_bytes",
    2 * s * b * S("kv_heads") * S("head_dim") * e,
    "byte",
    "Llama 3 Herd of Models, arXiv 2407.21783 §3.3.2 (CP all-gathers K and V, then reduce-scatters"
    " their gradients)",
    ("keys and values of the whole sequence, a_kv heads of d_h each",),
    "bytes of the gathered K and V of one layer (the all-gather's full buffer)",
)
LLAMA3_CP = "Llama 3 Herd of Models, arXiv 2407.21783 §3.3.2"
define(
    "parallelism.cp.kv_gathers_per_layer",
    1,
    "",
    f"{LLAMA3_CP} (all-gather K and V before attention, reduce-scatter their gradients after its"
    " backward)",
    (
        (
            "one all-gather of K and V in the forward; the backward reduce-scatters their gradients"
            " once"
        ),
    ),
    "context-parallel all-gathers of K and V per layer per microbatch",
)
define(
    "parallelism.cp.kv_gathers_recomputed_per_layer",
    1,
    "",
    f"{LLAMA3_CP}; Korthikanti et al. 2022, arXiv 2205.05198 §5 (full recomputation runs each"
    " layer's forward again in the backward)",
    ("full recomputation: the recomputed forward all-gathers K and V again",),
    "context-parallel all-gathers per layer per microbatch that full recomputation adds",
)
define(
    "parallelism.ep.dispatch_bytes",
    D * k * h * e,
    "byte",
    f"{V3} §3.2.2",
    ("each token goes to k experts; combine sends the same volume back",),
    "bytes of an MoE dispatch (combine likewise)",
)
MCORE_DISPATCHER = (
    "NVIDIA/Megatron-LM megatron/core/transformer/moe/token_dispatcher.py,"
    " MoEAlltoAllTokenDispatcher: after the expert-parallel all-to-all the routed tokens are"
    " all-gathered over the expert tensor-parallel group, and reduce-scattered over it before the"
    " combine's all-to-all"
)
define(
    "parallelism.ep.etp_gather_bytes",
    S("etp") * D * k * h * e,
    "byte",
    MCORE_DISPATCHER,
    (
        (
            "each of the etp ranks received D·k routed tokens in the all-to-all (D its own tokens,"
            " each sent to k experts); the gather gives every rank all of them, for the slice of"
            " each expert it holds"
        ),
        "the combine reduce-scatters the same volume; the backward runs the pair again, reversed",
    ),
    "bytes of the expert tensor-parallel all-gather of an MoE layer's routed tokens (its"
    " reduce-scatter likewise)",
)
define(
    "parallelism.ep.node_limited_dispatch_bytes",
    D * M * h * e,
    "byte",
    f"{V3} §3.2.2 (node-limited routing)",
    (
        (
            "a token is sent once to each of its M nodes over IB and forwarded inside the node over"
            " NVLink"
        ),
    ),
    "bytes of an MoE dispatch that cross nodes with node-limited routing",
)
MCORE_ALLGATHER = (
    "NVIDIA/Megatron-LM megatron/core/transformer/moe/token_dispatcher.py,"
    " MoEAllGatherTokenDispatcher: the hidden states of every rank of the expert-parallel group"
    " all-gathered before the local experts pick their tokens, the outputs reduce-scattered back"
)
define(
    "parallelism.ep.allgather_dispatch_bytes",
    S("ep") * D * h * e,
    "byte",
    MCORE_ALLGATHER,
    (
        (
            "each of the E_p ranks the dispatcher gathers over (the expert layers' ETP × EP ranks"
            " together) contributes its D tokens once, whatever their k experts"
        ),
        (
            "the combine reduce-scatters a tensor of the same size; the backward runs the pair"
            " again, reversed"
        ),
    ),
    "bytes of the tensor an all-gather dispatch gathers on every rank (its reduce-scatter"
    " likewise)",
)
N_n = S("nodes")
define(
    "parallelism.ep.nodes_reached",
    N_n * (1 - (1 - 1 / N_n) ** k),
    "",
    "derived: derivations/expert_parallel.py (occupancy: k experts each on one of N nodes drawn"
    " uniformly, the expected count of nodes hit); NVIDIA/Megatron-LM MoEFlexTokenDispatcher with"
    " DeepEP (deepseek-ai/DeepEP README: a token is sent to each node it reaches once over RDMA,"
    " then forwarded over NVLink)",
    (
        (
            "balanced routing: each of a token's k experts on a node drawn uniformly and"
            " independently from the N its expert-parallel group spans"
        ),
        "node-limited routing bounds it by its M (parallelism.ep.node_limited_*)",
    ),
    "nodes a token's k experts reach on average, over N nodes",
)
define(
    "parallelism.ep.experts_per_node_at_same_cost",
    Bup / Bout,
    "",
    f"{V3} §3.2.2",
    ("while IB delivers one copy to a node, NVLink forwards Bup/Bout copies inside it",),
    "experts per node a token can reach at the cost of one IB transfer (3.2 for 160/50 GB/s)",
)
define(
    "parallelism.ep.experts_at_same_cost",
    M * Bup / Bout,
    "",
    f"{V3} §3.2.2 ('up to 13 experts (4 nodes × 3.2)')",
    ("node-limited routing to M nodes",),
    "experts a token can reach at no more IB traffic",
)
N_cta, N_sm = S("comm_ctas", "sms")
define(
    "parallelism.overlap",
    1 - N_cta / N_sm,
    "",
    "NVIDIA/nccl issue 689, sjeaugey (NVIDIA), 2023: NCCL's CTAs, one a channel, 'won't share an"
    " SM with compute kernels'; derived: compute of W seconds beside a collective of T ≤ W"
    " seconds runs T seconds on N_SM − N_cta of N_SM SMs, so it ends T·N_cta/N_SM later",
    (
        "the compute beside the collective runs at the rate of the SMs left to it (its waves spread"
        " over them: no tail effect of a single-wave GEMM)",
        "the collective's HBM traffic is not charged (a NIC's 50 GB/s is about 1% of HBM's)",
        "with SMs reserved for communication for the whole step (comm_sms), the collectives run"
        " on those and φ = 1",
    ),
    "share of overlapped traffic's time that costs the compute beside it nothing",
)
T_c, W_c, phi = S("comm_time", "comm_window", "overlap")
define(
    "parallelism.overlapped_exposed_time",
    Max(T_c * (1 - phi), T_c - W_c),
    "s",
    "derived: blocks of equal compute w and collectives t, each collective beside the compute"
    " of its block, take max(t, w + (1 − φ)·t) each; summed, the step is"
    " W + max(T·(1 − φ), T − W)"
    " (analytic.reference.streams simulates FSDP's two streams: tests/test_overlap.py)",
    (
        "the collectives' time spread over the window as its compute is (equal blocks)",
        "φ: the share of a collective's time that costs the compute beside it nothing"
        " (parallelism.overlap)",
    ),
    "time overlapped collectives add to the step beside a window of compute",
)
