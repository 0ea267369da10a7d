"""MoE parallel folding (Megatron-Core): the expert layers' ETP × EP × EDP fold over the attention
layers' TP × CP × DP, so EP may exceed DP. Checked against hand counts of the expert weights a GPU
holds, the expert data-parallel group and the ranks an EP group spans."""

import pytest

import analytic as an
from analytic.plan import placement as place

KW = dict(seq_len=4096, global_batch=1024)
# 48 MoE layers of 128 experts, hidden 2048, expert FFN 768 (SwiGLU: 3 matrices)
MODEL = "qwen3-30b-a3b"


def _plan(**layout):
    return an.Plan(
        MODEL, "h100-sxm", an.Layout(pp=4, zero=1, sequence_parallel=True, **layout), **KW
    )


def test_ep_may_exceed_dp_where_etp_times_ep_divides_tp_cp_dp():
    an.Layout(tp=4, dp=8, ep=32, etp=1)  # 1 × 32 divides 4 × 8
    an.Layout(tp=2, cp=2, dp=4, ep=16, etp=1)
    with pytest.raises(
        an.LayoutError, match=r"ep: etp × ep = 4 × 32 does not divide tp × cp × dp = 4 × 1 × 8"
    ):
        an.Layout(tp=4, dp=8, ep=32)  # etp defaults to tp
    with pytest.raises(an.LayoutError, match="etp: expert tensor parallelism 2 needs an MoE model"):
        an.Plan(
            "llama3-8b", "h100-sxm", an.Layout(tp=2, dp=4, etp=2), seq_len=4096, global_batch=64
        )


def test_a_gpu_holds_the_routed_experts_over_etp_times_ep():
    """Routed expert parameters: 48 layers × 128 experts × 3 × 2048 × 768; a GPU of pp 4 holds a
    quarter of the layers and 1/(etp·ep) of each: in bf16 two bytes each. The rest is split by tp
    alone."""
    routed = 48 * 128 * 3 * 2048 * 768
    by_etp_ep = {}
    for tp, dp, ep, etp in ((2, 32, 8, None), (2, 32, 16, 1), (2, 32, 64, 1), (2, 32, 8, 2)):
        weights = _plan(tp=tp, dp=dp, ep=ep, etp=etp).memory(stage=1).weights.to("byte").magnitude
        by_etp_ep[(etp or tp) * ep] = weights
    assert by_etp_ep[16] - by_etp_ep[64] == pytest.approx(
        2 * routed / 4 * (1 / 16 - 1 / 64), rel=1e-12
    )
    assert (
        _plan(tp=2, dp=32, ep=8).memory().weights
        == _plan(tp=2, dp=32, ep=16, etp=1).memory().weights
    )


def test_the_expert_gradients_reduce_over_the_expert_data_parallel_group():
    """EDP = tp·cp·dp/(etp·ep) ranks, etp·ep apart in the rank order (etp fastest, then ep)."""
    for tp, cp, dp, ep, etp, edp in (
        (2, 1, 32, 8, None, 4),
        (2, 1, 32, 64, 1, 1),
        (4, 2, 8, 16, 1, 4),
    ):
        plan = an.Plan(
            MODEL,
            "h100-sxm",
            an.Layout(tp=tp, cp=cp, pp=4, dp=dp, ep=ep, etp=etp, zero=1, sequence_parallel=True),
            **KW,
        )
        dense, experts = place.replica_groups(plan._in, place.parameters(plan._in))
        assert (float(dense[1]), float(dense[2])) == (dp * cp, tp)
        assert (float(experts[1]), float(experts[2])) == (edp, (etp or tp) * ep)


def test_an_ep_group_spans_the_ranks_etp_apart():
    """On 8-GPU nodes with tp 8: EP 8 at the default etp 8 strides over nodes; at etp 1 it is one
    node."""
    apart = an.Plan(MODEL, "h100-sxm", an.Layout(tp=8, dp=8, ep=8, sequence_parallel=True), **KW)
    folded = an.Plan(
        MODEL, "h100-sxm", an.Layout(tp=8, dp=8, ep=8, etp=1, sequence_parallel=True), **KW
    )
    assert (apart.placement()["ep"]["stride"], apart.placement()["ep"]["link"]) == (8, "scale-out")
    assert (folded.placement()["ep"]["stride"], folded.placement()["ep"]["link"]) == (1, "scale-up")
    assert folded.step_time() < apart.step_time()


def test_etp_moves_the_expert_gemms_shape_not_their_flops():
    """Each rank runs its experts' tokens of the etp group on 1/etp of each expert's width: the
    FLOPs of a step are the same for every etp (its structure's programs:
    tests/test_programs.py)."""
    plans = [_plan(tp=2, dp=32, ep=8, etp=etp) for etp in (None, 1, 2)]
    flops = [p.value("flops").to("FLOP").magnitude for p in plans]
    assert flops[0] == pytest.approx(flops[1], rel=1e-12) and flops[0] == pytest.approx(
        flops[2], rel=1e-12
    )


def test_the_command_line_takes_etp(capsys):
    from analytic.cli.main import main

    args = [
        "step",
        "--model",
        MODEL,
        "--hardware",
        "h100-sxm",
        "--tp",
        "2",
        "--pp",
        "4",
        "--dp",
        "32",
        "--ep",
        "64",
        "--zero",
        "1",
        "--seq",
        "4096",
        "--global-batch",
        "1024",
    ]
    assert main(args) == 2
    assert "etp × ep = 2 × 64 does not divide" in capsys.readouterr().err
    assert main([*args, "--etp", "1"]) == 0
    assert "ep=64 etp=1" in capsys.readouterr().out


def test_search_folds_ep_over_cp_and_dp_and_each_row_is_its_plan():
    """Search lists EP up to cp·dp (its layouts keep ETP = TP), and a row with EP above DP is the
    Plan of its layout, step time and memory alike."""
    import numpy as np

    res = an.search(
        MODEL, "h100-sxm", gpus=64, seq_len=32768, global_batch=256, cp=4, progress=False
    )
    a = res.arrays
    # the divisors of 4 × 16 and 128
    assert set(np.unique(a["ep"][a["dp"] == 16])) == {1, 2, 4, 8, 16, 32, 64}
    row = res.row(int(np.flatnonzero(a["ep"] > a["dp"])[0]))
    plan = row.plan(an.model(MODEL), an.hardware("h100-sxm"), seq_len=32768, global_batch=256)
    assert plan.step_time().to("s").magnitude == pytest.approx(row.step_time, rel=1e-9)
    assert plan.memory().total.to("byte").magnitude == pytest.approx(row.memory, rel=1e-9)


def test_expert_tensor_parallelism_gathers_the_routed_tokens_and_the_mlp_pair_goes():
    """TP 2, PP 4, DP 32, EP 8, microbatches of one 4,096-token sequence (32 a step, 12 MoE layers a
    stage), sequence parallel: a rank holds 2,048 tokens. At ETP 2 the dispatcher all-gathers the
    etp ranks' routed tokens (2 × 2,048 × 8 experts × 2,048 × 2 bytes) and reduce-scatters them,
    forward and backward, each sending half its message; at ETP 1 neither runs. The TP collectives
    of an MoE layer without shared experts are its attention's pair alone: an all-reduce's message
    4,096 × 2,048 × 2 bytes, sent half by its reduce-scatter and half by its all-gather, two a layer
    per microbatch."""
    plans = {etp: _plan(tp=2, dp=32, ep=8, etp=etp) for etp in (1, 2)}
    ep = {etp: p.value("communication.ep").to("byte").magnitude for etp, p in plans.items()}
    calls = 2 * 12 * 32  # forward and backward, per MoE layer of the stage, per microbatch
    message = 2 * 2048 * 8 * 2048 * 2
    assert ep[2] - ep[1] == pytest.approx(2 * calls * message / 2, rel=1e-12)
    tp_bytes = plans[2].value("communication.tp").to("byte").magnitude
    assert tp_bytes == pytest.approx(2 * 12 * 32 * (4096 * 2048 * 2), rel=1e-12)
    assert "parallelism.ep.etp_gather_bytes" in plans[2].sources("communication.ep")
    assert "parallelism.ep.etp_gather_bytes" not in plans[1].sources("communication.ep")


def test_the_allgather_dispatcher_gathers_every_token_of_the_etp_ep_group():
    """TP 2, PP 4, DP 32, EP 8 at ETP 2, as above (2,048 tokens a rank, 12 MoE layers a stage, 32
    microbatches): Megatron-Core's all-gather dispatcher gathers the hidden states of the 16 etp·ep
    ranks (16 × 2,048 × 2,048 × 2 bytes, each rank sending 15/16 of it) and reduce-scatters the
    outputs back, forward and backward; no all-to-all and no separate ETP gather."""
    plan = _plan(tp=2, dp=32, ep=8, etp=2).replace(dispatcher="allgather")
    calls = 2 * 12 * 32
    message = 16 * 2048 * 2048 * 2
    by_hand = 2 * calls * message * 15 / 16  # the all-gather and the reduce-scatter
    assert plan.value("communication.ep").to("byte").magnitude == pytest.approx(by_hand, rel=1e-12)
    sources = plan.sources("communication.ep")
    assert (
        "parallelism.ep.allgather_dispatch_bytes" in sources
        and "parallelism.ep.dispatch_bytes" not in sources
    )


def test_the_allgather_dispatchers_group_of_consecutive_ranks_stays_on_nvlink():
    """EP 8 of Qwen3-30B-A3B on one 8-GPU node: the all-gather dispatcher's eight consecutive ranks
    share the node's NVLink, so the NIC's bandwidth does not change its time."""
    nics = ({}, {"scale_out_bandwidth": "100 Gbit/s"})
    plans = [
        an.Plan(
            "qwen3-30b-a3b", "h100-sxm", an.Layout(dp=8, ep=8, zero=1), seq_len=4096,
            global_batch=64, dispatcher="allgather", **nic,
        )
        for nic in nics
    ]
    times = [p.communication_time()["ep"].to("s").magnitude for p in plans]
    assert times[0] > 0 and times[0] == times[1]


def test_the_flex_dispatcher_sends_a_token_once_to_each_node_it_reaches():
    """EP 32 at stride 1 over 4 nodes of 8 H100s (TP 1, DP 32): DeepEP sends each token once to each
    node its 8 experts reach, 4 (1 − (3/4)^8) = 3.60 on average, where all-to-all sends all 8 copies
    (28/32 of them leave the rank). Bytes per step: 4,096 tokens a rank, 12 MoE layers a stage, 32
    microbatches, forward and backward."""
    plans = {
        d: an.Plan(MODEL, "h100-sxm", an.Layout(pp=4, dp=32, ep=32, zero=1), dispatcher=d, **KW)
        for d in ("alltoall", "flex")
    }
    ep = {d: p.value("communication.ep").to("byte").magnitude for d, p in plans.items()}
    calls, token = 2 * 12 * 32, 4096 * 2048 * 2
    reached = 4 * (1 - (3 / 4) ** 8)
    assert ep["alltoall"] == pytest.approx(2 * calls * token * 8 * 31 / 32, rel=1e-12)
    assert ep["flex"] == pytest.approx(2 * calls * token * reached * 3 / 4, rel=1e-12)
    assert "parallelism.ep.nodes_reached" in plans["flex"].sources("communication.ep")


def test_a_dispatcher_is_an_moe_plans_and_its_stacks():
    with pytest.raises(an.InputError, match="dense"):
        an.Plan("llama3-8b", "h100-sxm", an.Layout(dp=8), dispatcher="flex", **KW)
    with pytest.raises(an.InputError, match="dispatches with alltoall, not flex"):
        an.Plan(
            MODEL, "h100-sxm", an.Layout(dp=8, ep=8), dispatcher="flex", stack="torchtitan-2025",
            **KW,
        )
    assert _plan(tp=2, dp=32, ep=8).dispatcher == "alltoall"  # Megatron-Core's first


def test_experts_padded_to_capacity_carry_c_times_the_routed_copies():
    """expert_capacity=1.25 (Megatron-Core's --moe-expert-capacity-factor with
    --moe-pad-expert-input-to-capacity): every expert's input padded to 1.25 times its balanced
    share, so the all-to-all moves 1.25 times the dropless bytes (ETP 1: no expert-TP gather), and
    each MoE layer keeps 1.25 times the routed copies it saves (2k·h a token beside the gate and up
    projections, 6k·h_e over TP 2, Qwen3-30B-A3B: k 8, h 2,048, h_e 768); dropless is the default,
    and a dense model has no experts to pad."""
    dropless = _plan(tp=2, dp=32, ep=8, etp=1)
    padded = dropless.replace(expert_capacity=1.25)
    ep = [p.value("communication.ep").to("byte").magnitude for p in (dropless, padded)]
    assert ep[1] == pytest.approx(1.25 * ep[0], rel=1e-12)
    layer = an.formula("memory.activations.mlp_moe_sp")
    tokens = dict(
        seq_len=4096, microbatch_size=1, hidden=2048, tp=2, expert_ffn_hidden=768, shared_experts=0
    )
    grown = layer.evaluate(topk=10, **tokens) - layer.evaluate(topk=8, **tokens)
    assert grown.to("byte").magnitude == pytest.approx(4096 * (2 * 2 * 2048 + 6 * 2 * 768 / 2))
    assert dropless.expert_capacity is None and padded.expert_capacity == 1.25
    with pytest.raises(an.InputError, match="dense"):
        an.Plan("llama3-8b", "h100-sxm", an.Layout(dp=8), expert_capacity=1.25, **KW)
    with pytest.raises(an.InputError, match="≥ 1"):
        dropless.replace(expert_capacity=0.8)


def test_the_padded_rows_are_hardware_flops_the_model_flops_leave_out():
    """Padding to 1.25 runs 0.25·k more copies of a token through its routed experts' three
    matrices in each of Qwen3-30B-A3B's 48 MoE layers: by hand 0.25 × 8 × 3 × 2,048 × 768 × 48
    parameters a token, six FLOPs each (PaLM's count, no recomputation) over the step's tokens; the
    model FLOPs do not change."""
    dropless = _plan(tp=2, dp=32, ep=8, etp=1)
    padded = dropless.replace(expert_capacity=1.25)
    tokens = 4096 * 1024
    by_hand = 6 * 0.25 * 8 * 3 * 2048 * 768 * 48 * tokens
    extra = padded.hardware_flops() - dropless.hardware_flops()
    assert extra.to("FLOP").magnitude == pytest.approx(by_hand, rel=1e-12)
    assert padded.model_flops() == dropless.model_flops()
