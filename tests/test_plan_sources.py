"""plan.sources(name): the catalogue formulas a quantity was composed from, as the configuration
implies."""

import pytest

import analytic as an

M405, H100 = an.model("llama3-405b"), an.hardware("h100-sxm")


def plan(stack="megatron-core", **layout):
    lay = dict(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True) | layout
    return an.Plan(M405, H100, an.Layout(**lay), seq_len=8192, global_batch=2048, stack=stack)


def test_sequence_parallel_activations_and_collectives():
    """With SP: the SP activation formula and TP's reduce-scatter + all-gather; without:
    all-reduce."""
    sp, plain = plan(), plan(sequence_parallel=False)
    assert "memory.activations.layer_flash_swiglu_sp" in sp.sources("memory.activations")
    assert "memory.activations.layer_flash_swiglu" not in sp.sources("memory.activations")
    assert "memory.activations.layer_flash_swiglu" in plain.sources("memory.activations")
    assert {"collectives.reduce_scatter.bytes_sent", "collectives.all_gather.bytes_sent"} <= set(
        sp.sources("communication.tp")
    )
    assert "collectives.all_reduce.bytes_sent" not in sp.sources("communication.tp")
    assert "collectives.all_reduce.bytes_sent" in plain.sources("communication.tp")


@pytest.mark.parametrize(
    "schedule, bubble, vpp",
    [
        ("1f1b", "1f1b", 1),
        ("zb-h1", "zb_h1", 1),
        ("zb-h2", "zb_h2", 1),
        ("dualpipe", "dualpipe", 1),
        ("interleaved", "1f1b", 2),
    ],
)
def test_the_bubble_comes_from_its_schedules_formula(schedule, bubble, vpp):
    # 126 layers + 2 ends; DeepSeek's stack runs the zero-bubble schedules and DualPipe
    stack = "megatron-core" if schedule in ("1f1b", "interleaved") else "hai-llm"
    got = plan(stack, schedule=schedule, vpp=vpp, ends_as_layers=vpp > 1).sources("time.bubble")
    assert f"pipeline.bubble_time.{bubble}" in got and "pipeline.bubble_time.critical_path" in got
    others = {"1f1b", "zb_h1", "zb_h2", "dualpipe"} - {bubble}
    assert not any(f"pipeline.bubble_time.{o}" in got for o in others)


def test_zero_and_recompute_change_what_dp_and_tp_traffic_use():
    full = plan(zero=3, pp=1, dp=1024, recompute="full", zero3_gather="per-tensor")
    assert "parallelism.tp.allreduces_recomputed_per_layer" in full.sources("communication.tp")
    assert "parallelism.tp.allreduces_recomputed_per_layer" not in plan().sources(
        "communication.tp"
    )
    assert "parallelism.dp.zero3_gathers_per_microbatch_recomputed_per_tensor" in full.sources(
        "communication.dp"
    )
    assert "collectives.all_reduce.bytes_sent" in plan(zero=0).sources("communication.dp")
    assert "collectives.all_reduce.bytes_sent" not in plan(zero=1).sources("communication.dp")


def test_a_symbolic_choice_keeps_every_branch_it_may_take():
    sym = plan(schedule=an.sym("schedule"))
    got = sym.sources("time.bubble")
    assert {f"pipeline.bubble_time.{b}" for b in ("1f1b", "zb_h1", "zb_h2", "dualpipe")} <= set(got)


def test_every_source_is_a_catalogue_formula():
    p = an.Plan(
        an.model("deepseek-v3"),
        an.hardware("h800"),
        an.Layout(pp=16, dp=128, ep=64, zero=1, schedule="dualpipe", comm_sms=20),
        seq_len=4096,
        global_batch=15360,
        dtype="fp8",
        stack="hai-llm",
    )
    catalogue = set(an.formulas())
    for q in p.quantities():
        if q in ("steps", "train_time", "interruptions"):
            continue  # need training tokens
        assert set(p.sources(q)) <= catalogue, q
    assert "compute.sm_share" in p.sources("step_time")  # 20 SMs reserved for communication
    assert "pipeline.mirror_stage.dualpipe" in p.sources("memory.weights")
    assert "pipeline.parameter_copies.dualpipe" in p.sources("params_per_gpu")
    assert "pipeline.mirror_stage.dualpipe" not in plan().sources("memory.weights")
    assert "pipeline.parameter_copies.dualpipe" not in plan().sources("params_per_gpu")
    assert "parallelism.ep.node_limited_dispatch_bytes" in p.sources("communication.ep")
