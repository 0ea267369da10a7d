"""The imbalance of MoE routing: the busiest expert-parallel rank's share of the routed tokens,
given as a number or by name, and the dropless value fitted on published pairs of runs
(validation/routing.toml)."""

import json
from pathlib import Path

import pytest

import analytic as an
from analytic.cli.main import main
from analytic.fit import routing
from analytic.fit.cases import plan_of
from analytic.presets import dropless_imbalance

HERE = Path(__file__).parent.parent / "validation"
KW = dict(seq_len=4096, global_batch=64)
EP8 = an.Layout(dp=8, ep=8, zero=1)


def _plan(layout=EP8, model="qwen3-235b-a22b", **kw):
    return an.Plan(model, "h100-sxm", layout, **KW, **kw)


def test_the_busiest_rank_saves_and_receives_its_share_times_the_imbalance():
    """Qwen3-235B-A22B at EP 8, no TP or pipeline: each of the 94 MoE layers saves 2k·h bytes of a
    token's routed copies and 6k·h_e of its experts' gate, up and product
    (memory.activations.mlp_moe), so the busiest rank at imbalance 2 holds 94 · 4,096 · (6 · 1,536 +
    2 · 4,096) · 8 bytes more (hand count), and its all-to-alls move twice the bytes; the FLOPs do
    not change, the MFU falls as the step lengthens."""
    balanced, skewed = _plan(), _plan(routing_imbalance=2)
    extra = round(skewed.memory().activations.m_as("byte")) - round(
        balanced.memory().activations.m_as("byte")
    )
    assert extra == 94 * 4096 * (6 * 1536 + 2 * 4096) * 8
    assert (skewed.communication()["ep"] / balanced.communication()["ep"]).to(
        ""
    ).magnitude == pytest.approx(2, rel=1e-12)
    assert (
        skewed.model_flops() == balanced.model_flops()
        and skewed.hardware_flops() == balanced.hardware_flops()
    )
    ratio = (skewed.step_time() / balanced.step_time()).to("").magnitude
    assert ratio > 1.2 and skewed.mfu() == pytest.approx(balanced.mfu() / ratio, rel=1e-12)


def test_a_rank_that_holds_every_expert_has_no_busiest_rank():
    """At EP 1 every rank runs every expert on its own tokens' copies, however they are routed: the
    imbalance changes nothing, in numbers and in a symbolic EP alike."""
    full = an.Layout(dp=64, zero=3, recompute="full")
    assert _plan(full, routing_imbalance=3).step_time() == _plan(full).step_time()
    free = _plan(an.Layout(dp=8, ep=an.sym("ep"), zero=1), routing_imbalance=2).expr("step_time")
    for ep in (1, 8):
        assert free.evaluate(ep=ep).to("s").magnitude == pytest.approx(
            _plan(an.Layout(dp=8, ep=ep, zero=1), routing_imbalance=2)
            .step_time()
            .to("s")
            .magnitude,
            rel=1e-12,
        )
    # the expression's arithmetic in sympy's order: the same value to the last two bits
    assert free.evaluate(ep=1).to("s").magnitude == pytest.approx(
        _plan(an.Layout(dp=8, ep=1, zero=1)).step_time().to("s").magnitude, rel=1e-15
    )


def test_an_imbalance_by_name_is_the_number_it_stands_for():
    """By name: "balanced" is 1 (the default); "dropless" is the shipped calibration's fitted value,
    and the plan says so."""
    fitted = dropless_imbalance()["qwen3-235b-a22b"]["imbalance"]
    assert _plan(routing_imbalance="balanced").step_time() == _plan().step_time()
    named, number = _plan(routing_imbalance="dropless"), _plan(routing_imbalance=fitted)
    assert named.step_time() == number.step_time()
    assert any(n.startswith(f"routing_imbalance: dropless, {fitted:.3f}") for n in named.notes)
    assert (
        named.replace(global_batch=128).step_time() == number.replace(global_batch=128).step_time()
    )


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(model="llama3-8b", routing_imbalance=1.5), "llama3-8b is dense"),
        (dict(routing_imbalance=0.5), "expected a number ≥ 1, got 0.5"),
        (
            dict(routing_imbalance="skewed"),
            "expected 'balanced' or 'dropless' or a number ≥ 1, got 'skewed'",
        ),
        (dict(routing_imbalance=1.5, expert_capacity=1.25), "give one of the two"),
    ],
)
def test_an_imbalance_that_cannot_be_is_refused(kw, message):
    with pytest.raises(an.InputError, match=message):
        _plan(**kw)


def test_dropless_is_refused_for_a_model_without_runs_of_its_own():
    """The imbalance is a model's routing's: a model no pair measured gets a clear error naming the
    models fitted, not another model's value."""
    shipped = dropless_imbalance()
    qwen3, mixtral = (shipped[m]["imbalance"] for m in ("qwen3-235b-a22b", "mixtral-8x22b"))
    fitted = f"fitted by model.*qwen3-235b-a22b {qwen3:.2f}.*mixtral-8x22b {mixtral:.2f}"
    with pytest.raises(an.InputError, match=fitted):
        _plan(model="qwen3-30b-a3b", routing_imbalance="dropless")


def test_the_shipped_dropless_imbalance_is_what_its_pairs_give():
    """calibration.toml's [routing.dropless] is, for each model, the mean of its pairs, each solved
    again here, with its standard error where it has several; at each pair's solution the pair's
    measured ratio lies between the plan's step ratios just below and just above it (GEMMs quantised
    in waves make the step a staircase in the imbalance: Mixtral's one expert a rank jumps past it),
    within 2%."""
    shipped = dropless_imbalance()
    found = routing.pairs(HERE)
    each = {p["id"]: routing.solved(p) for p in found}
    for name in {p["model"] for p in found}:
        values = [each[p["id"]] for p in found if p["model"] == name]
        mean = sum(values) / len(values)
        assert shipped[name]["imbalance"] == pytest.approx(mean, abs=2e-6)
        assert shipped[name]["pairs"] == len(values)
        ends = (shipped[name]["low"], shipped[name]["high"])
        assert ends == pytest.approx((min(values), max(values)), abs=2e-6)
        if len(values) > 1:
            spread = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
            assert shipped[name]["stderr"] == pytest.approx(spread / len(values) ** 0.5, abs=2e-6)
        else:
            assert "stderr" not in shipped[name]
    for p in found:
        balanced = plan_of(p["plan"]).step_time()
        below, above = (
            (plan_of(p["plan"], routing_imbalance=each[p["id"]] * f).step_time() / balanced)
            .to("")
            .magnitude
            for f in (1 - 1e-6, 1 + 1e-6)
        )
        assert below / 1.02 <= p["ratio"] <= above * 1.02, p["id"]


def test_each_pair_is_predicted_from_its_models_other_pairs_and_not_from_another_model():
    """With one pair left out, the mean imbalance of its model's other three predicts its dropless
    throughput within 6% (Qwen3-235B-A22B at 16K to 128K tokens, CP 1 to 8: the imbalance does not
    follow the sequence's length or the context parallelism); the error is the throughput's, counted
    here again for the first pair. Another model's value does not carry: Mixtral 8x22B's (1.03)
    predicts Qwen3's dropless runs 9-23% too fast, and Qwen3's (1.87) Mixtral's 34% too slow."""
    errors = routing.leave_one_out(HERE)
    assert len(errors) == 4 and all(abs(e) < 0.06 for e in errors.values())
    found = routing.pairs(HERE)
    rest = [routing.solved(p) for p in found[1:4]]
    balanced = plan_of(found[0]["plan"]).step_time()
    dropless = plan_of(found[0]["plan"], routing_imbalance=sum(rest) / 3).step_time()
    forced, measured = 295, 237  # TFLOP/s, the pair's table row
    predicted = forced * (balanced / dropless).to("").magnitude
    assert errors[found[0]["id"]] == pytest.approx(predicted / measured - 1, rel=1e-9)
    across = routing.leave_one_out(HERE, across=True)
    assert all(0.08 < e < 0.24 for k, e in across.items() if "qwen3" in k)
    assert -0.35 < across["MZOO-mixtral-8x22b"] < -0.33


def test_a_pair_whose_dropless_run_is_faster_is_refused(tmp_path):
    text = (
        (HERE / routing.PAIRS_FILE)
        .read_text()
        .replace('dropless = "237 TFLOP/s"', 'dropless = "300 TFLOP/s"')
    )
    (tmp_path / routing.PAIRS_FILE).write_text(text)
    refused = "MZOO-qwen3-235b-16k: dropless routing faster than balanced"
    with pytest.raises(an.InputError, match=refused):
        routing.pairs(tmp_path)


def test_the_command_line_and_search_take_the_imbalance(capsys):
    """`analytic step --routing-imbalance dropless` prints the API's step; search counts its layouts
    with it and its rows build their plans with it."""
    flags = (
        "--model qwen3-235b-a22b --hardware h100-sxm --gpus 8 --ep 8 --zero 1 --seq 4096"
        " --global-batch 64 --routing-imbalance dropless --json"
    ).split()
    assert main(["step", *flags]) == 0
    lines = json.loads(capsys.readouterr().out)["lines"]
    assert next(x["value"] for x in lines if x["key"] == "step_time") == pytest.approx(
        _plan(routing_imbalance="dropless").step_time().to("s").magnitude, rel=1e-12
    )
    found = an.search("qwen3-235b-a22b", "h100-sxm", gpus=256, routing_imbalance="dropless", **KW)
    best = found.best
    assert best.options["routing_imbalance"] == "dropless"
    plan = best.plan("qwen3-235b-a22b", "h100-sxm", **KW)
    assert plan.step_time().to("s").magnitude == pytest.approx(best.step_time, rel=1e-12)
    skewed = next(r for r in found.ranked if r.layout.ep > 1)
    balanced = skewed.plan("qwen3-235b-a22b", "h100-sxm", routing_imbalance="balanced", **KW)
    assert skewed.step_time > balanced.step_time().to("s").magnitude


def test_a_capacity_of_copies_not_whole_is_counted_without_a_template():
    """Experts padded to 1.1 times their share take 8.8 copies of a token: under selective
    recomputation of the norms (a plan without a template) the experts' saved inputs and products
    grow by a tenth of the balanced ones, 94 · 4,096 · (6 · 1,536 + 2 · 4,096) · 8 · 0.1 bytes (hand
    count)."""
    norms = an.Layout(dp=8, ep=8, zero=1, recompute="selective", recompute_modules=("layernorm",))
    padded, dropless = _plan(norms, expert_capacity=1.1), _plan(norms)
    extra = (padded.memory().activations - dropless.memory().activations).m_as("byte")
    assert extra == pytest.approx(94 * 4096 * (6 * 1536 + 2 * 4096) * 8 * 0.1, rel=1e-12)


def test_activations_cached_in_fp8_shrink_with_the_busiest_ranks_copies():
    """With the experts' inputs and SwiGLU tensors cached in FP8 (DeepSeek-V3 §3.3.2), each extra
    copy of a token on the busiest rank saves 6h_e + 2h bytes less 2h_e, h_e and h kept in one byte,
    3h_e + h: 94 · 4,096 · (3 · 1,536 + 4,096) · 8 bytes at imbalance 2 (hand count)."""
    cached = an.Layout(dp=8, ep=8, zero=1, fp8_activations=True)
    balanced = _plan(cached, dtype="fp8")
    skewed = _plan(cached, dtype="fp8", routing_imbalance=2)
    extra = round(skewed.memory().activations.m_as("byte")) - round(
        balanced.memory().activations.m_as("byte")
    )
    assert extra == 94 * 4096 * (3 * 1536 + 4096) * 8


def test_a_shared_expert_adds_its_swiglus_passes_as_a_routed_copy_does():
    """Qwen3-30B-A3B given one and two shared experts: each adds the same memory-bound time (its
    SwiGLU's forward and backward passes over every token), more than none."""
    from analytic.presets import model

    base = model("qwen3-30b-a3b")
    plans = [an.Plan(base.replace(shared_experts=s), "h100-sxm", EP8, **KW) for s in (0, 1, 2)]
    times = [p.value("time.memory_bound").to("s").magnitude for p in plans]
    assert times[1] - times[0] > 0
    assert times[2] - times[1] == pytest.approx(times[1] - times[0], rel=1e-9)


def test_a_plan_that_does_not_fit_lists_the_layouts_that_do_at_its_imbalance(capsys):
    """`analytic step` on a dropless Qwen3-235B-A22B layout that does not fit lists the layouts that
    do as search counts them at the same imbalance (none at EP 1 is slowed), not as balanced routing
    would."""
    flags = (
        "--model qwen3-235b-a22b --hardware h100-sxm --gpus 256 --tp 2 --pp 8 --vpp 4 --ep 32"
        " --etp 1 --sp --ends-as-layers --zero 1 --schedule interleaved --seq 4096 --global-batch"
        " 2048 --routing-imbalance dropless"
    ).split()
    assert main(["step", *flags, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["fitting_layouts"]
    kw = dict(gpus=256, seq_len=4096, global_batch=2048, top=3)
    dropless = an.search("qwen3-235b-a22b", "h100-sxm", routing_imbalance="dropless", **kw).ranked
    balanced = an.search("qwen3-235b-a22b", "h100-sxm", **kw).ranked
    steps = [r.step_time for r in dropless]
    assert [r["step_time_s"] for r in listed] == pytest.approx(steps, rel=1e-12)
    # its third is slower than balanced routing's third (an EP 2 layout, which dropless slows)
    assert listed[2]["step_time_s"] > balanced[2].step_time


def test_a_pair_whose_plan_is_not_a_table_is_refused(tmp_path):
    (tmp_path / routing.PAIRS_FILE).write_text(
        '[[pair]]\nid = "x"\nsource = "s"\nplan = 3\nforced = "2 TFLOP/s"\ndropless = "1 TFLOP/s"\n'
    )
    with pytest.raises(an.InputError, match="a pair needs id, source, plan \\(a table\\)"):
        routing.pairs(tmp_path)
