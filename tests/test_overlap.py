"""Overlap from the schedule: FSDP's exposed gradient traffic against an event simulation of the
compute and communication streams (analytic.reference.streams), and the simulation against hand
counts."""

import pytest

import analytic as an
from analytic.reference.streams import fsdp_tasks, simulate

H200_SMS, NCCL_CTAS = 132, 16


def test_the_stream_simulation_against_hand_counts():
    # 4 blocks, forward 1 s and backward 2 s a block, gather and reduce-scatter 0.5 s a block: all
    # hidden but the first gather and the last reduce-scatter: 12 + 0.5 + 0.5
    assert simulate(fsdp_tasks(4, 1, 1.0, 2.0, 0.5, 0.5), 0, H200_SMS) == pytest.approx(13.0)
    # two microbatches: the second's first gather waits behind the first's last reduce-scatter
    assert simulate(fsdp_tasks(4, 2, 1.0, 2.0, 0.5, 0.5), 0, H200_SMS) == pytest.approx(26.0)
    # communication-bound: 4 forward gathers of 3 s, then 4 backward gathers and 4 reduce-scatters
    assert simulate(fsdp_tasks(4, 1, 1.0, 2.0, 3.0, 3.0), 0, H200_SMS) == pytest.approx(36.0)
    # with 16 of 132 SMs held while a collective runs: the 5 s of hidden collectives slow the
    # compute beside them by 16/132 of their time (0.606 s)
    slowed = simulate(fsdp_tasks(4, 1, 1.0, 2.0, 0.5, 0.5), NCCL_CTAS, H200_SMS)
    assert slowed == pytest.approx(13.0 + 5 * 16 / 132)


def _plan(bandwidth: str) -> an.Plan:
    return an.Plan("llama3-70b", "h200", an.Layout(dp=128, tp=2, zero=3), seq_len=8192,
                   global_batch=256, scale_out_bandwidth=bandwidth)


def _seconds(q) -> float:
    return q.to("s").magnitude


def _simulated(plan: an.Plan) -> float:
    """The plan's compute and DP traffic run through the stream simulation: its 80 blocks, a third
    of a block's compute forward, and its per-microbatch traffic in equal gathers and
    reduce-scatters (16-bit gradients: the same bytes as the gathers)."""
    compute = _seconds(plan.time_breakdown()["compute"])
    traffic = _seconds(plan.communication_time()["dp"])
    mb, blocks = plan.microbatches, 80
    f, g = compute / (3 * mb * blocks), traffic / (3 * mb * blocks)
    return simulate(fsdp_tasks(blocks, mb, f, 2 * f, g, g), NCCL_CTAS, H200_SMS)


def _model(plan: an.Plan) -> float:
    parts = plan.time_breakdown()
    return _seconds(parts["compute"] + parts["dp"])


def _traffic_share(plan: an.Plan) -> float:
    parts = plan.time_breakdown()
    return _seconds(plan.communication_time()["dp"]) / _seconds(parts["compute"])


def test_halving_the_scale_out_bandwidth_at_80_percent_of_the_window():
    base, halved = _plan("200 Gbit/s"), _plan("100 Gbit/s")
    assert 0.75 < _traffic_share(base) < 0.9 and _traffic_share(halved) > 1.4
    # inside the window the closed form is the simulation's; past it, the simulation's streams
    # also wait where a block's reduce-scatter queues behind the next block's gather (0.4% here)
    assert _model(base) == pytest.approx(_simulated(base), rel=1e-9)
    assert _model(halved) == pytest.approx(_simulated(halved), rel=0.005)
    moved = _seconds(halved.step_time() - base.step_time())
    assert moved == pytest.approx(_simulated(halved) - _simulated(base), rel=0.02)
    assert moved / _seconds(base.step_time()) > 0.3  # past the window: the excess is exposed


def test_halving_the_scale_out_bandwidth_at_a_quarter_of_the_traffic():
    base, halved = _plan("800 Gbit/s"), _plan("400 Gbit/s")
    assert 0.15 < _traffic_share(base) < 0.25
    moved = _seconds(halved.step_time() - base.step_time())
    assert moved == pytest.approx(_simulated(halved) - _simulated(base), rel=1e-6)
    # hidden, but the SMs the collectives hold slow the compute beside them: 16/132 of the added
    # traffic, and the first gather and the last reduce-scatter of each microbatch
    added = _seconds(halved.communication_time()["dp"] - base.communication_time()["dp"])
    assert moved > added * NCCL_CTAS / H200_SMS
    assert moved / _seconds(base.step_time()) < 0.03


@pytest.mark.parametrize("reserved", [1, 20])
def test_reserved_sms_hold_the_collectives(reserved):
    # SMs set apart for communication (DeepSeek-V3's 20): the collectives cost the compute beside
    # them nothing more, as with φ = 1
    plan = an.Plan("llama3-70b", "h200", an.Layout(dp=128, tp=2, zero=3, comm_sms=reserved),
                   seq_len=8192, global_batch=256, scale_out_bandwidth="800 Gbit/s")
    dp = _seconds(plan.time_breakdown()["dp"])
    free, shared = _plan("800 Gbit/s").replace(overlap=1), _plan("800 Gbit/s")
    assert dp == pytest.approx(_seconds(free.time_breakdown()["dp"]), rel=1e-12)
    assert dp < _seconds(shared.time_breakdown()["dp"])


def test_the_overlap_from_the_sms_and_the_collectives_ctas():
    assert _plan("400 Gbit/s").inputs["overlap"] == pytest.approx(1 - 16 / 132)
    assert an.Plan("llama3-8b", "a100-80g", an.Layout(dp=8), seq_len=2048,
                   global_batch=8).inputs["overlap"] == pytest.approx(1 - 16 / 108)
    given = _plan("400 Gbit/s").replace(comm_ctas=32)
    assert given.inputs["overlap"] == pytest.approx(1 - 32 / 132)
    with pytest.raises(an.InputError, match="comm_ctas"):
        _plan("400 Gbit/s").replace(comm_ctas=132).step_time()


def _dp(plan: an.Plan) -> tuple:
    """The plan's DP traffic, its window and what of it is exposed, in seconds."""
    e = plan.exposure()["dp"]
    return tuple(_seconds(e[k]) for k in ("traffic", "window", "exposed"))


def test_zero2_exposes_one_bucket_of_its_last_reduction_and_first_gather():
    """ZeRO-2 without a pipeline: each of m microbatches reduce-scatters its gradients, one
    all-gather a step; with 16-bit gradients each layer's reduce-scatter and gather take the same
    time x, so the traffic is 80·x·(m + 1) and one bucket's reduction and gather, 2x, are
    exposed."""
    plan = an.Plan("llama3-70b", "h200", an.Layout(dp=128, tp=2, zero=2), seq_len=8192,
                   global_batch=1024, grad_dtype="bf16", scale_out_bandwidth="100 Gbit/s")
    traffic, window, exposed = _dp(plan)
    m = plan.microbatches
    edge = 2 * traffic / (80 * (m + 1))
    rest = traffic - edge
    phi = 1 - NCCL_CTAS / H200_SMS
    assert exposed == pytest.approx(max(rest * (1 - phi), rest - window) + edge, rel=1e-12)


@pytest.mark.parametrize(
    "layout",
    [
        an.Layout(dp=64, tp=2, zero=0),
        an.Layout(dp=64, tp=2, zero=1),
        an.Layout(dp=64, tp=2, zero=2),
        an.Layout(dp=64, tp=2, zero=3),
        an.Layout(dp=64, tp=2, zero=3, zero3_gather="per-tensor"),
        an.Layout(dp=32, tp=2, pp=2, zero=1),
    ],
)
def test_no_more_of_the_dp_traffic_is_exposed_than_there_is(layout):
    """Whatever the regime, the exposed DP time lies between one bucket's first gather and last
    reduction (a layer's share of a step's traffic at least, here over 80 layers and their
    microbatches) and the whole traffic."""
    plan = an.Plan("llama3-70b", "h200", layout, seq_len=8192, global_batch=512)
    traffic, window, exposed = _dp(plan)
    assert traffic / (80 * 2 * plan.microbatches) < exposed <= traffic * (1 + 1e-12)


# --- Megatron-Core's combined 1F1B: the EP all-to-alls beside another microbatch's pass ---------


def _unpaired_in_megatrons_order(p: int, m: int, v: int) -> int:
    """Stage 0's unpaired passes under the combined 1F1B: its forwards before its first backward in
    Megatron-LM's 1F1B orders (the pipeline simulator's: the warm-up and the steady state's leading
    forward, which the combined 1F1B runs alone as one more warm-up chunk), each matched by an
    unpaired cool-down backward."""
    from analytic.reference.pipeline_sim import _orders

    kinds = [op[0] for op in _orders("interleaved" if v > 1 else "1f1b", p, m, v)[0]]
    return 2 * kinds.index("BW")


@pytest.mark.parametrize("p, m, v", [(8, 128, 4), (4, 8, 2), (2, 4, 3), (1, 6, 1), (4, 4, 4)])
def test_the_unpaired_share_counts_megatrons_warm_up_and_cool_down(p, m, v):
    share = an.formula("pipeline.unpaired_share.combined_1f1b").evaluate(
        pp=p, microbatches=m, vpp=v
    )
    unpaired = _unpaired_in_megatrons_order(p, m, v)
    assert float(share) == pytest.approx(min(unpaired, 2 * m * v) / (2 * m * v))


def _microbatches_compute(plan: an.Plan) -> float:
    """Seconds of the microbatches' compute (every op class but the optimizer step)."""
    ops = plan.time_breakdown(ops=True)
    return _seconds(ops["gemm"] + ops["attention"] + ops["memory_bound"])


def _qwen3(ep_overlap=False, **plan_kw) -> an.Plan:
    layout = an.Layout(tp=2, pp=8, vpp=4, dp=16, ep=32, etp=1, zero=1, sequence_parallel=True,
                       ends_as_layers=True, recompute="selective",
                       recompute_modules=("layernorm", "moe_act"), ep_overlap=ep_overlap)
    return an.Plan("qwen3-235b-a22b", "h100-sxm", layout, seq_len=4096, global_batch=2048,
                   microbatch_size=1, dispatcher="flex", stack="megatron-core", **plan_kw)


def test_ep_overlap_without_a_pipeline_leaves_the_first_forward_and_last_backward_unpaired():
    def plan(**kw):
        return an.Plan("qwen3-30b-a3b", "h100-sxm", an.Layout(dp=16, ep=16, zero=1, **kw),
                       seq_len=4096, global_batch=64, microbatch_size=1, stack="megatron-core")
    plain, paired = plan(), plan(ep_overlap=True)
    traffic = _seconds(plain.communication_time()["ep"])
    compute = _microbatches_compute(paired)
    u, phi = 1 / 4, 1 - NCCL_CTAS / H200_SMS  # 4 microbatches: one of each four passes unpaired
    hand = traffic * u + max(traffic * (1 - u) * (1 - phi), traffic * (1 - u) - compute * (1 - u))
    assert traffic > 0
    assert _seconds(paired.time_breakdown()["ep"]) == pytest.approx(hand, rel=1e-9)


@pytest.mark.parametrize("bandwidth", [None, "4 GB/s"])
def test_ep_overlap_hides_the_all_to_alls_of_the_paired_passes_beside_their_compute(bandwidth):
    """Inside the paired passes' compute (the NICs' own bandwidth) and past it (a narrow scale-out
    network)."""
    over = {} if bandwidth is None else {"scale_out_bandwidth": bandwidth}
    plain, paired = _qwen3(**over), _qwen3(ep_overlap=True, **over)
    traffic = _seconds(plain.communication_time()["ep"])
    compute = _microbatches_compute(paired)
    assert (traffic > compute) == (bandwidth is not None)
    # stage 0 warms up 2·7 + 3·8 + 1 chunks of the 128 · 4 (Megatron-LM schedules.py)
    u, phi = 39 / 512, 1 - NCCL_CTAS / H200_SMS
    rest = traffic * (1 - u)
    hand = traffic * u + max(rest * (1 - phi), rest - compute * (1 - u))
    assert _seconds(paired.time_breakdown()["ep"]) == pytest.approx(hand, rel=1e-9)
    assert _seconds(plain.time_breakdown()["ep"]) == pytest.approx(traffic, rel=1e-12)
    saved = _seconds(plain.step_time()) - _seconds(paired.step_time())
    assert saved == pytest.approx(traffic - hand, rel=1e-9)
    # the programs' number is the expressions'
    assert _seconds(paired.expr("step_time").value()) == pytest.approx(
        _seconds(paired.step_time()), rel=1e-12
    )
    assert "combined 1F1B" in paired.exposure()["ep"]["why"]


def test_ep_overlap_holds_one_more_chunk_in_flight():
    def activations(**kw):
        plan = an.Plan("qwen3-30b-a3b", "h100-sxm",
                       an.Layout(tp=1, pp=4, vpp=2, dp=2, ep=2, zero=1, **kw), seq_len=4096,
                       global_batch=64, microbatch_size=1, stack="megatron-core")
        return plan.memory(stage=0).activations

    # stage 0 of 4 × 2 chunks holds 2·3 + 1·4 + 1 = 11 chunks, 12 with the combined 1F1B's one more
    assert activations(ep_overlap=True) / activations() == pytest.approx(12 / 11)


@pytest.mark.parametrize(
    "model, layout, plan_kw, says",
    [
        ("llama3-8b", dict(dp=8), {}, "needs experts"),
        ("qwen3-30b-a3b", dict(dp=8), {}, "ep > 1"),
        ("qwen3-30b-a3b", dict(dp=8, ep=8, recompute="full"), {}, "full recomputation"),
        ("qwen3-30b-a3b", dict(pp=2, dp=4, ep=4), {}, "interleaved"),
        ("qwen3-30b-a3b", dict(pp=2, dp=4, ep=4, schedule="dualpipe"), {"stack": "hai-llm"},
         "DualPipe"),
        ("qwen3-30b-a3b", dict(dp=8, ep=8), {"stack": "torchtitan-2025"}, "torchtitan-2025"),
        ("qwen3-30b-a3b", dict(dp=8, ep=8), {"dispatcher": "allgather"}, "allgather"),
    ],
)
def test_ep_overlap_is_refused_where_megatron_core_refuses_it(model, layout, plan_kw, says):
    with pytest.raises((an.LayoutError, an.InputError), match=f"ep_overlap: .*{says}"):
        an.Plan(model, "h100-sxm", an.Layout(ep_overlap=True, **layout), seq_len=4096,
                global_batch=64, **{"stack": "megatron-core", **plan_kw})
