"""The source text's step (S17–S31) through Plan, and properties of plans."""

import math
from pathlib import Path

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import analytic as an
from analytic.core.errors import FreeSymbolError, InputError, LayoutError
from analytic.strategies import plans


def essay(grad_dtype="bf16", **layout):
    """The source text's step. The text counts ZeRO's 2-byte gradients (S20), so its claims are
    checked with grad_dtype="bf16"; megatron-core's own default keeps fp32 buffers."""
    kw = dict(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True) | layout
    return an.Plan(
        an.model("llama3-405b"), an.hardware("h100-sxm"), an.Layout(**kw), seq_len=8192,
        global_batch=2048, grad_dtype=grad_dtype,
    )


@pytest.fixture(scope="module")
def plan():
    return essay()


#: the 405B's SwiGLU backward at 8,192 tokens, TP 8: its gate's and up projection's 16-bit
#: gradients, [s·b, h_ff/t] each (memory.activations.backward.swiglu_gradients), held beyond a
#: stage's kept activations
BACKWARD_405B = 2 * 2 * 8192 * 53248 / 8


def test_s17_s18_s19_batch_and_placement(plan):
    assert plan.tokens_per_step.magnitude == 16_777_216
    assert plan.microbatches == 32
    assert plan.gpus == 8192
    assert plan.expr("nodes").value().magnitude == 1024
    assert plan.expr("layers_per_stage").value().magnitude == pytest.approx(7.875)
    p = plan.placement()
    assert (
        p["tp"]["link"] == "scale-up"
        and p["pp"]["link"] == "scale-out"
        and p["dp"]["link"] == "scale-out"
    )


def test_s20_parameters_and_model_states(plan):
    # the architecture's 405.85B over 128 (text: 405e9/128 = 3.16B)
    assert plan.expr("params_per_gpu").value().magnitude == pytest.approx(
        405_853_388_800 / 128, rel=1e-12
    )
    average = plan.expr("params_per_gpu").value().magnitude
    # text: 6.3 GB (2 digits), the average GPU
    assert 2 * average / 1e9 == pytest.approx(6.3, abs=0.05)
    assert 12 * average / 64 / 1e9 == pytest.approx(0.6, abs=0.05)  # text: ≈ 0.6 GB
    # the worst stage, the first, holds 8 layers and the 128,256 × 16,384 embedding, over TP 8
    m, stage0 = (
        plan.memory(),
        (
            8 * (2 * 16384 * 16384 + 2 * 16384 * 8 * 128 + 3 * 16384 * 53248 + 2 * 16384)
            + 128256 * 16384
        )
        / 8,
    )
    assert m.stage == 0 and m.weights.to("byte").magnitude == pytest.approx(2 * stage0, rel=1e-12)
    assert m.gradients == m.weights
    assert m.optimizer.to("byte").magnitude == pytest.approx(12 * stage0 / 64, rel=1e-12)


def test_s22_activations_library_value(plan):
    """The text's 47 GB is not reproduced: stage 0 of 1F1B keeps p = 16 microbatches of ceil(126/16)
    = 8 layers; the Llama-layer count (flash attention, GQA, SwiGLU, SP over 8) gives 68.25 GB. The
    gap (+45%) is recorded in validation/REPORT.md (S22). The backward of a layer adds its SwiGLU's
    two gradients (0.22 GB): 68.47 GB."""
    act = plan.memory().activations.to("GB").magnitude
    per_layer = 8192 * (8 * 16384 + (4 * 128 * 128 + 4 * 8 * 128 + 6 * 53248 + 4 * 128)) / 8
    assert act == pytest.approx((per_layer * 8 * 16 + BACKWARD_405B) / 1e9, rel=1e-12)
    assert act == pytest.approx(68.47, abs=0.01)
    # 82.7 GB with the text's 2-byte gradients: inside an H100's 81,559 MiB, not at the peak
    mem = plan.memory()
    assert (
        mem.fits
        and plan.memory_peak() > mem.hbm
        and plan.memory_verdict() == "fits at the allocator's limit"
    )


def test_memory_verdict_by_hand(plan):
    """The verdict's three bands, on HBMs given by hand around the fullest stage's count C, the
    least memory measured outside the allocator L (1.73 GiB, TorchRec's rank 0: 81,920 − 17,272 −
    62,875 MiB) and the process's predicted peak P = 1.11 C + M (M the snapshots' mean): the count
    and L within the HBM decide whether it fits (the boundary fits), the peak whether with room for
    the allocator's cache and everything outside it; a stack whose allocator has none fitted
    (MaxText's, XLA) fits by the count alone."""
    count = plan.memory().total.to("byte").magnitude
    least = plan.memory().outside.to("byte").magnitude
    assert least == (81920 - 17272 - 62875) * 2**20
    mean = plan.memory_outside().to("byte").magnitude
    peak = plan.memory_peak().to("byte").magnitude + mean
    assert plan.memory_peak().to("byte").magnitude == pytest.approx(
        an.presets.memory_reserve("pytorch")["reserve"] * count, rel=1e-9
    )
    floor = count + least
    for hbm, verdict in (
        (count, "does not fit"),
        (0.999 * floor, "does not fit"),
        (floor, "fits at the allocator's limit"),
        ((floor + peak) / 2, "fits at the allocator's limit"),
        (peak, "fits"),
        (2 * peak, "fits"),
    ):
        assert plan.replace(hbm=f"{hbm} byte").memory_verdict() == verdict, hbm
        assert plan.replace(hbm=f"{hbm} byte").memory().fits == (verdict != "does not fit")
        assert plan.replace(hbm=f"{hbm} byte").value("memory.headroom").to(
            "byte"
        ).magnitude == pytest.approx(hbm - floor, abs=1)
    # the last stage holds less
    assert plan.replace(hbm=f"{0.999 * floor} byte").memory_verdict(stage=15) == "fits"
    # a process's own measure of what lies outside replaces both the least and the mean
    assert (
        plan.replace(hbm=f"{count} byte", outside_bytes="0 B").memory_verdict()
        == "fits at the allocator's limit"
    )
    alloc = plan.memory_peak().to("byte").magnitude
    own = plan.replace(hbm=f"{alloc + 1e9} byte", outside_bytes="1 GB")
    assert round(own.memory_outside().m_as("byte")) == 1e9
    assert round(own.memory().outside.m_as("byte")) == 1e9
    assert (
        own.memory_verdict() == "fits"
        and own.replace(hbm=f"{alloc + 0.99e9} byte").memory_verdict()
        == "fits at the allocator's limit"
    )
    xla = plan.replace(stack="maxtext")
    xla_count = xla.memory().total.to("byte").magnitude
    assert xla.memory().outside.magnitude == 0
    assert xla.replace(hbm=f"{1.001 * xla_count} byte").memory_verdict() == "fits"
    assert xla.replace(hbm=f"{0.999 * xla_count} byte").memory_verdict() == "does not fit"


def test_s24_s25_s26_logits_dp_optimizer(plan):
    # vocab-parallel
    assert plan.expr("memory.logits").value().to("GB").magnitude == pytest.approx(
        2.10 / 8, abs=0.001
    )
    # text: ≈ 12.4 GB
    assert plan.communication()["dp"].to("GB").magnitude == pytest.approx(12.4, abs=0.1)
    # text: ≈ 49M
    assert plan.value("optimizer_params").magnitude == pytest.approx(49.4e6, rel=0.01)
    # text: 2.1 GB
    assert plan.value("memory.logits.unsplit").to("GB").magnitude == pytest.approx(2.10, abs=0.005)
    assert plan.value("communication_time.dp_one_nic").to("s").magnitude == pytest.approx(
        plan.communication()["dp"].to("byte").magnitude / 50e9, rel=1e-12
    )  # one 400 Gb/s NIC (S25)


def test_s21_s23_messages_at_the_tokens_of_a_cp_rank():
    """A TP collective's message and a stage's output are [s/c, b, h] in 16 bits (S21, S23): 268 MB
    for Llama 3 405B at 8,192 tokens, half with CP 2; the output crosses one 50 GB/s NIC in
    bytes/B."""
    for cp in (1, 2):
        p = an.Plan(
            an.model("llama3-405b"),
            an.hardware("h100-sxm"),
            an.Layout(tp=8, cp=cp, pp=16, dp=64 // cp),
            seq_len=8192,
            global_batch=2048,
        )
        message = 8192 // cp * 16384 * 2
        assert round(p.value("communication.tp_message").m_as("byte")) == message
        assert p.value("communication_time.stage_output").to("s").magnitude == pytest.approx(
            message / 50e9, rel=1e-12
        )
        assert round(p.value("memory.logits.unsplit").m_as("byte")) == 8192 // cp * 128256 * 2


@pytest.mark.parametrize("zero", [0, 1])
def test_optimizer_params_shard_dense_and_expert_weights_over_their_own_replicas(zero):
    """ZeRO-1 splits the dense weights' optimizer over the dp = 4 ranks holding them, each expert's
    over the dp/ep = 2: 4 MoE layers of 8 SwiGLU experts (3·256·128 each) are 3,145,728 routed
    parameters, half on a rank."""
    p = an.Plan(
        _moe(), an.hardware("h100-sxm"), an.Layout(dp=4, ep=2, zero=zero), seq_len=1024,
        global_batch=8,
    )
    local_experts = 4 * 8 * 3 * 256 * 128 / 2
    dense = p.value("params_per_gpu").magnitude - local_experts
    want = dense / 4 + local_experts / 2 if zero else dense + local_experts
    assert p.value("optimizer_params").magnitude == pytest.approx(want, rel=1e-12)


def test_s27_exact_flops_and_step(plan):
    assert plan.model_flops("6nd").magnitude == pytest.approx(4.09e19, abs=0.005e19)  # 3 digits
    assert plan.step_time(mfu=0.40).to("s").magnitude == pytest.approx(12.6, abs=0.05)


def test_s31_moe_flops_ratio():
    dense = an.model("llama3-405b").active_params
    moe = an.model("deepseek-v3").active_params
    # text: 1/10.9 with the rounded 405B and 37B
    assert dense / moe == pytest.approx(405 / 37, rel=0.02)


def test_compute_and_bubble_are_the_pipeline_simulators_makespan(plan):
    """1F1B over p = 16 stages and m = 32 microbatches, each microbatch's F, B and W a third of its
    microbatches' compute (every op class but the optimizer step, which runs once after them): the
    simulator's op-by-op makespan is that compute plus the plan's bubble; communication only
    adds."""
    from analytic.reference.pipeline_sim import simulate

    t = {k: v.to("s").magnitude for k, v in plan.time_breakdown(ops=True).items()}
    m, p = plan.microbatches, plan.layout.pp
    work = t["gemm"] + t["attention"] + t["memory_bound"]
    third = work / (3 * m)
    sim = simulate("1f1b", p, m, t_f=third, t_b=third, t_w=third)
    assert work + t["bubble"] == pytest.approx(sim.makespan, rel=1e-12)
    assert plan.step_time().to("s").magnitude > sim.makespan


def test_memory_total_by_hand(plan):
    """ZeRO-1 over 64 replicas of TP8 × PP16: 2 + 2 bytes of weights and gradients and 12/64 of Adam
    per parameter of stage 0 on the GPU (8 layers and the embedding over TP 8), and its 16
    microbatches of 8 layers (hand count above), and the SwiGLU backward's gradients."""
    psi = (
        8 * (2 * 16384 * 16384 + 2 * 16384 * 8 * 128 + 3 * 16384 * 53248 + 2 * 16384)
        + 128256 * 16384
    ) / 8
    per_layer = 8192 * (8 * 16384 + (4 * 128 * 128 + 4 * 8 * 128 + 6 * 53248 + 4 * 128)) / 8
    total = 2 * psi + 2 * psi + 12 * psi / 64 + per_layer * 8 * 16 + BACKWARD_405B
    assert plan.memory().total.to("byte").magnitude == pytest.approx(total, rel=1e-12)


def test_megatron_cores_default_gradients_are_fp32_buffers():
    """Megatron-Core trains bf16 with fp32 gradient buffers (its arguments.py): the essay's stage 0
    holds 2 + 4 bytes per parameter and 12/64 of Adam, 18 bytes at dp = 1; ZeRO-3, fp16 training and
    the other stacks keep ZeRO's 2-byte gradients; an explicit grad_dtype wins."""
    psi = (
        8 * (2 * 16384 * 16384 + 2 * 16384 * 8 * 128 + 3 * 16384 * 53248 + 2 * 16384)
        + 128256 * 16384
    ) / 8
    per_layer = 8192 * (8 * 16384 + (4 * 128 * 128 + 4 * 8 * 128 + 6 * 53248 + 4 * 128)) / 8
    default = essay(grad_dtype=None)
    assert default.grad_dtype == "fp32"
    m = default.memory()
    assert m.gradients.to("byte").magnitude == pytest.approx(4 * psi, rel=1e-12)
    assert m.total.to("byte").magnitude == pytest.approx(
        2 * psi + 4 * psi + 12 * psi / 64 + per_layer * 8 * 16 + BACKWARD_405B, rel=1e-12
    )
    assert essay(grad_dtype=None, zero=3).grad_dtype == "bf16"
    assert (
        essay(grad_dtype=None).replace(layout=default.layout.replace(zero=3)).grad_dtype == "bf16"
    )
    small = dict(seq_len=1024, global_batch=8)
    m8, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    assert an.Plan(m8, hw, an.Layout(dp=8), dtype="fp16", **small).grad_dtype == "bf16"
    assert an.Plan(m8, hw, an.Layout(dp=8), dtype="fp8", **small).grad_dtype == "fp32"
    assert an.Plan(m8, hw, an.Layout(dp=8), stack="torchtitan", **small).grad_dtype == "bf16"
    assert (
        an.Plan(m8, hw, an.Layout(dp=8), stack="torchtitan", grad_dtype="fp32", **small).grad_dtype
        == "fp32"
    )
    # sharded fp32 buffers
    two = an.Plan(m8, hw, an.Layout(dp=8, zero=2), grad_dtype="fp32", **small).memory()
    assert two.gradients.to("byte").magnitude == pytest.approx(4 * m8.total_params / 8, rel=1e-12)
    one = an.Plan(m8, hw, an.Layout(), **small).memory()  # dp = 1: Megatron's 18 bytes a parameter
    assert ((one.weights + one.gradients + one.optimizer) / one.weights).to(
        ""
    ).magnitude == pytest.approx(9, rel=1e-12)


def test_moe_plan_node_limited():
    p = an.Plan(
        an.model("deepseek-v3"),
        an.hardware("h800"),
        an.Layout(pp=16, dp=128, ep=64, zero=1, schedule="dualpipe"),
        seq_len=4096,
        global_batch=15360,
        dtype="fp8",
        stack="hai-llm",
    )
    limited = p.communication()["ep"]
    unlimited = an.Plan(
        an.model("deepseek-v3").replace(nodes_per_token=0),
        an.hardware("h800"),
        p.layout,
        seq_len=4096,
        global_batch=15360,
        dtype="fp8",
        stack="hai-llm",
    ).communication()["ep"]
    assert limited < unlimited  # at most 4 node copies instead of 8 expert copies cross IB
    assert p.placement()["ep"]["link"] == "two-level"


def test_layout_errors():
    with pytest.raises(LayoutError, match="tp"):
        essay(tp=3)
    with pytest.raises(LayoutError, match="ep"):
        an.Layout(dp=6, ep=4)
    with pytest.raises(LayoutError, match="pp"):
        essay(pp=128, dp=8)
    with pytest.raises(LayoutError, match="global_batch"):
        an.Plan(
            an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(dp=3), seq_len=1024,
            global_batch=8,
        )
    with pytest.raises(InputError, match="tp"):
        an.Layout(tp=2.5)
    with pytest.raises(LayoutError, match="vpp"):
        an.Layout(vpp=2)


# fp32 storage: not mixed-precision Adam
@pytest.mark.parametrize(
    "hardware,dtype,needle",
    [
        ("h100-sxm", "tf32", "expected one of 'bf16', 'fp16', 'fp8'"),
        (
            "b200",
            "fp4",
            "expected one of 'bf16', 'fp16', 'fp8'",
        ),  # a peak, but no FP4 training model
        ("a100-80g", "fp8", "has no fp8 peak; its training dtypes are bf16, fp16"),
    ],
)
def test_dtype_is_a_modelled_training_dtype_with_a_peak(hardware, dtype, needle):
    with pytest.raises(InputError, match=needle):
        an.Plan(
            an.model("llama3-8b"), an.hardware(hardware), an.Layout(dp=8), seq_len=1024,
            global_batch=8, dtype=dtype,
        )


def test_symbolic_dp_evaluates_to_numeric_plan():
    sym_plan = essay(dp=an.sym("dp"))
    num = essay()
    for q in ("memory.total", "step_time", "communication.dp", "flops"):
        f = sym_plan.expr(q)
        assert "dp" in f.symbols or q == "flops"
        got = f.subs(dp=64).value().magnitude if f.symbols else f.value().magnitude
        assert got == pytest.approx(num.expr(q).value().magnitude, rel=1e-12)
    with pytest.raises(FreeSymbolError):
        sym_plan.memory()


def test_step_time_falls_with_dp_symbolically():
    f = essay(dp=an.sym("dp")).expr("step_time")
    d = f.diff("dp")
    assert d.evaluate(dp=64).magnitude < 0  # more replicas, fewer microbatches each: faster steps


@given(plans(gpus=16))
@settings(max_examples=25)
def test_plan_invariants(plan):
    m = plan.memory()
    assert m.total.magnitude == pytest.approx(
        (m.weights + m.gradients + m.optimizer + m.gathered + m.activations).magnitude, rel=1e-9
    )
    assert plan.step_time(mfu=0.5).magnitude * 0.5 == pytest.approx(
        plan.step_time(mfu=0.25).magnitude * 0.25, rel=1e-12
    )


@given(
    plans(model="llama3-8b", hardware="h100-sxm", gpus=16),
    st.sampled_from(["none", "selective", "full"]),
)
@settings(max_examples=25)
def test_recompute_never_raises_memory_or_lowers_flops(plan, _):
    lay = plan.layout
    results = {}
    for rc in ("none", "selective", "full"):
        p = an.Plan(
            plan.model, plan.hardware, lay.replace(recompute=rc), seq_len=plan.seq_len,
            global_batch=plan.global_batch, microbatch_size=plan.microbatch_size,
        )
        results[rc] = (p.memory().total.magnitude, p.hardware_flops().magnitude)
    assert (
        results["full"][0]
        <= results["selective"][0] * (1 + 1e-12)
        <= results["none"][0] * (1 + 1e-12)
    )
    assert results["full"][1] >= results["selective"][1] >= results["none"][1]


@given(plans(gpus=16))
@settings(max_examples=25)
def test_zero_traffic_against_zero1(plan):
    """Per step, against ZeRO-1's one reduce-scatter and one all-gather: without a pipeline ZeRO-2
    reduce-scatters every microbatch ((m + 1)/2 times the traffic) and ZeRO-3 also gathers twice per
    microbatch (3m/2; per-tensor under full recomputation three times, 2m); under one ZeRO-3 holds
    its stage (the same traffic, 2·e bytes per parameter on this GPU held, both of its stages under
    DualPipe). Gradients are 16-bit throughout, so the counts compare."""

    def at(zero):
        return plan.replace(layout=plan.layout.replace(zero=zero), grad_dtype="bf16")

    dp1 = at(1).communication()["dp"].to("byte").magnitude
    m, piped = plan.microbatches, plan.layout.pp > 1
    # per-tensor ZeRO-3 under full recomputation gathers a third time, in the recomputed forward
    gathers = (
        3 if (plan.layout.zero3_gather, plan.layout.recompute) == ("per-tensor", "full") else 2
    )
    ratios = {2: 1 if piped else (m + 1) / 2, 3: 1 if piped else (1 + gathers) * m / 2}
    for zero, ratio in ratios.items():
        assert at(zero).communication()["dp"].to("byte").magnitude == pytest.approx(
            dp1 * ratio, rel=1e-9
        )
    held = at(3).memory(stage=0).gathered.to("byte").magnitude
    # 2 bytes a parameter this GPU holds
    weights = at(0).memory(stage=0).weights.to("byte").magnitude
    assert (held == pytest.approx(2 * weights, rel=1e-9)) == piped


@given(st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([0, 1, 2, 3]))
@settings(max_examples=20)
def test_doubling_dp_never_raises_memory(dp, zero):
    def mem(d):
        return (
            an.Plan(
                an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(dp=d, zero=zero),
                seq_len=2048, global_batch=64,
            )
            .memory()
            .total.magnitude
        )

    assert mem(2 * dp) <= mem(dp) * (1 + 1e-12)


@pytest.mark.parametrize(
    "schedule,ratio", [("zb-h2", 31 / 16), ("dualpipe", 17 / 16), ("zb-h1", 1.0)]
)
def test_stage0_activation_factors_of_schedules(schedule, ratio):
    """Peak activations relative to 1F1B's p microbatches: ZB-H2 2p − 1 (Qi et al. Table 2),
    DualPipe p + 1 (DeepSeek-V3 Table 2), ZB-H1 p; p = 16 and enough microbatches. DualPipe's first
    rank also computes a loss (it holds the last stage): the loss's working set comes on top, with
    the final norm's and the output layer's inputs (2 × 2 bytes × 8192 × 16384, split 8 ways by SP),
    where the other schedules' first stages hold a layer's backward gradients."""

    def first(s, name="memory.activations.first_stage"):
        p = an.Plan(
            an.model("llama3-405b"),
            an.hardware("h100-sxm"),
            an.Layout(tp=8, pp=16, dp=8, schedule=s, sequence_parallel=True),
            seq_len=8192,
            global_batch=512,
            stack="hai-llm",
        )
        return p.expr(name).value().magnitude

    extra = (
        first("1f1b", "memory.loss") + 2 * 2 * 8192 * 16384 / 8
        if schedule == "dualpipe"
        else BACKWARD_405B
    )
    assert (first(schedule) - extra) / (first("1f1b") - BACKWARD_405B) == pytest.approx(
        ratio, rel=1e-12
    )


def test_dualpipe_ranks_hold_the_model_twice():
    """DualPipe's rank k holds stages k and p − 1 − k (deepseek-ai/DualPipe's example): summed over
    the ranks, the weights are the model's parameters twice (DeepSeek-V3 Table 2: Parameter 2×), 2
    bytes each; the first and last ranks both hold the embedding and the output layer, the middle
    ones none."""
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    lay = an.Layout(pp=4, dp=2, schedule="dualpipe")
    plan = an.Plan(m, hw, lay, seq_len=4096, global_batch=64, stack="hai-llm")
    weights = [plan.memory(stage=k).weights.to("byte").magnitude for k in range(4)]
    assert sum(weights) == pytest.approx(2 * 2 * m.total_params, rel=1e-12)
    assert weights[0] == weights[3] and weights[1] == weights[2]
    # the first and last ranks' surplus: the embedding, the output layer and the final norm, 2 bytes
    # each
    assert weights[0] - weights[1] == pytest.approx(
        2 * (2 * m.vocab * m.hidden + m.hidden), rel=1e-9
    )


def test_a_pipeline_keeps_gpt3s_tied_embedding_again_on_its_last_stage():
    """GPT-3 175B over 4 stages: the first holds the 50,257 × 12,288 embedding and the 2,048 ×
    12,288 learned positions beyond a middle stage's layers, the last the tied embedding again
    (Megatron-LM's shared embedding) and the final LayerNorm's 2 × 12,288; summed, the model and one
    embedding more."""
    m = an.model("gpt3-175b")
    plan = an.Plan(m, an.hardware("h100-sxm"), an.Layout(pp=4, dp=2), seq_len=2048, global_batch=64)
    params = [round(plan.memory(stage=k).weights.m_as("byte")) / 2 for k in range(4)]
    embedding, positions = 50_257 * 12_288, 2_048 * 12_288
    assert (
        params[0] - params[1] == embedding + positions
        and params[3] - params[1] == embedding + 2 * 12_288
    )
    assert sum(params) == m.total_params + embedding


def test_mtp_module_is_stored_and_computed_but_not_counted():
    """DeepSeek-V3's MTP module: the published 671B leaves it out, the weights on a GPU and the
    FLOPs of a step include it (its routed experts sharded by EP like the others)."""
    ds = an.model("deepseek-v3")
    without = ds.replace(mtp_modules=0)
    layout = an.Layout(pp=16, dp=128, ep=64, zero=1, schedule="dualpipe")
    plans = [
        an.Plan(
            m, an.hardware("h800"), layout, seq_len=4096, global_batch=15360, dtype="fp8",
            stack="hai-llm",
        )
        for m in (ds, without)
    ]
    assert ds.total_params == without.total_params
    assert plans[0].expr("params").value() == plans[1].expr("params").value()
    mtp = ds.mtp_params_formula().value().to("parameter").magnitude
    routed = ds.experts * 3 * ds.hidden * ds.expert_ffn_hidden  # SwiGLU experts: 3 matrices each
    # the MTP module sits on the last stage, which ranks 0 and 15 hold under DualPipe
    for rank in (0, 15):
        last = [p.memory(stage=rank).weights for p in plans]
        # 2 bytes per weight and 2 for its FP8 copy and that copy's transpose, each with a 4-byte
        # scale per 128 × 128 block (DeepSeek-V3 §3.3.2), routed experts over EP 64
        assert (last[0] - last[1]).to("byte").magnitude == pytest.approx(
            (4 + 2 * 4 / 128**2) * ((mtp - routed) + routed / 64), rel=1e-12
        )
    assert plans[0].memory(stage=7).weights == plans[1].memory(stage=7).weights
    assert plans[0].hardware_flops() > plans[1].hardware_flops()
    assert plans[0].model_flops() == plans[1].model_flops()  # 6·N_active·D: the paper's 37B


def test_dense_dp_traffic_is_one_reduce_scatter_and_all_gather_per_bucket():
    """A dense model's DP time is its gradient buckets' reduce-scatter + all-gather on the scale-out
    link (dp ranks 8 apart) — no second, empty expert group paying collective latency. Megatron-Core
    reduce-scatters its fp32 gradient buffers (4 bytes a parameter) and all-gathers 16-bit
    parameters."""
    p = an.Plan(
        an.model("llama3-405b"),
        an.hardware("h100-sxm"),
        an.Layout(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True),
        seq_len=8192,
        global_batch=2048,
    )
    buckets = sympy.Rational(p.model.layers, 16)  # one bucket per layer of a stage
    want = 0
    for kind, size in (("reduce_scatter", "4 byte"), ("all_gather", "2 byte")):
        grad = an.formula("parallelism.dp.gradient_bytes").evaluate(
            params=p.expr("params_per_gpu").value(), element_bytes=size
        )
        link = {
            "message": grad / float(buckets),
            "ranks": 64,
            "latency": an.Q_(float(p.inputs["scale_out_latency"]), "s"),
            "bandwidth": an.Q_(
                float(p.inputs["scale_out_bandwidth"] * p.inputs["scale_out_efficiency"]), "byte/s"
            ),
        }
        want = want + an.formula(f"collectives.{kind}.time").evaluate(**link)
    assert p.communication_time()["dp"].to("s").magnitude == pytest.approx(
        want.to("s").magnitude * float(buckets), rel=1e-9
    )


@pytest.mark.parametrize("schedule", ["zb-h1", "zb-h2", "dualpipe"])
def test_few_microbatches_cannot_hide_the_pipeline(schedule):
    """Two microbatches per replica: whatever the schedule's bubble formula says (ZB-H1 7, ZB-H2 0,
    DualPipe 6 units), the step is at least the first microbatch's chain through every stage
    (forward and input gradient, then the weight gradient): p·(T_F + T_B) + T_W − 2(T_F + T_B + T_W)
    = 11 units of T_F = T_B = T_W = a sixth of the stage's microbatch compute (the optimizer step
    aside)."""
    p = an.Plan(
        an.model("llama3-70b"),
        an.hardware("h100-sxm"),
        an.Layout(tp=8, pp=8, dp=16, schedule=schedule),
        seq_len=8192,
        global_batch=32,
        stack="hai-llm",
    )
    t = p.time_breakdown(ops=True)
    unit = sum(t[k].to("s").magnitude for k in ("gemm", "attention", "memory_bound")) / 6
    assert t["bubble"].to("s").magnitude == pytest.approx(11 * unit, rel=1e-12)


def test_async_tp_hides_tp_traffic_like_the_other_axes():
    """Async TP exposes (1 − φ) of the TP collectives' time, φ the plan's overlap (0.25 here; the
    shipped one is 1, every window used); it needs tp > 1."""
    kw = dict(seq_len=8192, global_batch=2048, overlap=0.25)
    m, hw = an.model("llama3-405b"), an.hardware("h100-sxm")
    lay = an.Layout(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True)
    plain, hidden = an.Plan(m, hw, lay, **kw), an.Plan(m, hw, lay.replace(async_tp=True), **kw)
    tp_time = plain.communication_time()["tp"].to("s").magnitude
    assert plain.time_breakdown()["tp"].to("s").magnitude == pytest.approx(tp_time, rel=1e-12)
    assert hidden.time_breakdown()["tp"].to("s").magnitude == pytest.approx(
        0.75 * tp_time, rel=1e-12
    )
    kw.pop("overlap")
    with pytest.raises(LayoutError, match="async_tp"):
        an.Plan(m, hw, an.Layout(tp=1, dp=8, async_tp=True), **kw)
    with pytest.raises(InputError, match="async_tp"):
        an.Layout(tp=8, async_tp="yes")
    # nothing to overlap without SP
    with pytest.raises(LayoutError, match="async_tp: .*sequence_parallel=True"):
        an.Plan(m, hw, lay.replace(sequence_parallel=False, async_tp=True), **kw)


def test_block_tensors_follow_megatrons_layer():
    """Megatron's GPT layer holds 12 tensors (two LayerNorms, fused QKV, output, two MLP linears,
    each with a weight and a bias); a Llama block 6 (no biases, RMSNorm, SwiGLU's gate and up
    fused); an MoE block adds the router and two tensors per expert."""
    assert an.model("gpt3-175b").block_tensors == 96 * 12
    assert an.model("llama3-8b").block_tensors == 32 * 6
    m = an.model("deepseek-v3")
    dense, moe = 2 + 7 + 2, 2 + 7 + 1 + 2 * m.experts + 2
    assert m.block_tensors == (m.blocks - m.moe_blocks) * dense + m.moe_blocks * moe


def test_per_tensor_gathers_add_latency_and_block():
    """Per-tensor ZeRO-3 sends the same bytes in more collectives: the DP time grows by exactly the
    extra gathers' latencies (two gathers per tensor per microbatch, a ring over all 384 dp ranks on
    48 nodes: 336 of its 383 hops inside a node, 47 through a NIC), and the gathers are exposed in
    full instead of hiding behind compute."""
    m, hw = an.model("gpt3-175b"), an.hardware("a100-80g")
    kw = dict(
        seq_len=2048, global_batch=768, microbatch_size=1, dtype="fp16", flash_attention=False
    )
    lay = an.Layout(dp=384, zero=3, recompute="selective")
    block, tensor = an.Plan(m, hw, lay, **kw), an.Plan(
        m, hw, lay.replace(zero3_gather="per-tensor"), **kw
    )
    assert tensor.communication()["dp"] == block.communication()["dp"]
    up, out = float(block.inputs["scale_up_latency"]), float(block.inputs["scale_out_latency"])
    extra = 2 * block.microbatches * (m.block_tensors - m.layers) * (336 * up + 47 * out)
    grown = (tensor.communication_time()["dp"] - block.communication_time()["dp"]).to("s").magnitude
    assert grown == pytest.approx(extra, rel=1e-9)
    exposed = (tensor.time_breakdown()["dp"] - block.time_breakdown()["dp"]).to("s").magnitude
    assert exposed > extra  # the extra latency, and the gathers that hid behind compute before
    below = an.Layout(dp=384, zero=2, recompute="full")  # how ZeRO-3 gathers does not touch ZeRO-2
    assert (
        an.Plan(m, hw, below.replace(zero3_gather="per-tensor"), **kw).step_time()
        == an.Plan(m, hw, below, **kw).step_time()
    )
    with pytest.raises(InputError, match="zero3_gather"):
        an.Layout(dp=8, zero=3, zero3_gather="per-layer")


def test_per_tensor_gathers_again_in_the_recomputed_forward():
    """Under full recomputation per-tensor ZeRO-3 gathers each tensor a third time per microbatch
    (its hooks fire in the recomputed forward): one more round of the ring all-gather over 48 nodes
    of 8, in bytes and in exposed time. FSDP's per-block units gather twice under any policy."""
    m, hw = an.model("gpt3-175b"), an.hardware("a100-80g")
    kw = dict(
        seq_len=2048, global_batch=768, microbatch_size=1, dtype="fp16", flash_attention=False
    )
    plans = {
        (g, rc): an.Plan(m, hw, an.Layout(dp=384, zero=3, recompute=rc, zero3_gather=g), **kw)
        for g in ("per-block", "per-tensor")
        for rc in ("selective", "full")
    }
    for kind in ("communication", "communication_time"):
        block = [getattr(plans["per-block", rc], kind)()["dp"] for rc in ("selective", "full")]
        assert block[0] == block[1]
    p = plans["per-tensor", "full"]
    up, out = (float(p.inputs[f"scale_{k}_efficiency"]) for k in ("up", "out"))
    element = float(p.inputs["element_bytes"])
    # a tensor's share of the parameters
    message = an.Q_(m.total_params * element / m.block_tensors, "byte")
    one = an.formula("collectives.multinode.all_gather.time").evaluate(
        message=message,
        gpus_per_node=8,
        nodes=48,
        latency=an.Q_(
            (336 * float(p.inputs["scale_up_latency"]) + 47 * float(p.inputs["scale_out_latency"]))
            / 383,
            "s",
        ),
        scale_up_bandwidth=hw.scale_up_bandwidth * up,
        scale_out_bandwidth=hw.scale_out_bandwidth * out,
    )
    round_time = (p.microbatches * m.block_tensors * one).to("s").magnitude
    selective = plans["per-tensor", "selective"]
    for kind in ("communication_time", "time_breakdown"):  # the gathers block: exposed in full
        grown = (getattr(p, kind)()["dp"] - getattr(selective, kind)()["dp"]).to("s").magnitude
        assert grown == pytest.approx(round_time, rel=1e-9)
    sent = an.formula("collectives.all_gather.bytes_sent").evaluate(
        message=message * m.block_tensors, ranks=384
    )
    grown = p.communication()["dp"] - selective.communication()["dp"]
    assert grown.to("byte").magnitude == pytest.approx(
        (p.microbatches * sent).to("byte").magnitude, rel=1e-9
    )


def test_reserved_sms_slow_compute_by_their_share():
    """DeepSeek-V3 reserves 20 of the H800's 132 SMs for the all-to-all (§3.2.2, §3.5.1): every
    compute kernel runs on the other 112: the fused attention takes 132/112 as long exactly, the
    GEMMs longer (their math on 112 SMs, their traffic and FP8 casts not), the memory-bound kernels
    as long (HBM is not shared out)."""
    m, hw = an.model("deepseek-v3"), an.hardware("h800")
    kw = dict(seq_len=4096, global_batch=15360, dtype="fp8", stack="hai-llm")
    lay = an.Layout(pp=16, dp=128, ep=64, zero=1, schedule="dualpipe")
    plain, reserved = an.Plan(m, hw, lay, **kw), an.Plan(m, hw, lay.replace(comm_sms=20), **kw)
    before, after = plain.time_breakdown(ops=True), reserved.time_breakdown(ops=True)
    ratio = {
        k: float((after[k] / before[k]).to("").magnitude)
        for k in ("gemm", "attention", "memory_bound")
    }
    assert hw.sms == 132  # the H800's SMs, as DeepSeek-V3 §3.5.1 counts them
    assert ratio["attention"] == pytest.approx(hw.sms / (hw.sms - 20), rel=1e-12)
    assert 1 < ratio["gemm"] < hw.sms / (hw.sms - 20)
    assert ratio["memory_bound"] == pytest.approx(1, rel=1e-12)
    assert reserved.step_time() > plain.step_time()
    assert "comm_sms=20" in reserved.expr("step_time").source
    with pytest.raises(LayoutError, match="comm_sms"):
        an.Plan(m, hw, lay.replace(comm_sms=hw.sms), **kw)
    with pytest.raises(InputError, match="comm_sms"):
        an.Layout(comm_sms=-1)
    tpu = an.hardware("tpu-v4")  # no sourced SM count
    with pytest.raises(InputError, match="sms"):
        an.Plan(
            an.model("llama3-8b"), tpu, an.Layout(dp=8, comm_sms=4), seq_len=4096, global_batch=8,
            scale_up_bandwidth="100 GB/s", scale_out_bandwidth="25 GB/s",
        ).step_time()
    given = an.Plan(
        an.model("llama3-8b"), tpu, an.Layout(dp=8, comm_sms=4), seq_len=4096, global_batch=8,
        scale_up_bandwidth="100 GB/s", scale_out_bandwidth="25 GB/s", sms=8, matmul_efficiency=0.5,
        comm_ctas=2,  # of 8 SMs, a collective holds fewer than NCCL's 16 on a DGX
    )
    half = given.replace(layout=an.Layout(dp=8))
    ratio = given.time_breakdown(ops=True)["attention"] / half.time_breakdown(ops=True)["attention"]
    assert float(ratio.to("").magnitude) == pytest.approx(2, rel=1e-12)  # 4 of 8 SMs left


def test_context_parallel_all_gather_is_exposed():
    """CP all-gathers K and V before the attention that needs them (Llama 3 §3.3.2: 'exposed in the
    critical path'): its whole time is on the step, unlike PP's, of which φ is hidden."""
    m, hw = an.model("llama3-405b"), an.hardware("h100-sxm")
    plan = an.Plan(
        m,
        hw,
        an.Layout(
            tp=8, cp=16, pp=16, dp=8, zero=2, sequence_parallel=True, schedule="interleaved", vpp=2,
            ends_as_layers=True,
        ),
        seq_len=131072,
        global_batch=128,
        overlap=0.5,
    )  # a φ of its own, so the test does not depend on the fitted one
    comm, exposed = plan.communication_time(), plan.time_breakdown()
    phi = 0.5
    assert comm["cp"].to("s").magnitude > 0
    assert exposed["cp"].to("s").magnitude == pytest.approx(comm["cp"].to("s").magnitude, rel=1e-12)
    assert exposed["pp"].to("s").magnitude == pytest.approx(
        (1 - phi) * comm["pp"].to("s").magnitude, rel=1e-12
    )
    # full recomputation gathers K and V again in the recomputed forward: 2 all-gathers + 1
    # reduce-scatter
    full = plan.replace(layout=plan.layout.replace(recompute="full"))
    assert float(full.communication()["cp"] / plan.communication()["cp"]) == pytest.approx(
        1.5, rel=1e-12
    )


def test_context_parallel_ranks_join_data_parallel_for_gradients_and_zero():
    """CP ranks hold the same weights and see different tokens: gradients are reduced, and ZeRO
    shards, over dp·cp ranks (Megatron's data-parallel group with context parallelism; torchtitan's
    FSDP over dp_shard × cp). dp = 1 with cp = 8 still reduces gradients; the optimizer shard of
    cp 2 × dp 4 equals that of dp 8."""
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    kw = dict(seq_len=32768, global_batch=8)
    only_cp = an.Plan(m, hw, an.Layout(cp=8, dp=1, zero=1), **kw)
    assert only_cp.communication()["dp"].to("byte").magnitude > 0
    mixed = an.Plan(m, hw, an.Layout(cp=2, dp=4, zero=1), **kw)
    flat = an.Plan(m, hw, an.Layout(dp=8, zero=1), **kw)
    assert mixed.memory().optimizer == flat.memory().optimizer
    assert mixed.memory().optimizer.to("byte").magnitude == pytest.approx(
        12 * m.total_params / 8, rel=1e-12
    )


def test_zero3_holds_two_blocks_of_parameters_and_one_of_gradients_unsharded():
    """ZeRO-3 / FSDP without a pipeline gathers a block's parameters before computing it and
    prefetches the next, and holds a block's full gradients until their reduce-scatter: 3 × (one
    block's parameters on this GPU) × 2 bytes on top of the sharded states. Without ZeRO-3 nothing
    is gathered."""
    m, hw = an.model("llama3-405b"), an.hardware("h100-sxm")
    kw = dict(seq_len=8192, global_batch=2048)
    plan = an.Plan(m, hw, an.Layout(tp=1, cp=8, dp=2048, zero=3), **kw)
    block = m.total_params / m.layers
    assert plan.memory().gathered.to("byte").magnitude == pytest.approx(3 * block * 2, rel=1e-12)
    assert not plan.memory().fits  # the 405B blocks are 3.2B parameters each without TP
    for zero in (0, 1, 2):
        assert an.Plan(m, hw, plan.layout.replace(zero=zero), **kw).memory().gathered.magnitude == 0


def test_pipelined_zero3_holds_its_stage_like_zero1():
    """Under a pipeline schedule ZeRO-3 gathers the stage once and keeps its parameters and
    gradients unsharded until the step's last backward (memory.zero3_held): its peak is ZeRO-1's
    plus its own 16-bit shards (4Ψ/N_d), and its DP traffic is ZeRO-1's reduce-scatter + all-gather.
    Under DualPipe a rank holds both of its stages."""
    m, hw = an.model("llama3-405b"), an.hardware("h100-sxm")
    # 16-bit gradients at every stage; a stack that runs DualPipe
    kw = dict(seq_len=8192, global_batch=2048, grad_dtype="bf16", stack="hai-llm")
    lay = an.Layout(tp=8, pp=8, dp=16, zero=3)
    z3, z1 = (an.Plan(m, hw, lay.replace(zero=z), **kw) for z in (3, 1))
    stage = (
        an.Plan(m, hw, lay.replace(zero=0), **kw).memory(stage=0).weights.to("byte").magnitude / 2
    )
    assert z3.memory(stage=0).gathered.to("byte").magnitude == pytest.approx(
        2 * stage * 2, rel=1e-12
    )
    assert (z3.memory(stage=0).total - z1.memory(stage=0).total).to(
        "byte"
    ).magnitude == pytest.approx(4 * stage / 16, rel=1e-9)
    assert z3.communication()["dp"] == z1.communication()["dp"]
    dual = an.Plan(m, hw, lay.replace(schedule="dualpipe"), **kw)  # rank 0 holds stages 0 and 7
    assert dual.memory(stage=0).gathered.to("byte").magnitude == pytest.approx(
        (z3.memory(stage=0).gathered + z3.memory(stage=7).gathered).to("byte").magnitude, rel=1e-12
    )


def test_sharded_gradients_without_a_pipeline_are_reduced_every_microbatch():
    """With gradient accumulation and no pipeline a rank keeps only its gradient partition, so
    ZeRO-2 reduce-scatters after every microbatch (Ψ each, then one all-gather of Ψ), and ZeRO-3
    also gathers the parameters twice per microbatch (3Ψ each), where ZeRO-1 moves 2Ψ once per
    step."""
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    for microbatches in (1, 4):
        # 16-bit gradients at every stage
        kw = dict(seq_len=8192, global_batch=64 * microbatches, grad_dtype="bf16")
        z3, z2, z1 = (an.Plan(m, hw, an.Layout(dp=64, zero=z), **kw) for z in (3, 2, 1))
        assert z3.microbatches == microbatches
        dp = z1.communication()["dp"]
        assert (z3.communication()["dp"] / dp).to("").magnitude == pytest.approx(
            1.5 * microbatches, rel=1e-12
        )
        assert (z2.communication()["dp"] / dp).to("").magnitude == pytest.approx(
            (microbatches + 1) / 2, rel=1e-12
        )


def test_hand_made_hardware_takes_the_pooled_gemm_ceiling_and_says_so():
    """A Hardware built by hand has no measured GEMM ceiling: its matmul efficiency is the geometric
    mean of the measured BF16 fractions of peak (the Maximum Achievable Matmul FLOPS table's A100,
    H100, B200, GB200, B300, MI300X, MI355X and JAX's TPU v5e, each measurement once), and its notes
    say so; given one, the GEMMs take 6 FLOPs per matmul weight per token (every parameter but the
    input embedding and the norms) at that share of peak, unquantised (no SM count); a preset
    changed with replace() keeps its measured fraction."""
    hw = an.Hardware(
        name="x", peaks={"bf16": "100 TFLOP/s"}, hbm="80 GB", scale_up="100 GB/s",
        scale_out="10 GB/s",
    )
    kw = dict(seq_len=2048, global_batch=8)
    m = an.model("llama3-8b")
    pooled = an.Plan(m, hw, an.Layout(dp=8), **kw)
    table = [
        (271.2, 312),
        (794.5, 989.4),
        (1745.0, 2250),
        (1822.0, 2500),
        (1769.0, 2250),
        (668.4, 1307.4),
        (1565.0, 2516),
        (181.8, 197),
    ]
    assert float(pooled.inputs["matmul_efficiency"]) == pytest.approx(
        math.prod(a / b for a, b in table) ** (1 / len(table)), rel=1e-12
    )
    assert any("pooled over the measured devices" in note for note in pooled.notes)
    given = an.Plan(
        m, hw, an.Layout(dp=8), matmul_efficiency=0.5, stack_efficiency=1, link_efficiency=0.8,
        latency="10 us", overlap=0.5, attention_factor=0.5, hbm_bandwidth="1e30 B/s", **kw,
    )
    weights = m.total_params - m.vocab * m.hidden - (2 * m.layers + 1) * m.hidden
    assert given.time_breakdown(ops=True)["gemm"].to("s").magnitude == pytest.approx(
        6 * weights * 2048 / (100e12 * 0.5), rel=1e-9
    )
    assert any("wave quantisation" in note for note in given.notes)
    faster = an.hardware("h100-sxm").replace(peak_flops="2000 TFLOP/s")
    assert faster.matmul_ceiling("bf16").fraction == pytest.approx(794.5 / 989.4, rel=1e-12)


def test_bytes_need_no_link_bandwidth_but_times_do():
    """TPU7x's preset has no sourced link bandwidths: the bytes each GPU sends are still known and
    equal those of the same plan with the links given; any time asks for the missing bandwidth."""
    m, lay = an.model("llama3-70b"), an.Layout(tp=4, dp=16, zero=3, sequence_parallel=True)
    kw = dict(seq_len=8192, global_batch=64)
    bare = an.Plan(m, an.hardware("tpu7x"), lay, **kw)
    given = an.Plan(
        m, an.hardware("tpu7x"), lay, scale_up_bandwidth="600 GB/s",
        scale_out_bandwidth="400 Gbit/s", **kw,
    )
    assert bare.communication() == given.communication()
    assert bare.communication()["tp"].magnitude > 0
    for ask in (bare.communication_time, bare.step_time, bare.time_breakdown):
        with pytest.raises(InputError, match="scale_up_bandwidth"):
            ask()
    assert given.step_time().magnitude > 0


def test_batch_tokens_as_a_count_with_a_suffix():
    """batch_tokens takes what the CLI takes: a count with a decimal or binary suffix, read exactly;
    a decimal count (a suffix, or a whole multiple of a thousand, a million, ... however written)
    that is not whole sequences while its binary reading is, is read as binary and said so."""
    kw = dict(seq_len=8192)
    m, hw, lay = an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(dp=8)
    for tokens in ("16Mi", " 16 Mi ", "16777216", "0.015625Gi", 2**24, "16 Mitoken"):
        assert an.Plan(m, hw, lay, batch_tokens=tokens, **kw).global_batch == 2048
    assert an.Plan(m, hw, lay, batch_tokens="8.192M", **kw).global_batch == 1000
    with pytest.warns(
        an.errors.ReinterpretedWarning, match=r"16M read as 16 Mi = 16,777,216 tokens"
    ):
        assert an.Plan(m, hw, lay, batch_tokens="16M", **kw).global_batch == 2048
    # one rule: a decimal count, however written
    for written in ("15e6", 15_000_000, 15e6, "15000000"):
        with pytest.warns(
            an.errors.ReinterpretedWarning, match=r"read as 15 Mi = 15,728,640 tokens"
        ):
            assert (
                an.Plan(m, hw, lay, batch_tokens=written, **kw).global_batch == 15 * 2**20 // 8192
            )
    with pytest.raises(InputError, match=r"15000001 is not a whole number of 8192-token sequences"):
        an.Plan(m, hw, lay, batch_tokens=15_000_001, **kw)
    with pytest.raises(an.errors.UnitError, match="batch_tokens: expected a token count"):
        an.Plan(m, hw, lay, batch_tokens="16 MB", **kw)


def _moe():
    return an.Model(
        layers=4, hidden=256, heads=8, vocab=1000, position="rope", mlp="swiglu", experts=8, topk=2,
        expert_ffn_hidden=128,
    )


@pytest.mark.parametrize("gather", ["per-tensor", "per-block"])
def test_pipelined_zero3_latency_by_hand(gather):
    """ZeRO-3 under a pipeline, one node, latency alone (1 s, links 1e30 B/s): per step each replica
    group reduce-scatters its blocks/pp buckets and gathers its stage once — per tensor (the dense
    block tensors /pp, the routed ones /(pp·ep)) or per bucket — each ring costing (n − 1)·α."""
    m = _moe()
    p = an.Plan(
        m,
        an.hardware("h100-sxm"),
        an.Layout(pp=2, dp=4, ep=2, zero=3, zero3_gather=gather),
        seq_len=1024,
        global_batch=8,
        latency="1 s",
        scale_up_bandwidth="1e30 B/s",
        scale_out_bandwidth="1e30 B/s",
        link_efficiency=1,
    )
    buckets = m.blocks / 2
    dense_n, expert_n = 4, 2  # dp·cp ranks hold the dense weights, dp·cp/ep each expert
    if gather == "per-tensor":
        dense_gathers, expert_gathers = (
            m.block_tensors - m.routed_expert_tensors
        ) / 2, m.routed_expert_tensors / 4
    else:
        dense_gathers = expert_gathers = buckets
    want = (buckets + dense_gathers) * (dense_n - 1) + (buckets + expert_gathers) * (expert_n - 1)
    assert p.communication_time()["dp"].to("s").magnitude == pytest.approx(want, rel=1e-9)


# SP splits b·s over the TP ranks
@pytest.mark.parametrize(
    "layout, microbatch_size, tokens, microbatches",
    [
        (dict(cp=2, dp=2, ep=2), 1, 1024 // 2, 4),  # CP splits the sequence
        (dict(tp=2, dp=2, ep=2, sequence_parallel=True), 2, 2 * 1024 // 2, 2),
    ],
)
def test_expert_traffic_by_hand(layout, microbatch_size, tokens, microbatches):
    """EP 2 carved out of DP 2: per microbatch, each of the 4 MoE blocks dispatches and combines
    forward and again backward, all-to-alls of (the rank's tokens) × k = 2 × h = 256 × 2 bytes, a
    rank sending half. With TP 2 the experts' TP (etp) is 2 too: the routed tokens of both ranks are
    all-gathered after each dispatch and reduce-scattered before each combine, messages of etp ×
    tokens × k × h × 2 bytes, a rank sending half of each."""
    p = an.Plan(
        _moe(), an.hardware("h100-sxm"), an.Layout(**layout), seq_len=1024, global_batch=8,
        microbatch_size=microbatch_size,
    )
    message, etp = tokens * 2 * 256 * 2, layout.get("tp", 1)
    calls = 2 * 4 * microbatches
    gathered = 0 if etp == 1 else 2 * calls * etp * message / 2
    assert p.communication()["ep"].to("byte").magnitude == pytest.approx(
        calls * 2 * message / 2 + gathered, rel=1e-12
    )


@pytest.mark.parametrize("kv_heads, split", [(8, 2), (1, 1)])
def test_context_parallel_kv_is_split_over_tp_unless_one_kv_head(kv_heads, split):
    """CP gathers K and V: 2·s·b·a_kv·d_h·e bytes a layer (whole sequence). TP splits the KV heads
    over its ranks, but a single KV head (MQA) is replicated on every TP rank: TP 2 halves GQA's
    traffic only."""
    m = an.Model(
        layers=4, hidden=512, heads=8, kv_heads=kv_heads, vocab=1000, position="rope", mlp="swiglu"
    )

    def cp_bytes(tp):
        lay = an.Layout(tp=tp, cp=2, dp=4 // tp, sequence_parallel=tp > 1)
        return an.Plan(
            m, an.hardware("h100-sxm"), lay, seq_len=1024, global_batch=8
        ).communication()["cp"]

    kv = 2 * 1024 * 1 * kv_heads * 64 * 2  # bytes of one layer's K and V over the whole sequence
    one, two = cp_bytes(1), cp_bytes(2)
    # per layer per microbatch: an all-gather and a reduce-scatter, each sending half of it over 2
    # CP ranks
    assert one.to("byte").magnitude == pytest.approx(4 * (8 // 4) * 2 * kv / 2, rel=1e-12)
    # TP 2 with dp 2 runs twice the microbatches of dp 4, each sending 1/split of the KV bytes
    assert (one / two).to("").magnitude == pytest.approx(split / 2, rel=1e-12)


def test_pipeline_traffic_by_hand():
    """PP 2 with TP 2 and CP 2: per microbatch one activation forward and one gradient back over the
    one stage boundary, shared by the two stages (1 transfer a GPU per microbatch, 4 microbatches),
    each the [s/c, b, h] activation in 2 bytes split over the TP ranks (Narayanan et al. §4.1)."""
    m = an.Model(layers=4, hidden=512, heads=8, vocab=1000, position="rope", mlp="swiglu")
    p = an.Plan(
        m,
        an.hardware("h100-sxm"),
        an.Layout(tp=2, cp=2, pp=2, sequence_parallel=True),
        seq_len=1024,
        global_batch=4,
    )
    message = 1024 / 2 * 1 * 512 * 2 / 2
    assert p.communication()["pp"].to("byte").magnitude == pytest.approx(4 * 1 * message, rel=1e-12)


def test_a_plan_that_fills_hbm_exactly_fits():
    """The count and the least memory outside the allocator filling the HBM to the byte fit; a byte
    less does not."""
    p = essay()
    total = (p.memory().total + p.memory().outside).to("byte").magnitude
    kw = dict(seq_len=8192, global_batch=2048, grad_dtype=p.grad_dtype)
    assert an.Plan(p.model, p.hardware, p.layout, hbm=f"{total} B", **kw).memory().fits
    assert (
        not an.Plan(p.model, p.hardware, p.layout, hbm=f"{total * (1 - 1e-9)} B", **kw)
        .memory()
        .fits
    )
    assert (
        an.Plan(
            p.model, p.hardware, p.layout, hbm=f"{total * (1 - 1e-9)} B", outside_bytes="0 B", **kw
        )
        .memory()
        .fits
    )


def test_hardware_flops_are_palms_count_exactly_without_recompute_or_flash():
    """No recomputation and no FlashAttention: the executed FLOPs are PaLM's 6N + 12LHQT per token
    times the tokens, to the FLOP (nothing is added for the policies not taken)."""
    m = an.model("gpt3-175b")
    p = an.Plan(
        m, an.hardware("a100-80g"), an.Layout(tp=8, pp=8, dp=16), seq_len=2048, global_batch=1536,
        flash_attention=False,
    )
    palm = an.formula("compute.flops_per_token_palm").subs(
        params=m.active_params, layers=m.layers, heads=m.heads, head_dim=m.head_dim, seq_len=2048
    )
    assert p.expr("flops.hardware").expr == palm.expr * 1536 * 2048


def test_each_mtp_module_adds_the_same_flops():
    """A multi-token prediction module is a projection, a block and the shared head: the executed
    FLOPs grow by the same amount for each one added."""
    base = an.model("deepseek-v3")
    flops = [
        an.Plan(
            base.replace(mtp_modules=d), an.hardware("h800"), an.Layout(pp=16, dp=8, ep=8),
            seq_len=4096, global_batch=256,
        )
        .hardware_flops()
        .magnitude
        for d in (0, 1, 2)
    ]
    assert (
        flops[2] - flops[1] == pytest.approx(flops[1] - flops[0], rel=1e-9) and flops[1] > flops[0]
    )


def test_a_symbolic_batch_in_tokens_is_its_symbol():
    p = an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(dp=8), seq_len=8192,
        batch_tokens=an.sym("batch_tokens"),
    )
    assert p.expr("tokens_per_step").expr == an.sym("batch_tokens")
    assert p.expr("microbatches").expr == an.sym("batch_tokens") / (8192 * 8)


def test_the_reinterpretation_warning_points_at_the_callers_line():
    with pytest.warns(an.errors.ReinterpretedWarning) as record:
        an.Plan(
            an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(dp=8), seq_len=8192,
            batch_tokens="16M",
        )
    assert record[0].filename == __file__


def test_layout_defaults_and_gpus():
    """DESIGN's defaults: no ZeRO (every replica holds its own 12-byte Adam state), and GPUs =
    t·c·p·d."""
    assert an.Layout(tp=8, cp=2, pp=4, dp=3).gpus == 192
    p = an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(dp=8), seq_len=2048,
        global_batch=8,
    )
    assert p.memory().optimizer.to("byte").magnitude == pytest.approx(
        12 * an.model("llama3-8b").total_params, rel=1e-12
    )


# 6 microbatches over 4 stages
@pytest.mark.parametrize(
    "layout, batch, microbatch_size, constraint",
    [
        (
            dict(pp=4, vpp=4, schedule="interleaved"),
            16,
            1,
            "chunks exceed",
        ),  # 16 chunks for 8 layers
        (dict(dp=2), 8, 3, "do not split"),  # 8 sequences into 2 replicas of microbatches of 3
        (dict(dp=2), 12, 4, "do not split"),  # 12 into 2 replicas of 4 (12 would split into halves)
        (dict(pp=4, dp=2, vpp=2, schedule="interleaved"), 24, 2, "multiple of pp"),
    ],
)
def test_the_batch_and_stage_constraints(layout, batch, microbatch_size, constraint):
    m = an.Model(layers=8, hidden=256, heads=8, vocab=1000, position="rope", mlp="swiglu")
    with pytest.raises(LayoutError, match=constraint):
        an.Plan(
            m, an.hardware("h100-sxm"), an.Layout(**layout), seq_len=1024, global_batch=batch,
            microbatch_size=microbatch_size,
        )


def test_placement_strides_and_links_by_hand():
    """Megatron-Core's rank order, innermost first: tp, cp, dp, pp. TP 2 · CP 2 · DP 2 · PP 2 on
    nodes of 8: strides 1, 2, 4 and 8; every group but PP's (8 apart: across nodes) inside a node.
    The expert layers' EP ranks sit etp (here tp) apart."""
    m = an.Model(layers=8, hidden=256, heads=8, vocab=1000, position="rope", mlp="swiglu")
    p = an.Plan(
        m,
        an.hardware("h100-sxm"),
        an.Layout(tp=2, cp=2, dp=2, pp=2, sequence_parallel=True),
        seq_len=1024,
        global_batch=8,
    )
    got = {axis: (v["size"], v["stride"], v["link"]) for axis, v in p.placement().items()}
    assert got == {
        "tp": (2, 1, "scale-up"),
        "cp": (2, 2, "scale-up"),
        "dp": (2, 4, "scale-up"),
        "ep": (1, 2, "-"),
        "pp": (2, 8, "scale-out"),
    }


def test_a_group_whose_neighbours_are_a_node_apart_is_scale_out_even_with_a_symbolic_size():
    from analytic.plan.ranks import link_kind

    assert link_kind(an.sym("pp"), 8, 8) == "scale-out"
    assert link_kind(an.sym("pp"), 4, 8) == "symbolic"


def test_moe_layer_activations_count_the_routed_and_shared_experts():
    """A token of an MoE layer keeps, by hand (bf16, no TP): the attention half's norm input and
    output (2 × 2 × 256), Q, K, V, the attention output (4 × 2 × 256) and its statistics (4 × 8);
    the MLP half's norm input and output (2 × 2 × 256), its k = 2 routed copies (2 × 2 × 256) and
    the gate, up and product of its 2 routed and 2 shared experts (6 × 4 × 512): 17,440 bytes."""
    m = an.Model(
        layers=4, hidden=256, heads=8, vocab=1000, position="rope", mlp="swiglu", ffn_hidden=256,
        experts=8, topk=2, shared_experts=2, expert_ffn_hidden=512,
    )
    p = an.Plan(m, an.hardware("h100-sxm"), an.Layout(dp=2, ep=2), seq_len=1024, global_batch=2)
    want = (2 * 2 * 256 + 4 * 2 * 256 + 4 * 8) + (2 * 2 * 256 + 2 * 2 * 256 + 6 * 4 * 512)
    assert want == 17440
    assert round(p.expr("memory.activations.layer").value().m_as("byte")) == 1024 * want


def test_expert_traffic_outside_dualpipe_is_exposed_whatever_the_overlap():
    """Without DualPipe's paired chunks the all-to-all sits between the router and the experts'
    GEMMs: all of its time is exposed, whatever the overlap; DualPipe hides it behind the paired
    chunk."""
    for phi in (0.25, 1.0):
        p = an.Plan(
            _moe(), an.hardware("h100-sxm"), an.Layout(dp=2, ep=2), seq_len=1024, global_batch=8,
            overlap=phi,
        )
        assert p.time_breakdown()["ep"].to("s").magnitude == pytest.approx(
            p.communication_time()["ep"].to("s").magnitude, rel=1e-12
        )
        assert p.time_breakdown()["ep"].magnitude > 0


def test_a_rack_wide_nvlink_domain_keeps_groups_of_several_nodes_on_nvlink():
    """GB200 NVL72: trays of 4 GPUs, one NVLink domain of 72. A DP group of 9 ranks 8 apart spans 18
    trays but one domain, so it stays on the scale-up link; on H100 nodes of 8 it leaves every node.
    TP 16 would straddle two racks (72 is no multiple of 16) and is refused."""
    m = an.model("llama3-405b")
    kw = dict(seq_len=8192, global_batch=1152)
    lay = an.Layout(tp=8, pp=16, dp=9, zero=1, sequence_parallel=True)
    assert an.Plan(m, an.hardware("gb200-nvl72"), lay, **kw).placement()["dp"]["link"] == "scale-up"
    assert an.Plan(m, an.hardware("h100-sxm"), lay, **kw).placement()["dp"]["link"] == "scale-out"
    with pytest.raises(an.LayoutError, match="straddle"):
        an.Plan(m, an.hardware("gb200-nvl72"), an.Layout(tp=16, pp=8, dp=9, zero=1), **kw)
    with pytest.raises(an.InputError, match="scale_up_domain"):
        an.hardware("h100-sxm").replace(scale_up_domain=12)  # not a whole number of 8-GPU nodes


def test_a_group_filling_domains_unevenly_runs_at_its_emptiest_domains_pace():
    """64 DP ranks 8 apart on NVL72 racks: 9 in each of 7 racks and 1 in the eighth. That rank's NIC
    carries its whole ring, so the all-reduce runs as over 64 domains of 1: the time of DP 64 on
    H100 nodes (every DP rank in a node of its own) at NVL72's links."""
    m, nvl = an.model("llama3-405b"), an.hardware("gb200-nvl72")
    lay = an.Layout(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True)
    kw = dict(seq_len=8192, global_batch=2048)
    uneven = an.Plan(m, nvl, lay, **kw).communication_time()["dp"]
    apart = an.Plan(m, nvl, lay, scale_up_domain=8, gpus_per_node=8, **kw).communication_time()[
        "dp"
    ]
    assert uneven.to("s").magnitude == pytest.approx(apart.to("s").magnitude, rel=1e-12)


def test_the_tours_plan_and_its_alternatives():
    """The tour's Llama 3 405B on 8,192 H100s (TP8 PP16 DP64, ZeRO-1): the step inside its interval,
    the memory interval around the peak, the reserve fitted on TorchTitan's runs only (carried over
    to this Megatron-Core plan, as the docs say), Llama 3's own interleaved plan at the allocator's
    limit, and each way to fit the tour names fitting; the breakdown sums to the step."""
    plan = an.Plan(
        an.model("llama3-405b"),
        an.hardware("h100-sxm"),
        an.Layout(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True),
        seq_len=8192,
        global_batch=2048,
    )
    low, high = (t.to("s").magnitude for t in plan.step_time_interval())
    assert low < plan.step_time().to("s").magnitude < high
    low, high = (q.to("GB").magnitude for q in plan.memory_interval())
    assert low < plan.memory_peak().to("GB").magnitude < high
    fitted = an.presets.memory_reserve("pytorch")
    assert (
        all(name.startswith("torchtitan") for name in fitted["stacks"])
        and plan.stack not in fitted["stacks"]
    )
    own_plan = plan.replace(
        layout=plan.layout.replace(zero=2, schedule="interleaved", vpp=8, ends_as_layers=True)
    )
    own, own_peak = own_plan.memory(), own_plan.memory_peak()
    assert (
        own.fits
        and own_peak > own.hbm
        and own_plan.memory_verdict() == "fits at the allocator's limit"
    )
    block = plan.replace(layout=plan.layout.replace(recompute="full", recompute_layers=2))
    assert block.memory().fits and block.step_time() > plan.step_time()
    off = plan.replace(layout=plan.layout.replace(offload_activations=True)).memory()
    assert off.fits and off.host.magnitude > 0
    total = sum(v.to("s").magnitude for v in plan.time_breakdown(ops=True).values())
    assert total == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)


def test_full_recomputation_gathers_k_and_v_again():
    """Context parallelism all-gathers K and V once per layer per microbatch, and once more in the
    forward that full recomputation runs again: the CP bytes grow by one ring all-gather of the
    layer's K and V (split over TP), (c − 1)/c of 2·s·b·a_kv·d_h·e, per layer of the stage per
    microbatch."""
    m, hw = an.model("llama3-405b"), an.hardware("h100-sxm")
    lay = an.Layout(tp=8, cp=16, pp=16, dp=8, zero=2, sequence_parallel=True)
    kw = dict(seq_len=131072, global_batch=128)
    sel, full = (an.Plan(m, hw, lay.replace(recompute=rc), **kw) for rc in ("selective", "full"))
    # bytes, split over the 8 TP ranks (8 KV heads)
    kv = 2 * 131072 * 1 * m.kv_heads * m.head_dim * 2 / 8
    layers = m.layers / 16
    want = 15 / 16 * kv * layers * full.microbatches
    grown = (full.communication()["cp"] - sel.communication()["cp"]).to("byte").magnitude
    assert grown == pytest.approx(want, rel=1e-12)


def test_readme_exact_goodput_at_scale(docs):
    """100,000 GPUs at Llama 3's interruption rate, 5-minute checkpoints, 10-minute restarts: the
    README's first-order and exact goodputs and the exact optimal interval, from the catalogue."""
    rate = an.formula("reliability.mtbf").evaluate(
        gpus=100_000, interruption_rate=an.Q_(419 / (54 * 86400 * 16384), "1/s")
    )
    mtbf = rate.to("min")
    # the first-order model, beyond its range
    with pytest.warns(an.errors.ApproximationWarning, match="10%"):
        first = an.formula("reliability.goodput").evaluate(
            checkpoint_time="5 min", mtbf=mtbf, restart_time="10 min"
        )
    tau = an.formula("reliability.daly.optimal_interval").evaluate(
        checkpoint_time="5 min", mtbf=mtbf
    )
    exact = an.formula("reliability.daly.goodput").evaluate(
        checkpoint_time="5 min", mtbf=mtbf, restart_time="10 min", checkpoint_interval=tau
    )
    readme = docs
    assert (
        f"one interruption every {mtbf.magnitude:.1f} minutes" in readme
        and f"the first-order goodput is {first.to('').magnitude:.3f}" in readme
        and f"optimal interval of {tau.to('min').magnitude:.1f} minutes,"
        f" gives {exact.to('').magnitude:.2f}" in readme
    )
    tau = an.formula("reliability.daly.optimal_interval").evaluate(
        checkpoint_time="10 s", mtbf=mtbf
    )
    restart = an.formula("reliability.async_restart_time").evaluate(
        restart_time="10 min", checkpoint_write_time="2 min", checkpoint_interval=tau
    )
    asynchronous = an.formula("reliability.daly.goodput").evaluate(
        checkpoint_time="10 s", mtbf=mtbf, restart_time=restart, checkpoint_interval=tau
    )
    assert (
        f"every {tau.to('min').magnitude:.1f} minutes, gives {asynchronous.to('').magnitude:.2f}"
        in readme
    )


@pytest.mark.parametrize("zero, per_param", [(0, 18), (1, 6 + 12 / 8)])
def test_fp32_gradient_buffers_are_megatrons_18_bytes(zero, per_param):
    """Megatron-LM keeps fp32 main gradients for bf16 training: 2 + 4 + 12 = 18 bytes per parameter,
    6 + 12/d with its distributed optimizer (ZeRO-1) over d = 8 ranks; the data-parallel gradient
    reduction carries fp32 too, so a plain all-reduce moves twice the bytes of bf16 gradients."""
    m, hw = an.model("llama3-70b"), an.hardware("h100-sxm")
    plans = {
        g: an.Plan(
            m, hw, an.Layout(tp=8, dp=8, zero=zero), seq_len=8192, global_batch=64, grad_dtype=g
        )
        for g in ("bf16", "fp32")
    }
    p = plans["fp32"]
    mem = p.memory()
    states = (mem.weights + mem.gradients + mem.optimizer).to("byte").magnitude
    assert states / p.expr("params_per_gpu").value().magnitude == pytest.approx(
        per_param, rel=1e-12
    )
    if zero == 0:
        assert p.communication()["dp"] == 2 * plans["bf16"].communication()["dp"]
    with pytest.raises(an.InputError, match="grad_dtype"):
        an.Plan(
            m, hw, an.Layout(tp=8, dp=8, zero=3), seq_len=8192, global_batch=64, grad_dtype="fp32"
        )
    with pytest.raises(an.InputError, match="grad_dtype"):
        an.Plan(m, hw, an.Layout(tp=8, dp=8), seq_len=8192, global_batch=64, grad_dtype="fp16")


def test_each_stage_holds_its_microbatches_layers_and_ends():
    """1F1B over 16 stages of ⌈126/16⌉ = 8 layers: stage k holds 16 − k microbatches' activations
    (per-layer hand count above) and a layer's backward gradients; the last, the loss's working set
    (larger) and the inputs of the final norm and the output layer (2 × 2 bytes × 8192 × 16384,
    split 8 ways by SP). Weights: the first and last stages hold 8 layers and the embedding or the
    output layer, the others 8 layers."""
    plan = an.Plan(
        an.model("llama3-405b"),
        an.hardware("h100-sxm"),
        an.Layout(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True),
        seq_len=8192,
        global_batch=2048,
    )
    per_layer = 8192 * (8 * 16384 + (4 * 128 * 128 + 4 * 8 * 128 + 6 * 53248 + 4 * 128)) / 8
    layer = 2 * 16384 * 16384 + 2 * 16384 * 8 * 128 + 3 * 16384 * 53248 + 2 * 16384
    logits = plan.memory().loss.to("byte").magnitude
    # Megatron's loss, 6 bytes a logit, vocabulary-parallel over TP 8
    assert logits == 8192 * 128256 * 6 / 8
    stages = plan.memory_by_stage()
    assert [m.stage for m in stages] == list(range(16))
    for k, m in enumerate(stages):
        want = per_layer * 8 * (16 - k) + (
            logits + 2 * 2 * 8192 * 16384 / 8 if k == 15 else BACKWARD_405B
        )
        assert m.activations.to("byte").magnitude == pytest.approx(want, rel=1e-12)
        # embedding; output layer and final norm
        ends = 128256 * 16384 * (k in (0, 15)) + 16384 * (k == 15)
        assert m.weights.to("byte").magnitude == pytest.approx(
            2 * (8 * layer + ends) / 8, rel=1e-12
        )
    assert plan.memory() == stages[0]  # the fullest
    assert plan.expr("memory.total").value() == stages[0].total
    with pytest.raises(InputError, match=r"stage: expected 0 to 15 \(pp = 16\), got 16"):
        plan.memory(stage=16)  # one past the last: named as such, not as a formula's domain


def test_the_last_stage_is_the_fullest_when_its_loss_outweighs_a_layers_backward():
    """Llama 3 8B over 4 stages with one microbatch of 8,192 tokens: each stage holds 8 layers of
    one microbatch; the last adds the loss's working set (Megatron's 6 bytes a logit, 128,256 logits
    a token) and the final norm's and the output layer's inputs (2 × 2 × 4,096 bytes a token) where
    the first adds a layer's backward gradients (2 × 2 × 14,336 bytes a token): the last is the
    fullest."""
    plan = an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(pp=4), seq_len=8192,
        global_batch=1,
    )
    first, last = plan.memory(stage=0), plan.memory(stage=3)
    extra = 8192 * (6 * 128256 + 2 * 2 * 4096 - 2 * 2 * 14336)
    assert (last.activations - first.activations).to("byte").magnitude == pytest.approx(
        extra, rel=1e-12
    )
    assert plan.memory().stage == 3 and plan.memory() == last


def test_context_parallel_attention_buffers_join_a_layers_backward_on_torchtitan():
    """Llama 3 8B on TorchTitan over 2 stages and 16 ZeRO-1 replicas, 4,096 tokens a rank: at CP 2 a
    layer's backward holds the ring's buffers, (4·2 + 36) bytes per element of the rank's Q (4,096 ×
    32 × 128), in place of the SwiGLU's gradients (2 × 2 × 14,336 bytes a token), which are fewer;
    at CP 1 it holds those. Megatron-Core's CP buffers are not counted: its first stage holds the
    same at CP 2 as at CP 1."""

    def first_stage(stack, cp):
        plan = an.Plan(
            an.model("llama3-8b"),
            an.hardware("h100-sxm"),
            an.Layout(pp=2, dp=16, zero=1, cp=cp, recompute="full"),
            seq_len=4096 * cp,
            global_batch=32,
            stack=stack,
        )
        return plan.memory(stage=0).activations.to("byte").magnitude

    q = 4096 * 32 * 128
    assert first_stage("torchtitan", 2) - first_stage("torchtitan", 1) == pytest.approx(
        (4 * 2 + 36) * q - 4096 * 2 * 2 * 14336, rel=1e-12
    )
    assert first_stage("megatron-core", 2) == pytest.approx(
        first_stage("megatron-core", 1), rel=1e-12
    )
    sources = an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(cp=2), seq_len=8192,
        global_batch=1, stack="torchtitan",
    ).sources("memory.activations")
    assert "memory.activations.backward.cp_ring_attention" in sources


def test_interleaved_first_stage_is_korthikantis_factor():
    """Megatron's interleaved schedule warms stage k up with (p − k − 1)·2 + (v − 1)·p chunks; at k
    = 0, with the one in flight, that is Korthikanti et al.'s eq. (5): L(1 + (p − 1)/(p·v)) layers.
    A plan of Llama 3 70B over 4 stages of 2 chunks holds that many layers' activations on its first
    stage: 80 × 11/8 = 110 of 34,336 bytes a token (the flash SwiGLU count over TP 8 with SP), and a
    layer's backward gradients, 2 × 2 × 28,672 / 8 bytes a token."""
    f = an.formula("pipeline.in_flight.interleaved_stage")
    factor = an.formula("memory.activations.first_stage_interleaved_factor")
    for p, v in ((4, 2), (8, 3), (16, 4)):
        chunks = f.evaluate(pp=p, vpp=v, stage=0).magnitude
        assert chunks / (p * v) * p == pytest.approx(
            p * factor.evaluate(pp=p, vpp=v).magnitude, rel=1e-12
        )
    plan = an.Plan(
        an.model("llama3-70b"),
        an.hardware("h100-sxm"),
        an.Layout(tp=8, pp=4, dp=4, vpp=2, schedule="interleaved", sequence_parallel=True),
        seq_len=8192,
        global_batch=64,
    )
    assert plan.memory(stage=0).activations.to("byte").magnitude == pytest.approx(
        (110 * 34336 + 4 * 28672 / 8) * 8192, rel=1e-12
    )


def test_uneven_stages():
    """Llama 3's 405B trims a layer from its first and last stages (§3.3.2): 7 + 14 × 8 + 7 = 126.
    The first stage then holds 7 layers (and the embedding), stage 1 is the fullest; splits that
    leave the other stages unequal, that interleaving cannot split over its chunks, or that have no
    pipeline to split, are refused; two end stages with no middle one split over their chunks."""
    m, hw = an.model("llama3-405b"), an.hardware("h100-sxm")
    kw = dict(seq_len=8192, global_batch=2048)
    lay = an.Layout(
        tp=8, pp=16, dp=64, zero=1, sequence_parallel=True, first_stage_layers=7,
        last_stage_layers=7,
    )
    plan = an.Plan(m, hw, lay, **kw)
    even = an.Plan(m, hw, lay.replace(first_stage_layers=None, last_stage_layers=None), **kw)
    first, second = plan.memory(stage=0), plan.memory(stage=1)
    kept = (
        first.activations.to("byte").magnitude - BACKWARD_405B,
        even.memory(stage=0).activations.to("byte").magnitude - BACKWARD_405B,
    )
    assert kept[0] / kept[1] == pytest.approx(7 / 8, rel=1e-12)
    assert second.activations == even.memory(stage=1).activations and plan.memory().stage == 1
    with pytest.raises(LayoutError, match="share them evenly"):
        an.Plan(m, hw, lay.replace(first_stage_layers=8), **kw)
    with pytest.raises(LayoutError, match="pp 1 has no stages to split over"):
        an.Plan(m, hw, lay.replace(pp=1, dp=1024, last_stage_layers=None), **kw)
    # two stages, both given, no middle one, each split over 2 chunks: the last holds two layers
    # more and the final norm; a layer's 16,384·(16,384 + 2·8·128) + 16,384² + 3·16,384·53,248 +
    # 2·16,384 parameters and the norm's 16,384, each over TP 8, 2 bytes each
    ends = an.Plan(
        m,
        hw,
        lay.replace(
            pp=2, dp=512, first_stage_layers=62, last_stage_layers=64, vpp=2, schedule="interleaved"
        ),
        **kw,
    )
    layer = 16384 * (16384 + 2 * 8 * 128) + 16384**2 + 3 * 16384 * 53248 + 2 * 16384
    weights = [round(ends.memory(stage=k).weights.m_as("byte")) for k in (0, 1)]
    assert weights[1] - weights[0] == 2 * (2 * layer + 16384) / 8
    with pytest.raises(LayoutError, match="over its 2 model chunks"):
        an.Plan(m, hw, lay.replace(vpp=2, schedule="interleaved"), **kw)


def test_a_sliding_window_computes_its_band_of_the_score_matrix():
    """With a fused kernel a sliding-window layer computes the band of width W below the diagonal,
    Ws − W²/2 of the s² scores, against a causal layer's s²/2: at W = s/4 that is 7/32 against 1/2,
    so the attention core takes 7/16 of the causal time; a window as long as the sequence is causal;
    only the listed layers slide."""
    m = an.Model(layers=8, hidden=1024, heads=8, vocab=1000, position="rope", mlp="swiglu")
    hw, lay, kw = an.hardware("h100-sxm"), an.Layout(dp=8), dict(seq_len=4096, global_batch=8)
    core = (
        lambda model: an.Plan(model, hw, lay, **kw)
        .time_breakdown(ops=True)["attention"]
        .to("s")
        .magnitude
    )  # noqa: E731
    causal = core(m)
    assert core(m.replace(sliding_window=1024)) == pytest.approx(7 / 16 * causal, rel=1e-12)
    assert core(m.replace(sliding_window=4096)) == pytest.approx(causal, rel=1e-12)
    assert core(m.replace(sliding_window=8192)) == pytest.approx(causal, rel=1e-12)
    assert core(m.replace(sliding_window=1024, sliding_layers=4)) == pytest.approx(
        (7 / 16 + 1) / 2 * causal, rel=1e-12
    )
    with pytest.raises(InputError, match="sliding_layers"):
        m.replace(sliding_layers=2)


def test_data_parallel_traffic_hides_behind_the_last_microbatch_only():
    """With a pipeline, the gradient reduction overlaps the last microbatch's backward on each of
    the stage's v chunks: a window of compute / m whatever v is. One layer's reduction and gather
    (a bucket: the traffic over the stage's 16 layers) has no compute beside it; of the rest, the
    larger of what outlasts the window and the (1 − φ) of it that the SMs its kernels hold take from
    the compute (here φ = 0.5, v = 2, a slow NVLink so that the traffic outlasts it, then a fast
    one)."""
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    lay = an.Layout(pp=2, dp=8, zero=1, schedule="interleaved", vpp=2)
    for bandwidth, outlasts in (("5 GB/s", True), ("5000 GB/s", False)):
        plan = an.Plan(
            m, hw, lay, seq_len=4096, global_batch=64, overlap=0.5, scale_up_bandwidth=bandwidth
        )
        t = {k: v.to("s").magnitude for k, v in plan.time_breakdown(ops=True).items()}
        compute = t["gemm"] + t["attention"] + t["memory_bound"]
        traffic = plan.communication_time()["dp"].to("s").magnitude
        window, edge = compute / plan.microbatches, traffic / 16
        assert (traffic - edge > 2 * window) == outlasts
        hidden = max(0.5 * (traffic - edge), traffic - edge - window)
        assert t["dp"] == pytest.approx(hidden + edge, rel=1e-9)


def test_each_shared_expert_adds_the_same_gemm_time():
    """Shared experts run as one GEMM pair whose width grows with their count: on hardware without
    tile quantisation (TPU v6e) a GEMM's time is affine in its width, so the third shared expert
    adds the same time as the second."""

    def gemm(shared):
        m = an.Model(
            layers=4, hidden=2048, heads=16, vocab=32000, position="rope", mlp="swiglu", experts=8,
            topk=2, shared_experts=shared, expert_ffn_hidden=1024,
        )
        plan = an.Plan(
            m, an.hardware("tpu-v6e"), an.Layout(dp=8, ep=8), seq_len=4096, global_batch=64
        )
        return plan.time_breakdown(ops=True)["gemm"].to("s").magnitude

    one, two, three = gemm(1), gemm(2), gemm(3)
    assert two > one and three - two == pytest.approx(two - one, rel=1e-9)


def test_megatrons_block_recompute_keeps_the_other_layers_activations():
    """Llama 3 70B, TP8 SP PP4 (20 layers a stage), 16 microbatches of 8,192 tokens: stage 0 of 1F1B
    holds 4 in flight. Recomputing 5 layers of each stage keeps those layers' inputs (2h/t bytes a
    token) and the other 15 layers' activations (34,336 bytes a token by the flash SwiGLU count over
    TP 8), plus one layer while it is recomputed and its SwiGLU's two backward gradients (2 × 2 ×
    28,672 / 8 bytes a token); its hardware FLOPs and the TP collectives of the recomputed forwards
    are a quarter of full recomputation's. N = 20 is full recomputation; N = 0 is refused, as is N
    without full."""
    m, hw = an.model("llama3-70b"), an.hardware("h100-sxm")
    kw = dict(seq_len=8192, global_batch=64)

    def plan(**layout):
        return an.Plan(m, hw, an.Layout(tp=8, pp=4, dp=4, sequence_parallel=True, **layout), **kw)

    per_layer, layer_input, tokens = 34336, 2 * 8192 // 8, 8192
    assert round(plan().expr("memory.activations.layer").value().m_as("byte")) == per_layer * tokens
    block = plan(recompute="full", recompute_layers=5)
    backward = 4 * 28672 // 8 * tokens
    want = (5 * layer_input + 15 * per_layer) * tokens * 4 + per_layer * tokens + backward
    assert block.memory(stage=0).activations.to("byte").magnitude == pytest.approx(want, rel=1e-12)
    full, none = plan(recompute="full"), plan()
    assert plan(recompute="full", recompute_layers=20).memory() == full.memory()
    extra = (block.hardware_flops() - none.hardware_flops()) / (
        full.hardware_flops() - none.hardware_flops()
    )
    assert extra.to("").magnitude == pytest.approx(5 / 20, rel=1e-12)
    assert none.step_time() < block.step_time() < full.step_time()
    tp = {
        k: p.communication()["tp"].to("byte").magnitude
        for k, p in (("block", block), ("full", full), ("none", none))
    }
    # 4 + 2 · 5/20 a layer
    assert tp["block"] - tp["none"] == pytest.approx((tp["full"] - tp["none"]) / 4, rel=1e-12)
    assert "recompute_layers=5" in repr(block)
    with pytest.raises(LayoutError, match="recompute_layers"):
        an.Layout(recompute="selective", recompute_layers=5)
    with pytest.raises(InputError, match="recompute_layers"):
        an.Layout(recompute="full", recompute_layers=0)


def test_block_recompute_counts_layers_per_model_chunk():
    """Under interleaving Megatron recomputes N layers of each model chunk: Llama 3 70B over PP4
    with 2 chunks of 10 layers a stage, N = 3 recomputes 6 of a stage's 20 layers (FLOPs 3/10 of
    full recomputation's) and N = 10 all of them, as does any larger N. The stage keeps, per layer
    in flight, 3/10 of a layer's input and 7/10 of its activations: from the full-recomputation
    plan's count of layers in flight (less the recomputed layer and its SwiGLU's two backward
    gradients, which both hold)."""
    m, hw = an.model("llama3-70b"), an.hardware("h100-sxm")
    kw = dict(seq_len=8192, global_batch=64)

    def plan(**layout):
        return an.Plan(
            m,
            hw,
            an.Layout(
                tp=8, pp=4, dp=4, vpp=2, schedule="interleaved", sequence_parallel=True, **layout
            ),
            **kw,
        )

    full, none, block = plan(recompute="full"), plan(), plan(recompute="full", recompute_layers=3)
    assert plan(recompute="full", recompute_layers=10).memory() == full.memory()
    assert plan(recompute="full", recompute_layers=15).memory() == full.memory()
    layer = none.expr("memory.activations.layer").value().to("byte").magnitude
    layer_input = 2 * 8192 * 8192 / 8
    backward = 4 * 8192 * 28672 / 8
    # in flight
    held = (full.memory(stage=0).activations.to("byte").magnitude - layer - backward) / layer_input
    want = held * (0.3 * layer_input + 0.7 * layer) + layer + backward
    assert block.memory(stage=0).activations.to("byte").magnitude == pytest.approx(want, rel=1e-12)
    extra = (block.hardware_flops() - none.hardware_flops()) / (
        full.hardware_flops() - none.hardware_flops()
    )
    assert extra.to("").magnitude == pytest.approx(0.3, rel=1e-12)


@pytest.mark.parametrize(
    "dense, per_stage", [(6, [4, 2, 0, 0]), (2, [2, 0, 0, 0]), (10, [4, 4, 2, 0])]
)
def test_a_stage_holds_the_dense_layers_that_fall_in_it(dense, per_stage):
    """DeepSeek-V3 over 16 stages of 4 layers: stage k holds layers 4k to 4k + 3, so with the first
    6 (2, 10) layers dense the first stages hold 4, 2, 0 (2, 0; 4, 4, 2) of them. Each dense layer
    holds Δ more parameters than a MoE one, Δ from the model's totals at one dense layer more."""
    base = an.model("deepseek-v3")
    delta = (
        base.replace(dense_layers=dense + 1).total_params
        - base.replace(dense_layers=dense).total_params
    )
    kw = dict(seq_len=4096, global_batch=16)
    lay = an.Layout(pp=16)

    def weights(model):
        return [
            m.weights.to("byte").magnitude
            for m in an.Plan(model, an.hardware("h800"), lay, **kw).memory_by_stage()[:4]
        ]

    moe_only, mixed = weights(base.replace(dense_layers=0)), weights(
        base.replace(dense_layers=dense)
    )
    assert [round((w - w0) / (2 * delta)) for w, w0 in zip(mixed, moe_only)] == per_stage
    for w, w0, n in zip(mixed, moe_only, per_stage):
        assert w - w0 == pytest.approx(2 * delta * n, rel=1e-12)


def test_bf16_moments_keep_eight_bytes_of_adam_state():
    """Adam's moments in bf16 with fp32 master weights (DeepSeek-V3 §3.3.3): 4 + 2 + 2 bytes of
    optimizer state per parameter instead of ZeRO's 12, sharded the same; the Adam step moves 18 + 4
    bytes a parameter of its shard instead of 26 + 4 (Megatron-Core's fp32 gradients)."""
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    kw = dict(seq_len=8192, global_batch=8)
    for zero, shard in ((0, 1), (1, 8)):
        fp32, bf16 = (
            an.Plan(m, hw, an.Layout(dp=8, zero=zero), moment_dtype=d, **kw)
            for d in ("fp32", "bf16")
        )
        assert bf16.memory().optimizer.to("byte").magnitude == pytest.approx(
            8 * m.total_params / shard, rel=1e-12
        )
        assert fp32.memory().optimizer.to("byte").magnitude == pytest.approx(
            12 * m.total_params / shard, rel=1e-12
        )
        ratio = (
            bf16.time_breakdown(ops=True)["optimizer"] / fp32.time_breakdown(ops=True)["optimizer"]
        )
        assert ratio.to("").magnitude == pytest.approx(22 / 30, rel=1e-12)
    assert (
        "moment_dtype=bf16" in repr(bf16)
        and bf16.replace(layout=bf16.layout).moment_dtype == "bf16"
    )
    with pytest.raises(InputError, match="moment_dtype"):
        an.Plan(m, hw, an.Layout(dp=8), moment_dtype="fp8", **kw)


def test_a_group_on_a_fully_connected_node_reaches_only_its_own_links():
    """MI300X's node is a full mesh of 7 Infinity Fabric links of 64 GB/s a direction, no switch: a
    TP group of 2 all-reduces over one link, one of 8 over all seven, and a pipeline hand-off
    between two GPUs crosses one link. By hand, α–β ring all-reduces of S = s·b·h·2 bytes, 4 a layer
    per microbatch: 2(n − 1)·α + 2(n − 1)/n · S / ((n − 1) · 64 GB/s · η). On H100's switched NVLink
    every group reaches the whole 450 GB/s."""
    m, kw = an.model("llama3-8b"), dict(seq_len=8192, global_batch=64, microbatch_size=1)
    mi = an.hardware("mi300x")
    for tp in (2, 8):
        p = an.Plan(m, mi, an.Layout(tp=tp, dp=64 // tp, zero=1, sequence_parallel=False), **kw)
        eta, alpha = float(p.inputs["scale_up_efficiency"]), float(p.inputs["scale_up_latency"])
        S = 8192 * 1 * m.hidden * 2
        one = 2 * (tp - 1) * alpha + 2 * (tp - 1) / tp * S / ((tp - 1) * 64e9 * eta)
        expected = 4 * m.layers * p.microbatches * one
        assert p.communication_time()["tp"].to("s").magnitude == pytest.approx(expected, rel=1e-9)
        h100 = an.Plan(
            m,
            an.hardware("h100-sxm"),
            an.Layout(tp=tp, dp=64 // tp, zero=1, sequence_parallel=False),
            **kw,
        )
        eta, alpha = float(h100.inputs["scale_up_efficiency"]), float(
            h100.inputs["scale_up_latency"]
        )
        switched = (
            4
            * m.layers
            * h100.microbatches
            * (2 * (tp - 1) * alpha + 2 * (tp - 1) / tp * S / (450e9 * eta))
        )
        assert h100.communication_time()["tp"].to("s").magnitude == pytest.approx(
            switched, rel=1e-9
        )
    lay = an.Layout(pp=2, dp=4, zero=1)
    mesh, switch = an.Plan(m, mi, lay, **kw), an.Plan(m, mi.replace(scale_up_links=None), lay, **kw)
    # the same bytes, one link instead of 7
    assert mesh.communication()["pp"] == switch.communication()["pp"]
    sent, eta = mesh.communication()["pp"].to("byte").magnitude, float(
        mesh.inputs["scale_up_efficiency"]
    )
    slower = (mesh.communication_time()["pp"] - switch.communication_time()["pp"]).to("s").magnitude
    assert slower == pytest.approx(sent / eta * (1 / 64e9 - 1 / 448e9), rel=1e-9)


def test_a_fully_connected_domain_needs_a_link_to_every_peer():
    """scale_up_links below the domain's size − 1 cannot be a full mesh, on the hardware or through
    a Plan's scale_up_domain."""
    mi = an.hardware("mi300x")
    with pytest.raises(InputError, match="scale_up_links"):
        mi.replace(scale_up_links=3)
    with pytest.raises(InputError, match="scale_up_domain"):
        an.Plan(
            an.model("llama3-8b"), mi, an.Layout(tp=8, dp=2), seq_len=8192, global_batch=64,
            scale_up_domain=16,
        )


def test_context_parallel_gathers_again_only_in_the_recomputed_layers():
    """Llama 3 8B, CP 4, Megatron's block recomputation of 8 of the 32 layers: each layer
    all-gathers K and V (2·s·a_kv·d_h·2 bytes for the whole 8,192-token sequence) once forward and
    reduce-scatters their gradients once, and the 8 recomputed layers gather again: per microbatch
    32 + 32 + 8 ring collectives of 3/4 of that buffer, by hand."""
    m, kw = an.model("llama3-8b"), dict(seq_len=8192, global_batch=16, microbatch_size=1)
    lay = an.Layout(cp=4, dp=2, recompute="full", recompute_layers=8)
    plan = an.Plan(m, an.hardware("h100-sxm"), lay, **kw)
    buffer = 2 * 8192 * m.kv_heads * m.head_dim * 2
    expected = plan.microbatches * (32 + 32 + 8) * 3 / 4 * buffer
    assert plan.communication()["cp"].to("byte").magnitude == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "pp, first, last, second",
    [(2, 15, None, 17), (2, 16, 16, 16), (4, 15, 15, 1), (4, 5, None, 9), (3, 0, None, 16)],
)
def test_uneven_stages_at_their_bounds(pp, first, last, second):
    """Llama 3 8B's 32 layers (218,112,000 parameters each, by hand; the 525,336,576-parameter
    embedding on the first stage, the output layer as large and the 4,096-weight final norm on the
    last): two stages may take everything, the other stages one layer each at the least, and they
    share the rest evenly; a first stage may hold the embedding alone. 16 + 17 layers are
    refused."""
    m, hw, kw = an.model("llama3-8b"), an.hardware("h100-sxm"), dict(seq_len=4096, global_batch=8)
    plan = an.Plan(m, hw, an.Layout(pp=pp, first_stage_layers=first, last_stage_layers=last), **kw)
    stages = plan.memory_by_stage()
    assert len(stages) == pp
    assert round(stages[0].weights.m_as("byte")) == 2 * (first * 218_112_000 + 525_336_576)
    head = 525_336_576 + 4096 if pp == 2 else 0  # the second stage is the last
    assert round(stages[1].weights.m_as("byte")) == 2 * (second * 218_112_000 + head)
    with pytest.raises(LayoutError, match="first_stage_layers"):
        an.Plan(m, hw, an.Layout(pp=2, first_stage_layers=16, last_stage_layers=17), **kw)


def test_per_tensor_gathers_again_for_the_recomputed_share_of_layers():
    """Per-tensor ZeRO-3 over 8 ranks without a pipeline gathers every parameter twice a microbatch,
    and a third time in a recomputed forward: with 8 of Llama 3 8B's 32 layers recomputed, a quarter
    of a third gather, 8 microbatches × 0.25 × 7/8 × 2Ψ more bytes than without recomputation, by
    hand."""
    m, hw, kw = an.model("llama3-8b"), an.hardware("h100-sxm"), dict(seq_len=4096, global_batch=64)

    def sent(**layout):
        plan = an.Plan(m, hw, an.Layout(dp=8, zero=3, zero3_gather="per-tensor", **layout), **kw)
        return plan.communication()["dp"].to("byte").magnitude

    extra = sent(recompute="full", recompute_layers=8) - sent(recompute="none")
    assert extra == pytest.approx(8 * 0.25 * 7 / 8 * 2 * m.total_params, rel=1e-12)


def test_a_stride_that_grows_with_a_free_degree_is_not_taken_across_nodes():
    """With tp left free, DP's two ranks sit 4·t apart: inside one 8-GPU node at t = 1, across nodes
    from t = 2. The link stays open until t is known, and at t = 1 the symbolic plan's DP time is
    the numeric plan's, on NVLink."""
    m, hw, kw = an.model("llama3-8b"), an.hardware("h100-sxm"), dict(seq_len=8192, global_batch=16)
    free = an.Plan(m, hw, an.Layout(tp=an.sym("tp"), cp=4, dp=2), **kw)
    one = an.Plan(m, hw, an.Layout(tp=1, cp=4, dp=2), **kw)
    assert (
        free.placement()["dp"]["link"] == "symbolic" and one.placement()["dp"]["link"] == "scale-up"
    )
    at_one = free.expr("communication_time.dp").evaluate(tp=1)
    assert at_one.to("s").magnitude == pytest.approx(
        one.communication_time()["dp"].to("s").magnitude, rel=1e-12
    )


def test_a_hardware_quantity_without_a_unit_is_refused_as_written():
    """'80' for HBM could be GB or GiB: refused, and the message shows what was written."""
    with pytest.raises(
        an.UnitError, match=r"hbm: expected a quantity in byte .*got the bare value '80'$"
    ):
        an.hardware("h100-sxm").replace(hbm="80")


def test_offloaded_activations_leave_two_layers_on_the_device_and_the_rest_in_host_memory():
    """MaxText's Llama 3.1 70B on 256 v6e (FSDP, full recomputation, 5 × 8,192 tokens a chip): each
    of the 80 layers keeps its input, 2·s·b·h = 671,088,640 bytes. Offloaded, the host holds all 80
    and the chip two (TransformerEngine's double buffer), so the chip's activations fall by 78
    inputs and its total from over the chip's 31.25 GiB to under it. Nothing else changes, the step
    time included."""
    m, hw = an.model("llama3-70b"), an.hardware("tpu-v6e").replace(scale_up_domain=256)
    lay = an.Layout(dp=256, zero=3, recompute="full")
    kw = dict(seq_len=8192, global_batch=1280, microbatch_size=5, stack="maxtext")
    kept = 2 * 8192 * 5 * 8192
    plain, off = an.Plan(m, hw, lay, **kw), an.Plan(
        m, hw, lay.replace(offload_activations=True), **kw
    )
    a, b = plain.memory(), off.memory()
    assert round(a.host.m_as("byte")) == 0 and round(b.host.m_as("byte")) == 80 * kept
    assert (a.activations - b.activations).to("byte").magnitude == pytest.approx(
        78 * kept, rel=1e-12
    )
    assert not a.fits and b.fits
    for part in ("weights", "gradients", "optimizer", "gathered", "logits", "loss"):
        assert getattr(a, part).to("byte").magnitude == pytest.approx(
            getattr(b, part).to("byte").magnitude, rel=1e-12
        )
    assert off.step_time().to("s").magnitude == pytest.approx(
        plain.step_time().to("s").magnitude, rel=1e-12
    )
    assert "memory.offload.host_activations" in off.sources("memory.host")
    assert "offload_activations" in repr(off) and "offload_activations" not in repr(plain)


def test_offloaded_activations_by_pipeline_stage():
    """Llama 3 8B, 1F1B over 4 stages of 8 layers, 8 microbatches: stage k holds 4 − k microbatches
    in flight, so 8·(4 − k) layer inputs go to the host, two stay on the device at every stage."""
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    kept = 2 * 4096 * 1 * 4096  # full recomputation keeps each layer's 16-bit input
    lay = an.Layout(pp=4, dp=2, recompute="full")
    plain = an.Plan(m, hw, lay, seq_len=4096, global_batch=16)
    off = an.Plan(m, hw, lay.replace(offload_activations=True), seq_len=4096, global_batch=16)
    for k in range(4):
        held = 8 * (4 - k)
        assert round(off.memory(stage=k).host.m_as("byte")) == held * kept
        drop = (
            (plain.memory(stage=k).activations - off.memory(stage=k).activations)
            .to("byte")
            .magnitude
        )
        assert drop == pytest.approx((held - 2) * kept, rel=1e-12)
    # the last stage, with the loss, is the fullest on the device; the first in host memory
    worst = off.memory()
    assert worst.stage == 3 and round(worst.host.m_as("byte")) == 32 * kept


def test_zero3_gathers_a_blocks_dense_parameters_and_its_local_experts():
    """Mixtral 8x22B (its config.json) on 8 GPUs, ZeRO-3 with EP 8: a block's gather brings its
    dense parameters whole and only the experts this rank holds (E/ep of them). Two blocks'
    parameters and one block's gradients, 16-bit: 3·2·(Ψ_dense + Ψ_experts/8)/56, Ψ_experts =
    56·8·3·6144·16384."""
    m = an.Model.from_hf(Path(__file__).parent / "data" / "hf" / "mixtral-8x22b.json")
    p = an.Plan(
        m, an.hardware("h100-sxm"), an.Layout(dp=8, ep=8, zero=3), seq_len=4096, global_batch=8
    )
    experts = 56 * 8 * 3 * 6144 * 16384
    dense = p.expr("params").value().to("parameter").magnitude - experts
    assert p.memory().gathered.to("byte").magnitude == pytest.approx(
        3 * 2 * (dense + experts / 8) / 56, rel=1e-12
    )


def test_a_memory_without_offload_holds_nothing_in_host_memory():
    """Memory built without ``host`` (a stage that offloads nothing) has 0 bytes in host memory, and
    its fit is the total's against HBM alone."""
    gb = lambda x: an.Q_(x, "GB")  # noqa: E731
    m = an.Memory(
        weights=gb(10), gradients=gb(20), optimizer=gb(5), gathered=gb(0), activations=gb(40),
        total=gb(75), hbm=gb(80), logits=gb(1), loss=gb(2),
    )
    assert round(m.host.m_as("byte")) == 0 and m.fits
    assert not an.Memory(**{**m.as_dict(), "total": gb(81)}).fits


def test_a_memory_reads_in_gigabytes_and_holds_gigabytes():
    """Memory's repr gives each part in GB (four significant digits, the zero ones left out but for
    the weights and gradients); its fields are pint quantities in GB, as every byte count a plan
    gives is."""
    gb = lambda x: an.Q_(x, "GB")  # noqa: E731
    m = an.Memory(
        weights=gb(10), gradients=gb(20), optimizer=gb(5), gathered=gb(0), activations=gb(40.04),
        total=gb(75.04), hbm=an.Q_(85520810000, "byte"), logits=gb(1), loss=gb(2), stage=3,
    )
    assert (
        repr(m) == "Memory(stage 3: weights 10 GB, gradients 20 GB, optimizer 5 GB, "
        "activations 40.04 GB; total 75.04 GB, hbm 85.52 GB; logits 1 GB, "
        "loss 2 GB)"
    )
    plan = an.Plan(
        "llama3-70b", "h100-sxm", an.Layout(tp=8, pp=4, dp=8), seq_len=8192, global_batch=512
    )
    mem = plan.memory()
    assert str(mem.total.units) == str(mem.hbm.units) == "gigabyte"
    sent, peak = plan.communication()["dp"], plan.memory_peak()
    assert str(sent.units) == str(peak.units) == str(plan.memory(stage=3).total.units) == "gigabyte"
    assert str(plan.step_time().units) == "second"
    assert "total 101.1 GB" in repr(mem)
    # the layers' 16-bit weights over TP 8 and PP 4: the model's parameters less the output layer's
    # and the final norm's, which the last stage holds, plus the input embedding's, a quarter each
    model = an.model("llama3-70b")
    first = (model.total_params - 128256 * 8192 - 8192 - 128256 * 8192) / 4 + 128256 * 8192
    assert mem.stage == 0 and round(mem.weights.m_as("byte")) == 2 * first / 8


def test_exposure_says_what_each_axis_leaves_and_why():
    """Qwen3-30B-A3B under ZeRO-1 with a pipeline: DP traffic hides behind the last microbatch's
    compute (the step's compute over its 32 microbatches), and what exceeds it is exposed; TP and EP
    sit between the GEMMs that consume them. ZeRO-3 without a pipeline hides DP behind the whole
    step; async TP and DualPipe say so; a layout with a symbol has no reasons to give."""
    kw = dict(seq_len=4096, global_batch=512)
    layout = an.Layout(tp=2, pp=2, dp=16, ep=8, zero=1, sequence_parallel=True)
    plan = an.Plan("qwen3-30b-a3b", "h100-sxm", layout, **kw)
    e, parts = plan.exposure(), plan.time_breakdown(ops=True)
    compute = sum(parts[k].to("s").magnitude for k in ("gemm", "attention", "memory_bound"))
    assert plan.value("microbatches").magnitude == 32
    assert e["dp"]["window"].to("s").magnitude == pytest.approx(compute / 32, rel=1e-12)
    # one layer's reduction and gather (of 24 a stage) has no compute beside it; the rest costs the
    # larger of what outlasts the window and the SMs its kernels hold (16 of 132) while it runs
    traffic, window = (e["dp"][k].to("s").magnitude for k in ("traffic", "window"))
    rest = traffic * (1 - 1 / 24)
    assert e["dp"]["exposed"].to("s").magnitude == pytest.approx(
        max(rest * 16 / 132, rest - window) + traffic / 24, rel=1e-12
    )
    assert "last microbatch" in e["dp"]["why"] and "no async TP" in e["tp"]["why"]
    assert "no DualPipe" in e["ep"]["why"]
    assert e["tp"]["exposed"] == e["tp"]["traffic"] and e["ep"]["exposed"] == e["ep"]["traffic"]
    fsdp_layout = an.Layout(tp=2, dp=32, zero=3, sequence_parallel=True, async_tp=True)
    fsdp = an.Plan("llama3-8b", "h100-sxm", fsdp_layout, **kw).exposure()
    assert "step's compute" in fsdp["dp"]["why"] and "async TP" in fsdp["tp"]["why"]
    dualpipe = an.Plan(
        "deepseek-v3",
        "h800",
        an.Layout(pp=16, dp=128, ep=64, zero=1, schedule="dualpipe"),
        seq_len=4096,
        global_batch=15360,
        stack="hai-llm",
    )
    assert "DualPipe's" in dualpipe.exposure()["ep"]["why"]
    with pytest.raises(an.FreeSymbolError, match="exposure"):
        an.Plan("llama3-8b", "h100-sxm", an.Layout(dp=an.sym("dp")), **kw).exposure()


def test_recompute_modules_run_what_they_free_again():
    """DeepSeek-V3 with Megatron-Core's layernorm, mla_up_proj and moe_act modules: beyond the plain
    step, the two up-projections' forwards of every block (2·128·(1536·192 + 512·256) FLOPs a token,
    by hand from the MLA shapes) and no attention core; the default selective module is the
    attention core alone."""
    lay = an.Layout(pp=16, dp=128, ep=64, zero=1)
    # Megatron-Core refuses the layernorm and moe_act modules under delayed scaling
    kw = dict(seq_len=4096, global_batch=15360, dtype="fp8", fp8_recipe="tensorwise")
    m = an.model("deepseek-v3")

    def plan(mods=None):
        return an.Plan(
            m,
            an.hardware("h800"),
            lay if mods is None else lay.replace(recompute="selective", recompute_modules=mods),
            **kw,
        )

    plain, saver, core = plan(), plan(("layernorm", "mla_up_proj", "moe_act")), plan(())
    extra = (saver.hardware_flops() - plain.hardware_flops()).to("FLOP").magnitude
    assert extra == pytest.approx(
        2 * 128 * (1536 * 192 + 512 * 256) * m.blocks * 4096 * 15360, rel=1e-12
    )
    assert plan(("core_attn",)).hardware_flops() == core.hardware_flops() > plain.hardware_flops()
    assert saver.step_time() > plain.step_time()
    assert plan(("layernorm", "moe_act")).hardware_flops() == plain.hardware_flops()


def test_deepseek_v3_with_its_savers():
    """DeepSeek-V3 as the docs show it: its savers bring a middle rank under the HBM it exceeds
    without them, and 3 and 2 layers on the first and last stages bring rank 0, which under DualPipe
    also holds the last stage, below the even split's."""
    savers = dict(
        recompute="selective",
        recompute_modules=("layernorm", "mla_up_proj", "moe_act"),
        fp8_activations=True,
    )
    lay = an.Layout(pp=16, dp=128, ep=64, zero=1, schedule="dualpipe", comm_sms=20, **savers)
    ds = an.Plan(
        an.model("deepseek-v3"), an.hardware("h800"), lay, seq_len=4096, global_batch=15360,
        dtype="fp8", moment_dtype="bf16", stack="hai-llm",
    )
    plain = ds.replace(
        layout=lay.replace(recompute="none", recompute_modules=(), fp8_activations=False)
    )
    split = ds.replace(layout=lay.replace(first_stage_layers=3, last_stage_layers=2))
    assert ds.memory(stage=7).fits and not plain.memory(stage=7).fits
    assert ds.memory().stage == 0 and not ds.memory().fits and split.memory().fits


def test_uneven_stages_under_interleaving():
    """Megatron-Core splits an uneven first stage's layers evenly over its v chunks, so the first of
    p = 4 stages (v = 2) with 4 of 20 layers holds, by Megatron's warm-up count, 2(p − 1) + (v − 1)p
    + 1 = 11 chunks of 2 layers at its peak: 22 layers' activations, where the even split's 5 layers
    a stage hold 27.5 (which Megatron refuses: 5 layers do not split over 2 chunks; TorchTitan
    splits them unevenly), each with a layer's backward gradients (2 × 2 × 2,816 bytes a token). A
    last stage of 3 layers cannot split over 2 chunks."""
    m = an.Model(
        layers=20, hidden=1024, heads=16, vocab=32000, position="rope", mlp="swiglu",
        ffn_hidden=2816,
    )
    kw = dict(seq_len=2048, global_batch=16)

    def plan(stack="megatron-core", **uneven):
        return an.Plan(
            m,
            an.hardware("h100-sxm"),
            an.Layout(pp=4, vpp=2, schedule="interleaved", **uneven),
            stack=stack,
            **kw,
        )

    split = plan(first_stage_layers=4, last_stage_layers=4)
    layer = split.expr("memory.activations.layer").value().to("byte").magnitude
    backward = 4 * 2048 * 2816
    assert split.memory(stage=0).activations.to("byte").magnitude == pytest.approx(
        22 * layer + backward, rel=1e-12
    )
    even = plan("torchtitan")
    layer = even.expr("memory.activations.layer").value().to("byte").magnitude
    assert even.memory(stage=0).activations.to("byte").magnitude == pytest.approx(
        27.5 * layer + backward, rel=1e-12
    )
    with pytest.raises(an.InputError, match="20 layers do not split over 4 stages × 2 chunks"):
        plan()
    with pytest.raises(an.LayoutError, match="2 model chunks"):
        plan(first_stage_layers=5, last_stage_layers=3)


def test_ends_counted_as_layers_split_llama3_405b_a_layer_a_chunk():
    """Llama 3 405B trims a layer from its first and last stages, leaving "the first model chunk on
    the first stage ... only the embedding" (§3.3.2): a layer a chunk, (126 + 2)/16 = 8 chunks a
    stage, Megatron-Core's account-for-embedding/loss split. The stages then hold 7, 14 × 8 and 7
    layers, as the same split given stage by stage; each stage holds the layer-microbatches the
    pipeline simulator finds in flight under Megatron's interleaved order, and a layer's backward
    gradients (the last its loss)."""
    from analytic.reference.pipeline_sim import simulate

    m, hw, kw = (
        an.model("llama3-405b"),
        an.hardware("h100-sxm"),
        dict(seq_len=8192, global_batch=2048),
    )
    base = dict(tp=8, pp=16, dp=64, zero=2, sequence_parallel=True)
    ends = an.Plan(
        m, hw, an.Layout(**base, schedule="interleaved", vpp=8, ends_as_layers=True), **kw
    )
    given = an.Plan(m, hw, an.Layout(**base, first_stage_layers=7, last_stage_layers=7), **kw)
    for k in (0, 1, 15):
        assert ends.memory(stage=k).weights == given.memory(stage=k).weights
    layer = ends.expr("memory.activations.layer").value().to("byte").magnitude
    chunks = [1] * 128
    chunks[0] = chunks[-1] = 0
    peak = simulate("interleaved", 16, 32, v=8, layers=chunks).peak_layers
    assert peak[:2] == [112, 141]
    for k in range(15):
        assert ends.memory(stage=k).activations.to("byte").magnitude == pytest.approx(
            peak[k] * layer + BACKWARD_405B, rel=1e-12
        )
    # the last stage also holds the loss's working set and the saved inputs of the final norm and
    # the output layer, 2 bytes of h/t each a token under sequence parallelism
    last = ends.memory(stage=15)
    head = 2 * 2 * 8192 * 16384 / 8
    assert last.activations.to("byte").magnitude == pytest.approx(
        peak[15] * layer + last.loss.to("byte").magnitude + head, rel=1e-12
    )
    assert ends.memory().stage == 1
    assert "ends_as_layers" in repr(ends)


def test_ends_counted_as_layers_on_two_stages():
    """Six layers and the two ends over 2 stages of 2 chunks: 2 slots a chunk, so stage 0 runs the
    embedding and a layer, then 2 layers. With 4 microbatches it warms up with 2·1 + 1·2 = 4 chunk
    forwards and runs one more: chunk 0 on microbatches 0, 1 and 2, chunk 1 on 0 and 1, holding 3 ×
    1 + 2 × 2 = 7 layer-microbatches, and a layer's backward gradients. Eight layers and the ends do
    not fill 4 stages of 2 chunks evenly."""
    m = an.Model(
        layers=6, hidden=1024, heads=16, vocab=32000, position="rope", mlp="swiglu", ffn_hidden=2816
    )
    plan = an.Plan(
        m,
        an.hardware("h100-sxm"),
        an.Layout(pp=2, vpp=2, schedule="interleaved", ends_as_layers=True),
        seq_len=2048,
        global_batch=4,
    )
    layer = plan.expr("memory.activations.layer").value().to("byte").magnitude
    assert plan.memory(stage=0).activations.to("byte").magnitude == pytest.approx(
        7 * layer + 4 * 2048 * 2816, rel=1e-12
    )
    # 8 layers and the ends over 4 stages of 2 chunks
    with pytest.raises(an.LayoutError, match="10 slots"):
        plan.replace(model=m.replace(layers=8), layout=plan.layout.replace(pp=4))


@pytest.mark.parametrize(
    "changes,needle",
    [
        (dict(first_stage_layers=7), "Megatron-Core refuses both"),
        (dict(vpp=3), "128 slots"),
        (dict(vpp=1, pp=1, schedule="1f1b"), "no stages to split over"),
    ],
)
def test_ends_counted_as_layers_must_split_evenly(changes, needle):
    lay = dict(tp=8, pp=16, dp=64, schedule="interleaved", vpp=8, ends_as_layers=True) | changes
    with pytest.raises(an.LayoutError, match=needle):
        an.Plan(
            an.model("llama3-405b"), an.hardware("h100-sxm"), an.Layout(**lay), seq_len=8192,
            global_batch=2048,
        )
    with pytest.raises(an.LayoutError, match="DualPipe places both ends"):
        an.Layout(pp=16, dp=64, schedule="dualpipe", ends_as_layers=True)


def test_a_foreach_adamw_step_is_the_peak_where_the_activations_are_small():
    """TorchTitan's foreach AdamW of 2024 allocates the square roots of the second moments in its
    step, 4 bytes a parameter it updates. Llama 3 8B (8,030,261,248 parameters, its model card)
    under FSDP 8 with 512 tokens a GPU and full recomputation peaks there: 20 bytes a parameter of
    the shard, activations and gathered blocks freed; with bf16 moments (12 bytes of states) the
    roots take 2, with 256 tokens. With 8,192 tokens the forward and backward is the peak and the
    step adds nothing; the fused AdamW of 2025 never allocates it."""
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    shard = 8_030_261_248 // 8

    def memory(seq, stack):
        plan = an.Plan(
            m,
            hw,
            an.Layout(dp=8, zero=3, recompute="full"),
            seq_len=seq,
            global_batch=8,
            stack=stack,
        )
        return plan, plan.memory()

    plan, short = memory(512, "torchtitan")
    assert round(short.optimizer_step.m_as("byte")) == 4 * shard
    assert round(short.total.m_as("byte")) == 20 * shard
    assert short.activations.magnitude == short.gathered.magnitude == 0
    assert "memory.optimizer_step.foreach" in plan.sources("memory.total")
    # bf16 moments: their square roots too
    bf16 = plan.replace(moment_dtype="bf16", seq_len=256).memory()
    assert round(bf16.optimizer_step.m_as("byte")) == 2 * shard
    assert round(bf16.total.m_as("byte")) == 14 * shard
    _, long = memory(8192, "torchtitan")
    _, fused = memory(512, "torchtitan-2025")
    assert long.optimizer_step.magnitude == fused.optimizer_step.magnitude == 0
    assert long.activations.magnitude > 0 and fused.total.to("byte").magnitude < 20 * shard
    assert fused.activations.to("byte").magnitude + fused.gathered.to("byte").magnitude < 4 * shard


def test_deepspeeds_step_copies_the_gradient_partition_to_fp32():
    """DeepSpeed's ZeRO optimizers flatten the gradient partition (2 bytes a parameter) and copy it
    to fp32 (4) before Adam's step, and reduce gradients through a bucket of 5·10⁸ 16-bit elements
    (10⁹ bytes), held through the backward (ZeRO-1, 2) or the whole step (ZeRO-3). Llama 3 8B
    (8,030,261,248 parameters, its model card), 512 tokens a GPU, full recomputation: under ZeRO-2
    on 8 GPUs the step is the peak, 2Ψ of weights, 2 + 12 + 6 bytes a parameter of the shard. Under
    ZeRO-1 on 2 GPUs the step frees the gradients outside the partition first and holds 2Ψ + Ψ + 6Ψ
    + 3Ψ = 12Ψ, above the backward's 2Ψ + 2Ψ + 6Ψ, the bucket and the activations. Under ZeRO-3 on 4
    GPUs the copy is of one sub-group, at most 10⁹ parameters: 6·10⁹ bytes, beside the bucket."""
    m, hw, n = an.model("llama3-8b"), an.hardware("h100-sxm"), 8_030_261_248

    def memory(dp, zero, stack="deepspeed"):
        plan = an.Plan(
            m,
            hw,
            an.Layout(dp=dp, zero=zero, recompute="full"),
            seq_len=512,
            global_batch=dp,
            stack=stack,
        )
        return plan, plan.memory()

    plan, z2 = memory(8, 2)
    assert round(z2.optimizer_step.m_as("byte")) == 6 * n // 8
    assert round(z2.total.m_as("byte")) == 2 * n + 20 * n // 8
    assert (
        z2.activations.magnitude == 0
        and "memory.optimizer_step.fp32_gradient_copy" in plan.sources("memory.total")
    )
    _, z1 = memory(2, 1)
    assert round(z1.gradients.m_as("byte")) == n and round(z1.optimizer_step.m_as("byte")) == 3 * n
    assert round(z1.total.m_as("byte")) == 12 * n
    # 16 GB of gradients in the backward outweigh the 8 bytes a parameter of a shard
    _, z1_wide = memory(8, 1)
    assert z1_wide.optimizer_step.magnitude == 0
    assert round(z1_wide.gradients.m_as("byte")) == 2 * n + 10**9
    _, z3 = memory(4, 3)
    assert round(z3.optimizer_step.m_as("byte")) == 6 * 10**9
    assert round(z3.total.m_as("byte")) == 16 * n // 4 + 6 * 10**9 + 10**9
    # 8,192 tokens: the backward's activations outweigh the copy
    long = an.Plan(
        m,
        hw,
        an.Layout(dp=8, zero=2, recompute="full"),
        seq_len=8192,
        global_batch=8,
        stack="deepspeed",
    ).memory()
    assert long.optimizer_step.magnitude == 0 and round(long.activations.m_as("byte")) > 6 * n // 8
    assert round(long.gradients.m_as("byte")) == 2 * n // 8 + 10**9
    _, megatron = memory(8, 2, stack="megatron-core")  # a fused step without the copy
    assert megatron.optimizer_step.magnitude == 0


def test_offloaded_optimizer_moves_its_share_of_the_state_and_the_step_to_the_host():
    """Llama 3 8B (8,030,261,248 parameters, its model card) on 8 GPUs, ZeRO-1: each rank updates
    1,003,782,656. Offloading half (Megatron-Core's --optimizer-offload-fraction 0.5) leaves 12
    bytes a parameter of the other half on the device and puts 16 bytes a parameter of this half on
    the host (fp32 copy, fp32 gradient copy, two fp32 moments); the device's Adam step halves, the
    rest is unchanged."""
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    lay = an.Layout(dp=8, zero=1)
    plain = an.Plan(m, hw, lay, seq_len=8192, global_batch=64)
    half = plain.replace(layout=lay.replace(offload_optimizer=0.5))
    shard = 8_030_261_248 // 8
    a, b = plain.memory(), half.memory()
    assert round(a.optimizer.m_as("byte")) == 12 * shard
    assert round(b.optimizer.m_as("byte")) == 6 * shard
    assert round(a.host.m_as("byte")) == 0 and round(b.host.m_as("byte")) == 8 * shard
    for part in ("weights", "gradients", "gathered", "activations"):
        assert round(getattr(a, part).m_as("byte")) == round(getattr(b, part).m_as("byte"))
    ta, tb = (p.time_breakdown(ops=True) for p in (plain, half))
    assert tb["optimizer"].to("s").magnitude == pytest.approx(
        ta["optimizer"].to("s").magnitude / 2, rel=1e-12
    )
    assert tb["gemm"].to("s").magnitude == pytest.approx(ta["gemm"].to("s").magnitude, rel=1e-12)
    assert "memory.offload.host_optimizer" in half.sources("memory.host")
    assert "offload_optimizer=0.5" in repr(half) and "offload_optimizer" not in repr(plain)
    # with both, the host holds both
    acts = plain.replace(layout=lay.replace(offload_activations=True)).memory().host
    both = half.replace(layout=half.layout.replace(offload_activations=True)).memory().host
    assert acts.to("byte").magnitude > 0
    assert both.to("byte").magnitude == pytest.approx(
        (acts + b.host).to("byte").magnitude, rel=1e-12
    )


def test_offloaded_optimizer_by_pipeline_stage():
    """Llama 3 8B over 2 stages, dp 4, ZeRO-1, all offloaded: stage 0 holds 16 layers of 218,112,000
    parameters and the 525,336,576 of the embedding; stage 1 the same layers, the output layer and
    the final norm (4,096). The host holds 16 bytes a parameter of each rank's quarter."""
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    p = an.Plan(
        m, hw, an.Layout(pp=2, dp=4, zero=1, offload_optimizer=1), seq_len=8192, global_batch=64
    )
    for k, params in (
        (0, 16 * 218_112_000 + 525_336_576),
        (1, 16 * 218_112_000 + 525_336_576 + 4096),
    ):
        mem = p.memory(stage=k)
        assert round(mem.host.m_as("byte")) == 16 * params / 4
        assert round(mem.optimizer.m_as("byte")) == 0


def test_offloaded_optimizer_is_refused_where_it_is_not_modelled():
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    kw = dict(seq_len=8192, global_batch=64)
    lay = an.Layout(dp=8, zero=1, offload_optimizer=1)
    with pytest.raises(an.InputError, match="offload_optimizer: stack torchtitan"):
        an.Plan(m, hw, lay, stack="torchtitan", **kw)
    with pytest.raises(an.InputError, match="offload_optimizer: .*ZeRO 0-2"):
        an.Plan(m, hw, lay.replace(zero=3), **kw)
    # ZeRO-2 is accepted; all offloaded, the host holds the shard
    zero2 = an.Plan(m, hw, lay.replace(zero=2), **kw).memory()
    assert round(zero2.host.m_as("byte")) == 16 * (8_030_261_248 // 8)
    assert zero2.optimizer.magnitude == 0
    with pytest.raises(an.InputError, match="moment_dtype: .*fp32 moments"):
        an.Plan(m, hw, lay, moment_dtype="bf16", **kw)
    for bad in (1.5, -0.25, True, "half", None):
        with pytest.raises(an.AnalyticError, match="offload_optimizer"):
            an.Layout(offload_optimizer=bad)


def _zero_offload(zero, share=1, global_batch=8, tp=1, model="llama3-8b"):
    """DeepSpeed's ZeRO-Offload on 8 H100 with full recomputation, 512 tokens a sequence."""
    return an.Plan(
        an.model(model),
        an.hardware("h100-sxm"),
        an.Layout(tp=tp, dp=8 // tp, zero=zero, recompute="full", offload_optimizer=share),
        seq_len=512,
        global_batch=global_batch,
        stack="deepspeed",
    )


def test_deepspeeds_zero_offload_keeps_the_partition_and_its_step_on_the_host():
    """DeepSpeed's ZeRO-Offload puts the fp32 partition, its fp32 gradients and CPU Adam's moments
    on the host, 16 bytes a parameter of the shard (Llama 3 8B, 8,030,261,248 parameters, over 8
    ranks), and its step copies nothing on the device. ZeRO-3 keeps its 16-bit gradient partition on
    the host too: 18 bytes a parameter of the shard there, as ZeRO-1 and 2 do with more than one
    microbatch a step, for their pinned 16-bit buffers that accumulate the gradients. It offloads
    the whole partition, with a ZeRO stage."""
    n = 8_030_261_248
    for zero, host in ((1, 16), (2, 16), (3, 18)):
        mem = _zero_offload(zero).memory()
        assert round(mem.host.m_as("byte")) == host * n // 8 and mem.optimizer.magnitude == 0, zero
        assert mem.optimizer_step.magnitude == 0
        two = _zero_offload(zero, global_batch=16)  # two microbatches a step
        assert round(two.memory().host.m_as("byte")) == 18 * n // 8, zero
        assert ("memory.offload.host_accumulated_gradients" in two.sources("memory.host")) == (
            zero < 3
        )
    assert "memory.offload.host_zero3_gradients" in _zero_offload(3).sources("memory.host")
    for zero, share, match in ((0, 1, "ZeRO 1-3"), (3, 0.5, "whole partition")):
        with pytest.raises(an.InputError, match=f"offload_optimizer: .*{match}"):
            _zero_offload(zero, share).memory()


def test_deepspeeds_zero_offload_stages_gradients_through_a_buffer_of_the_largest_parameter(docs):
    """From ZeRO-2 ZeRO-Offload reduces the gradients into the host's copy: the device keeps the
    10⁹-byte reduce bucket and, below ZeRO-3, a 16-bit buffer of the largest parameter, Llama 3 8B's
    128,256 × 4,096 embedding (a TP rank's half of it under TP 2; MT-NLG's 4h × h MLP matrix, 4h =
    81,920 outnumbering its 51,200-token vocabulary). ZeRO-1's backward still holds every 16-bit
    gradient. The README states it."""
    n, staging = 8_030_261_248, 2 * 128_256 * 4_096
    z1, z2, z3 = (_zero_offload(zero).memory() for zero in (1, 2, 3))
    assert round(z3.gradients.m_as("byte")) == 10**9
    assert round(z2.gradients.m_as("byte")) == 10**9 + staging
    held = 2 * n + 10**9 + staging + round(z2.activations.m_as("byte"))
    assert round(z2.total.m_as("byte")) == held
    assert round(z1.gradients.m_as("byte")) == 2 * n + 10**9 + staging
    tp2 = _zero_offload(2, tp=2, global_batch=4).memory()
    assert round(tp2.gradients.m_as("byte")) == 10**9 + staging // 2
    mt = _zero_offload(2, tp=8, global_batch=1, model="mt-nlg-530b").memory()
    assert round(mt.gradients.m_as("byte")) == 10**9 + 2 * 81_920 * 20_480 // 8
    for name in an.models():  # fused, the gate and up projections would be larger only where 2f > V
        preset = an.model(name)
        assert preset.mlp != "swiglu" or preset.vocab > 2 * preset.ffn_hidden, name
    readme = docs
    assert (
        f"{z2.total.to('GB').magnitude:.2f} GB, its {z2.gradients.to('GB').magnitude:.3f} GB of"
        f" gradients the bucket's 1 GB and the embedding-sized buffer's {staging / 1e9:.3f} GB, and"
        f" {z2.host.to('GB').magnitude:.2f} GB a GPU on the host" in readme
    )


def test_transformer_engines_fp8_weight_cache_holds_two_bytes_a_linear_parameter():
    """Megatron-Core's FP8 plans keep Transformer Engine's FP8 weight and its transpose for every
    linear: 2 bytes a parameter but the embedding's and the output layer's. Llama 3 8B's layer holds
    4,096 × 6,144 (QKV) + 4,096² (projection) + 3 × 4,096 × 14,336 (MLP) + 2 × 4,096 (norms) =
    218,112,000 parameters; under TP 2 and PP 2 the first stage's 16 layers put 16 × 218,112,000 / 2
    on a GPU, the last stage's the final norm's 4,096 / 2 more. bf16, TorchTitan's Float8 (cast at
    each use) and ZeRO-3 add nothing."""

    def weights(dtype="fp8", stack="megatron-core", zero=1, stage=0):
        p = an.Plan(
            an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(tp=2, pp=2, dp=2, zero=zero),
            seq_len=4096, global_batch=8, dtype=dtype, stack=stack,
        )
        return round(p.memory(stage=stage).weights.m_as("byte"))

    layer = 4_096 * 6_144 + 4_096**2 + 3 * 4_096 * 14_336 + 2 * 4_096
    assert layer == 218_112_000
    assert weights() - weights("bf16") == 2 * 16 * layer / 2
    assert weights(stage=1) - weights("bf16", stage=1) == 2 * (16 * layer + 4_096) / 2
    assert weights(stack="torchtitan") == weights("bf16", stack="torchtitan")
    assert weights(zero=3) == weights("bf16", zero=3)


def test_the_dp_and_zero3_regimes_of_a_numeric_layout_are_decided_without_expressions():
    """Hand table: without a pipeline ZeRO-3 gathers twice and reduce-scatters every microbatch,
    ZeRO-2 reduce-scatters every microbatch, ZeRO-1 (and any stage under a pipeline) once a step,
    ZeRO-0 all-reduces; ZeRO-3 holds the stage's copies under a pipeline and gathers blocks without
    one. The conditions of the plan's expressions pick the same, as sympy's and as a numeric plan's
    bools."""
    from analytic.plan import regime
    from analytic.plan.degrees import Degrees
    from analytic.plan.layout import DP_REGIMES, GATHERED_REGIMES

    want = {
        (3, 1): ("per microbatch: RS + 2 AG", "memory.zero3_gathered"),
        (2, 1): ("RS every microbatch + AG", None),
        (1, 1): ("reduce-scatter + all-gather", None),
        (0, 1): ("all-reduce", None),
        (3, 2): ("reduce-scatter + all-gather", "memory.zero3_held"),
        (3, 4): ("reduce-scatter + all-gather", "memory.zero3_held"),
        (2, 4): ("reduce-scatter + all-gather", None),
        (0, 4): ("all-reduce", None),
    }
    for (zero, pp), (dp, gathered) in want.items():
        lay = an.Layout(zero=zero, pp=pp)
        assert (regime(DP_REGIMES, lay), regime(GATHERED_REGIMES, lay)) == (dp, gathered), (
            zero,
            pp,
        )
        # sympy conditions, a numeric plan's bools
        for kind, true in (("sympy", sympy.true), ("number", True)):
            deg = Degrees(lay, kind)
            assert next(label for label, cond in deg.dp_regimes if cond is true) == dp
            assert next(label for label, cond in deg.gathered_regimes if cond is true) == gathered
    with pytest.raises(an.InputError, match="regime"):
        regime(DP_REGIMES, an.Layout(zero=an.sym("zero")))


def test_a_free_tp_keeps_the_stacks_two_loss_working_sets():
    """TorchTitan's loss holds 12 bytes a logit alone and 16 under its vocabulary-parallel loss
    (presets/stacks.toml): with the TP degree free, the loss's working set is a function of it that
    gives each, by hand: s·V = 8,192 × 128,256 logits of one microbatch, × 12 at tp = 1, × 16 / 8 at
    8."""
    p = an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(tp=an.sym("tp")), seq_len=8192,
        global_batch=64, stack="torchtitan",
    )
    loss = p.expr("memory.loss")
    assert round(loss.subs(tp=1).value().m_as("byte")) == 8192 * 128256 * 12
    assert round(loss.subs(tp=8).value().m_as("byte")) == 8192 * 128256 * 16 / 8


def test_a_plan_takes_preset_names_and_config_paths():
    """Names and config.json paths as a user types them give the plan of the objects they name;
    anything else is one InputError naming the argument."""
    from pathlib import Path

    kw = dict(seq_len=4096, global_batch=64)
    by_name = an.Plan("llama3-8b", "h100-sxm", an.Layout(tp=2, dp=4), **kw)
    by_object = an.Plan(an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(tp=2, dp=4), **kw)
    assert by_name.memory() == by_object.memory() and by_name.model is an.model("llama3-8b")
    config = Path(__file__).parent / "data" / "hf" / "llama-3.1-8b.json"
    assert an.Plan(config, "h100-sxm", **kw).model == an.Model.from_hf(config)
    assert an.Plan(str(config), "h100-sxm", **kw).model.layers == 32
    for model, hardware, arg in ((5, "h100-sxm", "model"), ("llama3-8b", 3.0, "hardware")):
        with pytest.raises(an.InputError, match=f"^{arg}: expected"):
            an.Plan(model, hardware, **kw)


def test_inputs_people_type():
    """vpp > 1 implies the interleaved schedule (an explicit other one is refused); a rate as one
    over a time; repr names the plan once; a search row knows its GPUs."""
    assert an.Layout(pp=4, vpp=2).schedule == "interleaved" and an.Layout(pp=4).schedule == "1f1b"
    with pytest.raises(an.LayoutError, match="need schedule='interleaved'"):
        an.Layout(pp=4, vpp=2, schedule="1f1b")
    kw = dict(seq_len=4096, global_batch=64)
    per = an.Plan(
        "llama3-8b", "h100-sxm", an.Layout(dp=8), interruption_rate="1/(50000 hour)", **kw
    )
    assert (
        per.inputs["interruption_rate"]
        == an.Plan(
            "llama3-8b", "h100-sxm", an.Layout(dp=8), interruption_rate="2e-5/hour", **kw
        ).inputs["interruption_rate"]
    )
    assert repr(per).startswith("Plan(llama3-8b on h100-sxm, tp=1")
    best = an.search("llama3-8b", "h100-sxm", gpus=16, progress=False, **kw).best
    assert best.gpus == 16 == best.as_dict()["gpus"]


@pytest.mark.parametrize("bandwidth", ["400 Gbit/s", "4 Gbit/s"])
def test_dualpipe_hides_the_all_to_all_behind_the_paired_chunk_only_up_to_its_compute(bandwidth):
    """DeepSeek-V3 §3.2.1: DualPipe runs a chunk's all-to-all beside the paired chunk's compute, so
    only what exceeds that compute is exposed, or what the SMs its kernels hold take from that
    compute (the latter at 400 Gbit/s a GPU; most of the traffic at 4 Gbit/s);
    under 1F1B the all-to-all sits between the router and the experts, exposed whole. The traffic is
    the same."""
    m, kw = an.model("deepseek-v3"), dict(
        seq_len=4096, global_batch=1024, scale_out_bandwidth=bandwidth, stack="hai-llm"
    )
    lay = an.Layout(pp=16, dp=64, ep=64, zero=1)
    dual = an.Plan(m, "h800", lay.replace(schedule="dualpipe"), **kw)
    plain = an.Plan(m, "h800", lay.replace(schedule="1f1b"), **kw)
    comm = dual.communication_time()["ep"].to("s").magnitude
    parts = {k: v.to("s").magnitude for k, v in dual.time_breakdown(ops=True).items()}
    compute = parts["gemm"] + parts["attention"] + parts["memory_bound"]
    assert plain.communication_time()["ep"].to("s").magnitude == pytest.approx(comm, rel=1e-12)
    assert plain.time_breakdown()["ep"].to("s").magnitude == pytest.approx(comm, rel=1e-12)
    # beside the paired chunk, the SMs its kernels hold (16 of 132) slow that chunk's compute
    assert parts["ep"] == pytest.approx(max(comm * 16 / 132, comm - compute), rel=1e-9)
    assert (comm < compute) == (bandwidth == "400 Gbit/s")
