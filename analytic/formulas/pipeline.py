"""Pipeline bubbles: as a fraction of ideal time, and in time for each schedule.

t_b is the input-gradient backward and t_w the weight-gradient backward (Qi et al.'s B and W), so a
full backward is t_b + t_w. DeepSeek-V3 writes B for the full backward; its expressions are
rewritten here in Qi et al.'s letters."""

from ..core.algebra import Eq, Max, Min, Mod, Piecewise, floor
from ._catalogue import S, define

p, m, v = S("pp", "microbatches", "vpp")
tf, tb, tw, tfb = S("t_f", "t_b", "t_w", "t_fb")

NARAYANAN = "Narayanan et al. 2021, Megatron-LM PTD-P, arXiv 2104.04473"
QI = "Qi et al. 2023, Zero Bubble Pipeline Parallelism, arXiv 2401.10241 Table 2"
V3 = "DeepSeek-V3 Technical Report, arXiv 2412.19437 §3.2.1 Table 2"
FRACTION = (
    "bubble time divided by ideal time (m microbatches with no bubble)",
    "equal forward/backward time on every stage; derived: derivations/pipeline.py",
)

define(
    "pipeline.bubble.gpipe",
    (p - 1) / m,
    "",
    f"Huang et al. 2019, GPipe, arXiv 1811.06965 §2.3; {NARAYANAN} §2.2.1",
    FRACTION,
    "bubble fraction of GPipe",
)
define(
    "pipeline.bubble.1f1b",
    (p - 1) / m,
    "",
    f"{NARAYANAN} §2.2.1",
    FRACTION,
    "bubble fraction of 1F1B",
)
define(
    "pipeline.bubble.interleaved",
    (p - 1) / (v * m),
    "",
    f"{NARAYANAN} §2.2.2; Llama 3 arXiv 2407.21783 §3.3.2",
    FRACTION + ("v model chunks per device",),
    "bubble fraction of interleaved 1F1B",
)
define(
    "pipeline.bubble_share.1f1b",
    (p - 1) / (m + p - 1),
    "",
    f"{NARAYANAN} §2.2.1 (bubble over total time)",
    ("bubble time divided by total step time",),
    "share of a 1F1B step spent in the bubble",
)
define(
    "pipeline.bubble_time.1f1b",
    (p - 1) * (tf + tb + tw),
    "s",
    f"{QI}; {V3} ((PP−1)(F+B), B = T_B + T_W)",
    (),
    "bubble time of 1F1B",
)
define(
    "pipeline.bubble_time.zb_h1",
    (p - 1) * (tf + tb - tw),
    "s",
    f"{QI}; {V3} (ZB1P: (PP−1)(F+B−2W))",
    ("peak activations as 1F1B (p microbatches)",),
    "bubble time of ZB-H1",
    domain=(
        (
            tw <= tf + tb,
            (
                "T_W > T_F + T_B: one W pass more than fills the slot the schedule gives it, "
                "and the formula turns negative"
            ),
        ),
    ),
)
define(
    "pipeline.bubble_time.zb_h2",
    (p - 1) * (tf + tb - 2 * tw),
    "s",
    QI,
    ("peak activations 2p − 1 microbatches", "zero when T_F + T_B = 2·T_W"),
    "bubble time of ZB-H2",
    domain=(
        (
            2 * tw <= tf + tb,
            (
                "2·T_W > T_F + T_B: the bubble is already zero at equality, and the formula turns"
                " negative beyond it (pipeline.bubble_time.critical_path bounds the bubble there)"
            ),
        ),
    ),
)
define(
    "pipeline.bubble_time.dualpipe",
    (p / 2 - 1) * (tfb + tb - 2 * tw),
    "s",
    f"{V3} ((PP/2−1)(F&B + B − 3W) with B = T_B + T_W)",
    ("p and the microbatch count even", "parameters held twice, activations p + 1 microbatches"),
    "bubble time of DualPipe",
    domain=(
        (p >= 2, "DualPipe needs at least two stages (p even)"),
        (2 * tw <= tfb + tb, "2·T_W > T_FB + T_B: the formula turns negative"),
    ),
)
define(
    "pipeline.bubble_time.critical_path",
    Max(0, p * v * (tf + tb) + tw - m * v * (tf + tb + tw)),
    "s",
    "derived: derivations/pipeline.py (the first microbatch's chain of dependencies)",
    (
        (
            "any schedule: the first microbatch's forward and input-gradient passes run one after"
            " another through all p·v model chunks, then its weight-gradient pass; a stage's own"
            " work is m·v·(T_F + T_B + T_W)"
        ),
        (
            "a lower bound on the bubble time (exact for one microbatch); point-to-point time not"
            " counted"
        ),
        "zero once the stage's own work outlasts the chain (a bubble is never negative)",
    ),
    "the least bubble time any pipeline schedule can have",
)
define(
    "pipeline.in_flight.1f1b",
    p,
    "",
    f"{NARAYANAN} §2.2.1; {QI}",
    ("the first stage holds p microbatches' activations (at most m)",),
    "microbatches in flight on the first stage, 1F1B",
)
k = S("stage")
define(
    "pipeline.in_flight.1f1b_stage",
    p - k,
    "",
    f"{NARAYANAN} §2.2.1 (stage k warms up with p − k − 1 forwards)",
    ("stage k holds p − k microbatches' activations (at most m)",),
    "microbatches in flight on stage k, 1F1B",
    domain=((k < p, "stage k is not one of the p stages (0 to p − 1)"),),
)
define(
    "pipeline.in_flight.interleaved_stage",
    2 * (p - k - 1) + (v - 1) * p + 1,
    "",
    "NVIDIA/Megatron-LM megatron/core/pipeline_parallel/schedules.py, get_num_warmup_microbatches"
    " for the interleaved schedule ((p − k − 1)·2 + (v − 1)·p warm-up chunks) plus the one"
    " in its steady state; Korthikanti et al. 2022 eq. (5) at k = 0",
    (
        (
            "model chunks (of L/(p·v) layers each) whose activations stage k holds at its peak (at"
            " most m·v)"
        ),
    ),
    "model chunks in flight on stage k, interleaved 1F1B",
    domain=((k < p, "stage k is not one of the p stages (0 to p − 1)"),),
)
define(
    "pipeline.in_flight.interleaved_end_chunk",
    Piecewise(
        (Min(2 * p - 1, p + (m - p) * v), Eq(k, 0)),
        (Piecewise((1, Eq(m, p)), (0, True)), Eq(k, p - 1)),
        (0, True),
    ),
    "",
    "derived from Megatron-LM's interleaved order (megatron/core/pipeline_parallel/schedules.py):"
    " the first stage's warm-up of (p − 1)·2 + (v − 1)·p chunks and the one in its steady"
    " state run chunk 0 on p microbatches, each later chunk on p, then chunk 0 again on up to p −"
    " 1 more (at most m·v in all); the last stage's last chunk holds one microbatch at its peak"
    " only where m = p (later a full chunk's microbatch takes its place);"
    " analytic.reference.pipeline_sim counts both",
    (
        (
            "stage k's first chunk (k = 0) or last chunk (k = p − 1) holds a layer fewer than the"
            " others: the embedding or the output layer and loss take its place (Megatron-Core's"
            " --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split)"
        ),
        "m a multiple of p, as the interleaved schedule needs",
    ),
    "microbatches of the lighter end chunk in flight on stage k at its peak, interleaved 1F1B",
    domain=(
        (k < p, "stage k is not one of the p stages (0 to p − 1)"),
        (Eq(Mod(m, p), 0), "interleaved 1F1B needs the m microbatches to be a multiple of p"),
    ),
)
j, n_f, n_b = S("chunk", "forwards", "backwards")


def _run(passes, position):
    """Microbatches of the stage's chunk ``position`` among its first ``passes`` chunk passes in
    Megatron's interleaved order (p microbatches a chunk, chunk after chunk), at most m."""
    group = p * v
    return Min(m, p * floor(passes / group) + Min(p, Max(0, Mod(passes, group) - position * p)))


define(
    "pipeline.in_flight.interleaved_chunk",
    _run(n_f, j) - _run(n_b, v - 1 - j),
    "",
    "derived from Megatron-LM's interleaved order (megatron/core/pipeline_parallel/schedules.py,"
    " get_model_chunk_id): a stage's forwards run its chunks in groups of p microbatches, chunk"
    " 0 to v − 1 and round again, and its backwards the same groups from chunk v − 1 down;"
    " analytic.reference.pipeline_sim counts the same",
    ("m a multiple of p, as the interleaved schedule needs",),
    "microbatches of a stage's chunk j whose activations it holds after n_F chunk forwards and"
    " n_B chunk backwards, interleaved 1F1B",
    domain=(
        (j < v, "chunk j is not one of the stage's v chunks (0 to v − 1)"),
        (n_b <= n_f, "a chunk's backward follows its forward: n_B ≤ n_F"),
        (Eq(Mod(m, p), 0), "interleaved 1F1B needs the m microbatches to be a multiple of p"),
    ),
)
define(
    "pipeline.unpaired_share.combined_1f1b",
    Min(2 * (p - 1) + (v - 1) * p + 1, m * v) / (m * v),
    "",
    "NVIDIA/Megatron-LM megatron/core/pipeline_parallel/combined_1f1b.py (a forward and"
    " another microbatch's backward run as one step, each hiding the other's expert-parallel"
    " all-to-alls) and schedules.py, get_num_warmup_microbatches: (p − 1)·2 + (v − 1)·p"
    " warm-up chunks on the first stage under interleaving, one more with"
    " overlap_moe_expert_parallel_comm; 1 without a pipeline (the first forward)",
    (
        "the warm-up forwards and as many cool-down backwards run unpaired, of the m·v"
        " forwards and m·v backwards of the stage's chunks; the first stage's, which warms up"
        " longest",
    ),
    "share of the chunk passes that run without a paired pass, Megatron-Core's combined 1F1B",
)
define(
    "pipeline.in_flight.zb_h2",
    2 * p - 1,
    "",
    QI,
    ("peak activation memory (2p − 1)·M_B",),
    "microbatches in flight on the first stage, ZB-H2",
)
define(
    "pipeline.in_flight.dualpipe",
    p + 1,
    "",
    V3,
    ("activations PP + 1",),
    "microbatches in flight on a stage, DualPipe",
)
define(
    "pipeline.parameter_copies.dualpipe",
    2,
    "",
    f"{V3} (Parameter: 2×)",
    (
        (
            "each rank holds the chunks of both directions, so the parameters (and their gradients)"
            " twice"
        ),
    ),
    "copies of its parameters a rank holds under DualPipe, on average over the ranks",
)
define(
    "pipeline.mirror_stage.dualpipe",
    p - 1 - k,
    "",
    "deepseek-ai/DualPipe examples/example_dualpipe.py (rank r holds full_modules[r] and "
    "full_modules[pp_size - 1 - r]); "
    + V3
    + " (Parameter: 2×)",
    (
        (
            "rank k runs stage k of one direction and stage p − 1 − k of the other, so the"
            " first and the last rank both hold the embedding and the output layer"
        ),
    ),
    "the second stage whose parameters the rank of stage k holds under DualPipe",
    domain=((k < p, "stage k is not one of the p stages (0 to p − 1)"),),
)
define(
    "pipeline.imbalance_time",
    (m - 1) / m * (S("slowest_stage_time") - S("stage_time")),
    "s",
    f"{NARAYANAN} §2.2.1 (1F1B's (m + p − 1) slots, equal stages); derived:"
    " derivations/pipeline.py (1F1B with stage times t_i takes (m − 1)·max t_i + Σ t_i)",
    (
        (
            "T_max and T: the slowest stage's and the average stage's compute for the step's m"
            " microbatches"
        ),
        (
            "the schedule's bubble is that of the average stage; the slowest stage sets the pace of"
            " the other m − 1 microbatches: exact for GPipe and 1F1B where the slowest stage is"
            " the last (the output layer's), above the simulated step by at most one microbatch's"
            " excess where it is a middle one; interleaved and zero-bubble schedules take up to one"
            " microbatch's excess more (analytic.reference.pipeline_sim)"
        ),
    ),
    "time the slowest pipeline stage adds to a step over the average stage",
)
