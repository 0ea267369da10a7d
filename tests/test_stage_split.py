"""A hybrid model's pipeline stages hold the layers of its pattern that fall on them, as
Megatron-Core's select_pipeline_segment splits a pattern: against hand counts, the published total,
a stage shared by two patterns, the pipeline simulator and search."""

import json

import numpy as np
import pytest

import analytic as an
from analytic.cli.main import main
from analytic.core.errors import LayoutError
from analytic.plan import ops, stage_split
from analytic.reference.pipeline_sim import simulate

NANO = "nemotron-3-nano"
#: Nemotron 3 Nano's hybrid_override_pattern cut into Megatron-Core's even split over 4 stages
NANO_STAGES = ("MEMEM*EMEMEM*", "EMEMEM*EMEMEM", "*EMEMEM*EMEME", "MEM*EMEMEMEME")
#: one Mamba-2 layer of Nano with its norm (tests/test_hybrid.py) and one attention layer: Q, K, V
#: (32 heads, 2 KV heads of 128), the output projection and the norm
MAMBA = 2688 * 10304 + 6144 * 4 + 6144 + 3 * 64 + 4096 + 4096 * 2688 + 2688
ATTENTION = 2688 * (32 * 128 + 2 * 2 * 128) + 32 * 128 * 2688 + 2688
SMALL = dict(
    hidden=256, heads=8, kv_heads=2, vocab=1000, ffn_hidden=512, mlp="relu2", position="rope",
    ssm_heads=8, ssm_head_dim=32, ssm_state=16, ssm_groups=2,
)


def _nano(**layout):
    return an.Plan(NANO, "h100-sxm", an.Layout(**layout), seq_len=4096, global_batch=16)


def test_nano_stages_hold_megatron_cores_segments():
    """Each stage holds its 13 characters of the pattern: 6 Mamba-2, 5 MoE and 2 attention layers on
    the first, then 6/6/1, 5/6/2 and 6/6/1, as counted in the segments."""
    plan = _nano(pp=4, dp=1)
    assert "".join(NANO_STAGES) == plan.model.layer_pattern
    want = [(6, 5, 2), (6, 6, 1), (5, 6, 2), (6, 6, 1)]
    assert [(s.count("M"), s.count("E"), s.count("*")) for s in NANO_STAGES] == want
    got = [(k["M"], k["E"], k["*"]) for k in stage_split.table(plan._in)]
    assert got == want


def test_nano_stages_weights_by_hand():
    """The second and third stages differ by a Mamba-2 layer for an attention layer: their 16-bit
    weights by twice that difference; the four stages' weights are the published model's 31.58
    billion parameters, twice."""
    stages = [s.weights.to("byte").magnitude for s in _nano(pp=4, dp=1).memory_by_stage()]
    assert stages[2] - stages[1] == 2 * (ATTENTION - MAMBA)
    assert sum(stages) == 2 * an.model(NANO).total_params == 2 * 31_577_937_344


def test_a_stage_depends_on_its_own_layers_only():
    """Two patterns whose second halves agree: the last of two stages has the same memory, part by
    part, and the same compute; the first stages differ."""
    a, b = (
        an.Plan(an.Model(layers=8, layer_pattern=p, **SMALL), "h100-sxm",
                an.Layout(tp=2, pp=2, dp=2, sequence_parallel=True), seq_len=1024, global_batch=16)
        for p in ("M-M-*-*-", "*-M-*-*-")
    )
    for part in ("weights", "gradients", "optimizer", "activations", "total"):
        assert getattr(a.memory(stage=1), part) == getattr(b.memory(stage=1), part), part
    assert a.value("time.stage.last") == b.value("time.stage.last")
    assert a.memory(stage=0).total != b.memory(stage=0).total
    assert a.value("time.stage.first") != b.value("time.stage.first")


@pytest.mark.parametrize(
    "pattern, pp, stage",
    [
        ("M*M*M*M*EEEEM*M*", 4, 2),
        ("M*M*EEEEM*M*M*M*", 4, 1),
        ("M*M*EEEEM*M*", 3, 1),
        ("M*M*EEEE", 2, 1),
    ],
)
def test_a_middle_stage_can_be_the_fullest(pattern, pp, stage):
    """Experts gathered on one stage: it holds the most memory and sets the pace, its own layers'
    compute the slowest stage's."""
    moe = an.Model(layers=len(pattern), layer_pattern=pattern, experts=32, topk=2,
                   expert_ffn_hidden=512, **SMALL)
    plan = an.Plan(moe, "h100-sxm", an.Layout(pp=pp, dp=2, ep=2), seq_len=1024, global_batch=32)
    totals = [s.total for s in plan.memory_by_stage()]
    assert plan.memory().stage == stage == totals.index(max(totals))
    assert plan.memory().total == max(totals)
    slowest = plan.slowest_stage()
    assert slowest["stage"] == stage
    own = ops.stage_compute(plan._in, stage_split.table(plan._in)[stage]).value()
    if stage < pp - 1:  # the last stage's compute also holds the output layer and loss
        assert slowest["compute"].to("s").magnitude == own.to("s").magnitude


def test_the_stages_compute_adds_up_to_the_pipelines():
    """The stages' own ops, and the output layer's on the last, sum to pp times the average stage's
    compute (the same ops counted for the whole model)."""
    plan = _nano(tp=2, pp=4, dp=2, ep=2, sequence_parallel=True)
    t = plan.time_breakdown(ops=True)
    average = (t["gemm"] + t["attention"] + t["memory_bound"]).to("s").magnitude
    own = [ops.stage_compute(plan._in, k).value().to("s").magnitude
           for k in stage_split.table(plan._in)]
    ends = (plan.value("time.stage.last").to("s").magnitude - own[-1])
    assert sum(own) + ends == pytest.approx(4 * average, rel=1e-12)
    assert plan.value("time.stage.first").to("s").magnitude == pytest.approx(own[0], rel=1e-12)
    assert plan.value("time.stage.middle").to("s").magnitude == pytest.approx(
        max(own[1:3]), rel=1e-12
    )


def test_unequal_stages_move_the_step_as_the_simulator():
    """1F1B over Nano's four stages of unequal work: compute, bubble and the slowest stage's excess
    are the simulator's makespan where the last stage is the slowest, and within one microbatch's
    excess of it otherwise."""
    plan = _nano(tp=2, pp=4, dp=2, ep=2, sequence_parallel=True)
    t = {k: v.to("s").magnitude for k, v in plan.time_breakdown(ops=True).items()}
    m = plan.microbatches
    own = [ops.stage_compute(plan._in, k).value().to("s").magnitude
           for k in stage_split.table(plan._in)]
    own[-1] = plan.value("time.stage.last").to("s").magnitude
    average = t["gemm"] + t["attention"] + t["memory_bound"]
    third = average / (3 * m)
    sim = simulate("1f1b", 4, m, t_f=third, t_b=third, t_w=third, work=[x / average for x in own])
    got = average + t["bubble"] + t["imbalance"]
    if max(own) == own[-1]:
        assert got == pytest.approx(sim.makespan, rel=1e-9)
    else:
        assert sim.makespan <= got <= sim.makespan + (max(own) - average) / m * 1.01


@pytest.mark.parametrize(
    "layout, needle",
    [
        (dict(pp=8, dp=1), "does not divide the 52 layers"),
        (dict(pp=2, dp=1, vpp=2, schedule="interleaved"), "one chunk a stage"),
        (dict(pp=2, dp=1, ends_as_layers=True), "layers only"),
    ],
)
def test_splits_megatron_core_does_not_make_are_refused(layout, needle):
    with pytest.raises(LayoutError, match=needle):
        _nano(**layout)


def test_an_uneven_split_places_the_given_counts():
    """first_stage_layers 10 and last 14 leave 14 each to the two middle stages."""
    plan = _nano(pp=4, dp=1, first_stage_layers=10, last_stage_layers=14)
    kinds = stage_split.table(plan._in)
    assert [sum(k.values()) for k in kinds] == [10, 14, 14, 14]
    assert (kinds[0]["M"], kinds[0]["E"], kinds[0]["*"]) == (5, 4, 1)  # "MEMEM*EMEM"


@pytest.mark.parametrize("split, want", [(dict(pp=2, first_stage_layers=20), [20, 32]),
                                         (dict(pp=3, first_stage_layers=10, last_stage_layers=26),
                                          [10, 16, 26])])
def test_the_stages_the_given_counts_leave(split, want):
    """first_stage_layers 20 of 52 leaves the last of two stages 32; with 10 and 26 given, the
    middle of three holds the other 16."""
    plan = _nano(dp=1, **split)
    assert [sum(k.values()) for k in stage_split.table(plan._in)] == want
    assert plan.layers_by_stage() == want


def test_numbers_from_the_programs_are_the_expressions(tmp_path, monkeypatch):
    """The plan's numbers, from its structure's programs, are its expressions' values, stage by
    stage."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    plan = _nano(tp=2, pp=4, dp=2, ep=2, sequence_parallel=True)
    for name in ("memory.total", "step_time"):
        assert plan.value(name) == plan.expr(name).value()
    for k in range(4):
        got = plan.memory(stage=k).total.to("byte").magnitude  # in GB: one rounding
        assert got == pytest.approx(
            plan.expr("memory.total", stage=k).value().to("byte").magnitude, rel=1e-15
        )


def test_search_places_each_pipelines_stages_as_plan(tmp_path, monkeypatch):
    """Search's numbers for Nano are Plan's, layout by layout, over every pipeline degree it
    lists; no layout it lists splits the pattern unevenly or interleaves it."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    hw = an.hardware("h100-sxm")
    res = an.search(NANO, hw, gpus=16, seq_len=4096, global_batch=64, progress=False)
    arrays = res.arrays
    assert set(np.unique(arrays["pp"])) == {1, 2, 4}
    assert set(np.unique(arrays["vpp"])) == {1}
    rng = np.random.default_rng(2)
    for j in rng.choice(len(arrays["memory"]), size=12, replace=False):
        plan = res.row(j).plan(an.model(NANO), hw, seq_len=4096, global_batch=64)
        assert arrays["memory"][j] == pytest.approx(
            plan.memory().total.to("byte").magnitude, rel=1e-9
        )
        assert arrays["step_time"][j] == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)


def test_the_mtp_module_sits_on_the_last_stage():
    """Nemotron 3 Super's last of four stages holds "MEM*EMEMEMEM*EMEMEMEME" (10 Mamba-2, 10 MoE, 2
    attention layers) and the MTP module's attention and MoE layers; the stage before it the same
    count of its own 22 without them."""
    plan = an.Plan("nemotron-3-super", "gb200-nvl72", an.Layout(pp=4, dp=1), seq_len=4096,
                   global_batch=16)
    rows = stage_split.table(plan._in)
    assert (rows[3]["M"], rows[3]["E"], rows[3]["*"]) == (10, 11, 3)
    assert (rows[2]["M"], rows[2]["E"], rows[2]["*"]) == (10, 10, 2)
    assert plan.layers_by_stage() == [22, 22, 22, 22]


#: Nano's pattern with '|' marks: 8 segments, segment v·4 + r on rank r as its chunk v
MARKED = "MEMEM*E|MEMEM*|EMEMEM*|EMEMEM|*EMEMEM|*EMEME|MEM*EME|MEMEME"


def test_a_marked_pattern_places_its_segments():
    """Rank 0 holds segments 0 and 4, "MEMEM*E" and "*EMEMEM": 6 Mamba-2, 6 MoE and 2 attention
    layers; rank 1 "MEMEM*" and "*EMEME": 5, 5 and 2; rank 2 "EMEMEM*" and "MEM*EME": 6, 6 and 2;
    rank 3 "EMEMEM" and "MEMEME": 6, 6 and 0."""
    plan = _nano(pp=4, vpp=2, dp=1, schedule="interleaved", pipeline_layout=MARKED)
    assert MARKED.replace("|", "") == plan.model.layer_pattern
    got = [(k["M"], k["E"], k["*"]) for k in stage_split.table(plan._in)]
    assert got == [(6, 6, 2), (5, 5, 2), (6, 6, 2), (6, 6, 0)]
    assert plan.layers_by_stage() == [14, 12, 14, 12]


@pytest.mark.parametrize(
    "marks, split",
    [("|".join(NANO_STAGES), {}),
     ("MEMEM*EMEM|EM*EMEMEM*EMEM|EM*EMEMEM*EMEM|EMEM*EMEMEMEME",
      dict(first_stage_layers=10, last_stage_layers=14))],
)
def test_marks_of_megatron_cores_splits_are_those_splits(marks, split):
    """A pattern marked where the even split, or first_stage_layers 10 and last 14, cut it plans as
    that split: each stage's memory and the step, through the plan's expressions rather than its
    structure's programs."""
    lay = dict(tp=2, pp=4, dp=2, ep=2, sequence_parallel=True)
    marked, split_plan = _nano(**lay, pipeline_layout=marks), _nano(**lay, **split)
    for a, b in zip(marked.memory_by_stage(), split_plan.memory_by_stage()):
        want = b.total.to("byte").magnitude
        assert a.total.to("byte").magnitude == pytest.approx(want, rel=1e-12)
    want = split_plan.step_time().magnitude
    assert marked.step_time().magnitude == pytest.approx(want, rel=1e-12)


def test_interleaving_a_marked_pattern_halves_the_bubble():
    """Two chunks a stage: the bubble of the same stages is half the one-chunk pipeline's."""
    one = _nano(tp=2, pp=4, dp=2, ep=2, sequence_parallel=True)
    two = _nano(tp=2, pp=4, vpp=2, dp=2, ep=2, sequence_parallel=True, schedule="interleaved",
                pipeline_layout=MARKED)
    bubble = [p.time_breakdown()["bubble"].to("s").magnitude for p in (one, two)]
    assert bubble[1] == pytest.approx(bubble[0] / 2, rel=1e-12)


@pytest.mark.parametrize(
    "layout, error, needle",
    [
        (dict(pp=2, vpp=2, pipeline_layout=MARKED), LayoutError, "8 segments, not pp 2"),
        (dict(pp=4, vpp=2, pipeline_layout=MARKED.replace("M", "E", 1)), LayoutError,
         "not nemotron-3-nano's pattern"),
        (dict(pp=2, pipeline_layout="Et|tL"), LayoutError, "its pattern with '|'"),
        (dict(pp=4, vpp=2, first_stage_layers=5, pipeline_layout=MARKED), LayoutError,
         "'|' marks place"),
        (dict(pp=4, vpp=2, pipeline_layout=MARKED.replace("M", "G", 1)), LayoutError,
         "no layer of a hybrid pattern"),
    ],
)
def test_marks_megatron_core_refuses_are_refused(layout, error, needle):
    with pytest.raises(error, match=needle):
        _nano(dp=1, schedule="interleaved" if layout.get("vpp", 1) > 1 else "1f1b", **layout)


def test_a_transformer_refuses_a_marked_pattern():
    with pytest.raises(LayoutError, match="hybrid model's layout"):
        an.Plan("llama3-8b", "h100-sxm", an.Layout(pp=2, dp=1, pipeline_layout="M*|M*"),
                seq_len=4096, global_batch=16)


def test_search_with_a_marked_pattern_is_plan(tmp_path, monkeypatch):
    """Search given the marked pattern and pp 4: every layout runs its two chunks a stage
    interleaved, its numbers Plan's."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    hw = an.hardware("h100-sxm")
    res = an.search(NANO, hw, gpus=16, seq_len=4096, global_batch=64, pipeline_layout=MARKED,
                    pp=4, progress=False)
    arrays = res.arrays
    assert set(np.unique(arrays["vpp"])) == {2} and len(arrays["vpp"]) > 0
    for j in np.random.default_rng(3).choice(len(arrays["memory"]), size=6, replace=False):
        plan = res.row(j).plan(an.model(NANO), hw, seq_len=4096, global_batch=64)
        assert plan.layout.pipeline_layout == MARKED
        assert arrays["memory"][j] == pytest.approx(
            plan.memory().total.to("byte").magnitude, rel=1e-9
        )
        assert arrays["step_time"][j] == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)



def test_with_pp_a_symbol_a_stage_holds_the_mean_layer():
    """The expression with pp open holds the pattern's mean layer on every stage; at one stage
    that is the whole pattern, the numeric plan's."""
    open_pp = _nano(pp=an.sym("pp"), dp=1).expr("memory.total")
    one = _nano(pp=1, dp=1).memory().total.to("byte").magnitude
    assert open_pp.subs(pp=1).value().to("byte").magnitude == pytest.approx(one, rel=1e-12)


def test_the_command_line_prints_each_stages_layers(capsys):
    """`analytic memory --stages` gives each stage's layers beside its memory; a layout that does
    not split the pattern is one line and exit 2."""
    flags = ["--model", NANO, "--hardware", "h100-sxm", "--gpus", "8", "--pp", "4", "--vpp", "2",
             "--schedule", "interleaved", "--seq", "4096", "--global-batch", "16"]
    assert main(["memory", "--json", "--stages", "--pipeline-layout", MARKED, *flags]) == 0
    stages = json.loads(capsys.readouterr().out)["stages"]
    assert [s["layers"] for s in stages] == [14, 12, 14, 12]
    assert main(["memory", "--pipeline-layout", MARKED[:-2], *flags]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "pipeline_layout" in err


def test_under_dualpipe_a_stages_row_counts_its_ranks_layers(capsys):
    """Llama 3 8B on four stages under DualPipe: each rank holds its stage's 8 layers and the
    mirrored stage's 8, as its memory row holds both."""
    flags = ["--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8", "--pp", "4",
             "--schedule", "dualpipe", "--stack", "hai-llm", "--seq", "4096",
             "--global-batch", "16"]
    assert main(["memory", "--json", "--stages", *flags]) == 0
    assert [s["layers"] for s in json.loads(capsys.readouterr().out)["stages"]] == [16] * 4
