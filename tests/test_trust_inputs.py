"""No input turns into a confident wrong number: each class of bad input is refused with a typed
error naming the argument, or (for the CLI) one line and exit status 2."""

import contextlib
import io
import json
from decimal import Decimal
from fractions import Fraction

import pint
import pytest
import sympy

import analytic as an
from analytic.cli.main import main

M8, H100 = an.model("llama3-8b"), an.hardware("h100-sxm")


def plan(**kw):
    args = dict(seq_len=8192, global_batch=64) | kw
    layout = args.pop("layout", an.Layout(tp=8, sequence_parallel=True))
    return an.Plan(M8, H100, layout, **args)


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def refused(code, err, *words):
    return code == 2 and len(err.strip().splitlines()) == 1 and all(w in err for w in words)


STEP = (
    "--model",
    "llama3-8b",
    "--hardware",
    "h100-sxm",
    "--gpus",
    "8",
    "--tp",
    "8",
    "--seq",
    "8192",
)


# --- formulas outside their domain
#   ---------------------------------------------------------------------
def test_goodput_below_zero_is_refused_not_returned():
    """The first-order goodput leaves its domain when restarts are long (it would go negative) and
    is refused; a plan uses Daly's exact model, which stays a fraction: a 30-hour restart after
    interruptions every 6.2 hours leaves almost nothing, but not less than nothing."""
    p = an.Plan(
        an.model("llama3-405b"),
        H100,
        an.Layout(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True),
        seq_len=8192,
        global_batch=2048,
        restart_time="30 hour",
        training_tokens="15.6e12 token",
    )
    assert 0 < p.expr("goodput").value().to("").magnitude < 0.01
    with pytest.raises(an.InputError, match="domain"):
        an.formula("reliability.goodput").evaluate(
            checkpoint_time="1 min", mtbf="1 hour", restart_time="3.1 hour"
        )


@pytest.mark.parametrize(
    "name, values",
    [
        ("pipeline.bubble_time.zb_h1", dict(pp=4, t_f="1 s", t_b="1 s", t_w="3 s")),
        ("pipeline.bubble_time.zb_h2", dict(pp=4, t_f="1 s", t_b="1 s", t_w="1.5 s")),
        ("pipeline.bubble_time.dualpipe", dict(pp=1, t_fb="3 s", t_b="1 s", t_w="1 s")),
        ("compute.sm_share", dict(sms=132, comm_sms=140)),
        ("compute.mfu", dict(flops="1e18 FLOP", step_time="1 s", gpus=8, peak_flops="989 TFLOP/s")),
        (
            "reliability.waste_fraction",
            dict(checkpoint_time="1 hour", mtbf="1 hour", restart_time="0 s"),
        ),
    ],
)
def test_formulas_refuse_inputs_outside_their_domain(name, values):
    f = an.formula(name)
    with pytest.raises(an.InputError, match=f"{name}: outside the formula's domain"):
        f.evaluate(**{k: values[k] for k in f.symbols})


def test_the_critical_path_bound_is_never_negative():
    f = an.formula("pipeline.bubble_time.critical_path")
    # p = 4, m = 16, equal unit times: the chain 4·2 + 1 = 9 s is far below the stage's 48 s of work
    assert f.evaluate(pp=4, vpp=1, microbatches=16, t_f="1 s", t_b="1 s", t_w="1 s").magnitude == 0
    assert (
        f.evaluate(pp=4, vpp=1, microbatches=1, t_f="1 s", t_b="1 s", t_w="1 s").magnitude == 9 - 3
    )


def test_an_mfu_above_one_is_an_impossible_step_time():
    p = plan()
    with pytest.raises(an.InputError, match="MFU above 1"):
        p.mfu(step_time="1 ms")
    assert 0 < p.mfu(step_time=p.step_time()) <= 1


# --- overrides have domains
#   -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "override, words",
    [
        (dict(matmul_efficiency=2), "matmul_efficiency"),
        (dict(matmul_efficiency=0), "matmul_efficiency"),
        (dict(matmul_efficiency=Decimal("Infinity")), "matmul_efficiency"),
        (dict(gpus_per_node=0), "gpus_per_node"),
        (dict(gpus_per_node=2.5), "gpus_per_node"),
        (dict(sms=2.5), "sms"),
        (dict(link_efficiency=5), "link_efficiency"),
        (dict(overlap=5), "overlap"),
        (dict(peak_flops="0 FLOP/s"), "peak_flops"),
        (dict(scale_out_bandwidth="0 GB/s"), "scale_out_bandwidth"),
        (dict(latency="-1 us"), "latency"),
        (dict(interruption_rate="0 1/hour"), "interruption_rate"),
    ],
)
def test_every_override_has_a_domain(override, words):
    with pytest.raises(an.InputError, match=words):
        plan(**override)


def test_a_count_given_as_text_is_read_as_one():
    assert plan(sms="132").step_time() == plan(sms=132).step_time()


# --- Formula.evaluate: every symbol's domain, numbers and sympy numbers alike
#   ---------------------------
AR = dict(message="268 MB", ranks=8, bandwidth="450 GB/s", latency="5 us")


@pytest.mark.parametrize(
    "bad",
    [
        dict(ranks=0.5),
        dict(ranks=2.5),
        dict(ranks=Fraction(1, 3)),
        dict(ranks=0),
        dict(ranks=sympy.Integer(-5)),
        dict(ranks=sympy.oo),
        dict(ranks=sympy.zoo),
        dict(ranks=sympy.nan),
        dict(ranks=sympy.Rational(5, 2)),
        dict(latency="-5 us"),
        dict(message=sympy.Float(-1.0)),
        dict(ranks=10**400),
    ],
)
def test_evaluate_enforces_each_symbols_domain(bad):
    with pytest.raises(an.InputError, match=next(iter(bad))):
        an.formula("collectives.all_reduce.time").evaluate(**(AR | bad))


def test_symbolic_choices_take_only_their_indices():
    sym_plan = an.Plan(
        M8,
        H100,
        an.Layout(
            tp=8, sequence_parallel=True, zero=an.sym("zero"), recompute=an.sym("recompute"),
            schedule=an.sym("schedule"),
        ),
        seq_len=8192,
        global_batch=64,
    )
    mem = sym_plan.expr("memory.total")
    for bad in (dict(zero=7), dict(recompute=9), dict(schedule=42), dict(zero=1.5), dict(zero=-1)):
        with pytest.raises(an.InputError, match=next(iter(bad))):
            mem.evaluate(**(dict(zero=1, recompute=0, schedule=0) | bad))
    assert (
        mem.evaluate(zero=1, recompute=0, schedule=0)
        == plan(layout=an.Layout(tp=8, sequence_parallel=True, zero=1)).memory().total
    )


# --- strings: one number, one unit
#   --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "keyword, text",
    [
        ("latency", "5 us 3"),
        ("bandwidth", "450 GB/s 2"),
        ("ranks", "8 8"),
        ("bandwidth", "9**9**9 GB/s"),
        ("ranks", "10**10**10"),
        ("bandwidth", "2 * 3 GB/s"),
        ("latency", "5 us" + " " * 200),
    ],
)
def test_a_string_is_one_number_with_one_unit(keyword, text):
    with pytest.raises(an.UnitError, match=keyword):
        an.formula("collectives.all_reduce.time").evaluate(**(AR | {keyword: text}))


def test_no_string_reaches_pints_expression_evaluator(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("parse_expression called")

    monkeypatch.setattr(pint.get_application_registry().get(), "parse_expression", boom)
    t = an.formula("collectives.all_reduce.time").evaluate(
        message="268 MB", ranks="8", bandwidth="3600 Gbit/s", latency="0.005 ms"
    )
    assert t.to("s").magnitude == pytest.approx(2 * 7 / 8 * 268e6 / 450e9 + 2 * 7 * 5e-6, rel=1e-12)


# --- quantities of another registry
#   ---------------------------------------------------------------------------
def test_a_foreign_registrys_quantity_is_converted_by_its_unit():
    theirs = pint.UnitRegistry()  # bits are dimensionless there
    with pytest.raises(an.UnitError, match="dp"):
        an.formula("memory.model_states.zero1").evaluate(params=1e9, dp=theirs.Quantity(1, "kB"))
    ours = an.formula("memory.logits").evaluate(
        seq_len=8192, microbatch_size=1, vocab=128256, element_bytes="2 byte"
    )
    assert (
        an.formula("memory.logits").evaluate(
            seq_len=8192, microbatch_size=1, vocab=128256, element_bytes=theirs.Quantity(2, "byte")
        )
        == ours
    )
    t = an.formula("collectives.all_reduce.time").evaluate(
        **(AR | {"message": theirs.Quantity(268, "MB")})
    )
    assert t == an.formula("collectives.all_reduce.time").evaluate(**AR)


# --- booleans are booleans
#   --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda: an.Model(
            layers=2, hidden=64, heads=4, vocab=100, max_seq_len=64, tied_embeddings="no"
        ),
        lambda: an.Model(layers=2, hidden=64, heads=4, vocab=100, max_seq_len=64, bias="no"),
        lambda: an.search(M8, H100, gpus=8, seq_len=2048, global_batch=8, async_tp="no"),
        lambda: plan(flash_attention="no"),
        lambda: plan(allow_cross_node_tp=1),
        lambda: an.Layout(tp=2, sequence_parallel="yes"),
    ],
)
def test_a_flag_takes_a_bool_only(make):
    with pytest.raises(an.InputError, match="expected True or False"):
        make()


# --- the CLI reads counts exactly and says what it reinterpreted
#   ------------------------------------------------
@pytest.mark.parametrize(
    "flag, value",
    [
        ("--global-batch", "9007199254740993"),
        ("--global-batch", "1e30"),
        ("--global-batch", "64.5"),
        ("--batch-tokens", "1e400"),
        ("--microbatch-size", "2 2"),
    ],
)
def test_cli_counts_are_exact_or_refused(flag, value):
    batch = ("--global-batch", "64") if flag == "--microbatch-size" else ()
    code, _, err = run("step", *STEP, *batch, flag, value)
    assert refused(code, err, flag.lstrip("-").split("-")[0])


def test_cli_counts_with_suffixes_are_exact():
    code, out, _ = run(
        "memory", *STEP[:4], "--gpus", "8Ki", "--tp", "8", "--pp", "32", "--seq", "8192",
        "--global-batch", "1Ki", "--json",
    )
    assert code == 0 and "note" not in out.split('"notes"')[0]


@pytest.mark.parametrize("command", ["memory", "step", "search"])
def test_a_reinterpreted_batch_is_noted_in_every_output(command, tmp_path, monkeypatch):
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    argv = (
        "--model llama3-8b --hardware h100-sxm --gpus 8 --seq 8192 --batch-tokens 1.5M"
    ).split() + (["--tp", "8"] if command != "search" else ["--top", "1"])
    for json_flag in ([], ["--json"]):
        code, out, _ = run(command, *argv, *json_flag)
        assert code == 0
        notes = (
            json.loads(out)["notes"]
            if json_flag
            else [ln for ln in out.splitlines() if ln.startswith("note:")]
        )
        assert len(notes) == 1 and "1.5 Mi" in notes[0] and "1,572,864 tokens" in notes[0]


# --- accepted but impossible
#   ----------------------------------------------------------------------------------------
def test_interleaving_needs_a_pipeline():
    code, _, err = run("step", *STEP, "--global-batch", "64", "--vpp", "2")
    assert refused(code, err, "pp")
    with pytest.raises(an.LayoutError, match="pp"):
        an.Layout(pp=1, vpp=2, schedule="interleaved")


def test_an_expert_ffn_of_zero_is_refused_not_replaced():
    with pytest.raises(an.InputError, match="expert_ffn_hidden"):
        an.Model(
            layers=2, hidden=64, heads=4, vocab=100, position="rope", mlp="swiglu", experts=8,
            topk=2, expert_ffn_hidden=0,
        )


@pytest.mark.parametrize(
    "kw",
    [
        dict(microbatch_sizes=(2, 2, 2)),
        dict(zero=(1, 1)),
        dict(recompute=("none", "none")),
        dict(schedules=()),
        dict(vpps=(2, 2)),
        dict(zero="1"),
        dict(zero=(True,)),
    ],
)
def test_search_choices_are_distinct_and_real(kw):
    with pytest.raises(an.InputError, match=next(iter(kw)).rstrip("s")):
        an.search(M8, H100, gpus=8, seq_len=2048, global_batch=8, progress=False, **kw)


def test_an_empty_dtype_is_not_bf16():
    code, _, err = run("step", *STEP, "--global-batch", "64", "--dtype", "")
    assert refused(code, err, "dtype")


# --- crashes and hangs become one line
#   --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, words",
    [
        (("step", *STEP, "--batch-tokens", "1e400"), "--batch-tokens"),
        (("plot", "bubble", "--pp", "1e308", "--out", "b.png"), "--pp"),
        (
            ("step", *STEP, "--global-batch", "64", "--scale-out-bandwidth", "1e-310 GB/s"),
            "scale_out_bandwidth",
        ),
        (
            ("step", *STEP, "--global-batch", "64", "--scale-out-bandwidth", "0 GB/s"),
            "scale_out_bandwidth",
        ),
        (
            ("step", *STEP, "--global-batch", "64", "--scale-up-bandwidth", "1e400 GB/s"),
            "scale_up_bandwidth",
        ),
        (
            (
                "formula",
                "memory.model_states.zero1",
                "--set",
                "dp=10**10**10",
                "--set",
                "params=1e9",
            ),
            "dp",
        ),
        (("formula", "collectives.all_reduce.time", "--set", "message=9**9**9 GB/s"), "message"),
        (("formula", "memory.model_states.zero1", "--set", "params=" + "9" * 100_000), "params"),
    ],
)
def test_overflow_and_oversized_inputs_are_one_line(argv, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(*argv)
    assert refused(code, err, words)


def test_large_magnitudes_are_refused_not_overflowed():
    with pytest.raises(an.InputError, match="global_batch"):
        plan(global_batch=10**400)
    with pytest.raises(an.InputError, match="peak_flops"):
        plan(peak_flops="1e-301 FLOP/s")


def test_foreign_exceptions_are_library_errors(tmp_path):
    with pytest.raises(an.UnitError, match="banana"):
        an.formula("memory.model_states.zero1").to("banana")
    symbolic_model = M8.replace(layers=an.sym("layers"))
    with pytest.raises(an.InputError, match="layers"):
        an.search(symbolic_model, H100, gpus=8, seq_len=2048, global_batch=8, progress=False)
    with pytest.raises(an.UnitError, match="sms"):
        plan(sms="132 GB")


@pytest.mark.parametrize(
    "text, per_hour",
    [
        ("1e-6/hour", 1e-6),
        ("1e-6 1/hour", 1e-6),
        ("2 / hour", 2),
        ("1/s", 3600),
        ("3.6e3 hour**-1", 3600),
    ],
)
def test_the_forms_of_one_unit(text, per_hour):
    """A unit may be a quotient or a power of names: still one number and one unit."""
    rate = an.formula("reliability.mtbf").evaluate(interruption_rate=text, gpus=1)
    assert rate.to("hour").magnitude == pytest.approx(1 / per_hour, rel=1e-12)


def test_rotary_embeddings_need_an_even_number_of_dimensions():
    """RoPE rotates pairs of dimensions (RoFormer §3.2): a RoPE model whose heads have an odd
    dimension is refused, as is an MLA model with an odd rotary part; ALiBi and learned positions
    rotate nothing, and MLA's head_dim is not the rotated part."""
    with pytest.raises(
        an.InputError, match="head_dim: rotary embeddings rotate pairs of dimensions; 3 is odd"
    ):
        an.Model(layers=2, hidden=96, heads=32, vocab=1000, position="rope", mlp="swiglu")
    assert (
        an.Model(layers=2, hidden=96, heads=48, vocab=1000, position="rope", mlp="swiglu").head_dim
        == 2
    )
    assert an.Model(layers=2, hidden=96, heads=32, vocab=1000, position="alibi").head_dim == 3
    with pytest.raises(
        an.InputError, match="rope_dim: rotary embeddings rotate pairs of dimensions; 63 is odd"
    ):
        an.model("deepseek-v3").replace(rope_dim=63)
    assert an.model("deepseek-v3").replace(head_dim=129).head_dim == 129


# --- a value read without sympy
#   --------------------------------------------------------------------------- the float's shortest
#   decimal, not its binary value
@pytest.mark.parametrize(
    "keyword, value, want",
    [
        ("scale_up_bandwidth", "50 GB/s", 50_000_000_000),
        ("scale_out_bandwidth", "400 Gbit/s", 50_000_000_000),
        ("scale_out_bandwidth", an.Q_(3.2, "Tbit/s"), 400_000_000_000),
        ("scale_up_latency", "1.5 us", Fraction(3, 2_000_000)),
        ("matmul_efficiency", 0.1, Fraction(1, 10)),
        ("matmul_efficiency", "40 %", Fraction(2, 5)),
        ("hbm", an.Q_(80, "GiB"), 85_899_345_920),
        ("layers", 126.0, 126),
    ],
)
def test_a_value_is_read_exactly_in_its_symbols_unit(keyword, value, want):
    from analytic.core.symbols import read_magnitude

    got = read_magnitude(keyword, value)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize(
    "keyword, value, error",
    [
        ("hbm", 80, an.UnitError),  # bytes: GB or GiB? a bare number is refused
        ("hbm", "80 s", an.UnitError),
        ("matmul_efficiency", 1.5, an.InputError),
        ("layers", 2.5, an.InputError),
        ("layers", float("nan"), an.InputError),
    ],
)
def test_a_value_outside_its_unit_or_domain_is_refused_without_sympy(keyword, value, error):
    from analytic.core.symbols import read_magnitude

    with pytest.raises(error, match=keyword):
        read_magnitude(keyword, value)


@pytest.mark.parametrize(
    "argv, line",
    [
        (["step", "--tp", ""], "--tp: expected a value, got ''"),
        (["step", "--model", " ", "--hardware", "h100-sxm"], "--model: expected a value, got ' '"),
        (
            ["formula", "compute.mfu", "--set", "step_time=1 s", "--set", "step_time=2 s"],
            "--set: step_time given twice ('1 s' and '2 s')",
        ),
        (
            [
                "formula",
                "compute.train_time",
                "--set",
                "flops=1e24",
                "--set",
                "gpus=1000",
                "--set",
                "peak_flops=1e15 FLOP/s",
                "--set",
                "mfu=0.4",
                "--unit",
                "day*9**9**9",
            ],
            "--unit: 'day*9**9**9' is not a unit",
        ),
        (
            ["solve", "bubble", "--target", "1e-15", "--pp", "16"],
            "needs 1.5e+16 microbatches, more than a count can hold",
        ),
        (["solve", "bubble", "--target", "1e-50", "--pp", "16"], "more than a count can hold"),
    ],
    ids=["empty-count", "blank-name", "repeated-set", "unit-tower", "bubble-1e-15", "bubble-1e-50"],
)
def test_what_a_flag_cannot_mean_is_one_line(argv, line):
    code, out, err = run(*argv)
    assert code == 2 and len(err.strip().splitlines()) == 1 and line in err, err


def test_a_search_limit_that_would_fill_memory_is_refused():
    plan = an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(tp=an.sym("tp"), dp=8),
        seq_len=4096, global_batch=64,
    )
    with pytest.raises(an.InputError, match="^limit: .*at most 4,194,304"):
        plan.best("tp", limit=2**40)
    assert plan.best("tp", limit=8) in (1, 2, 4, 8)


def test_step_json_gives_the_mfu_exactly():
    """The story's JSON numbers are the plan's, not the text's four digits."""
    code, out, err = run("step", "--json")
    mfu = next(line["value"] for line in json.loads(out)["lines"] if line["key"] == "mfu")
    plan = an.Plan(
        an.model("llama3-405b"),
        an.hardware("h100-sxm"),
        an.Layout(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True),
        seq_len=8192,
        global_batch=2048,
    )
    assert code == 0 and mfu == plan.mfu() and mfu != round(mfu, 4)


def test_step_and_search_refuse_a_scale_up_domain_that_splits_a_node_alike():
    flags = (
        "--model llama3-8b --hardware h100-sxm --gpus 64 --seq 4096 --global-batch 64"
        " --scale-up-domain 12"
    ).split()
    errors = {run(command, *flags)[2].strip() for command in ("step", "search")}
    assert errors == {"analytic: scale_up_domain: 12 is not a whole number of nodes of 8 GPUs"}


def test_a_huge_name_is_quoted_short():
    for lookup in (an.model, an.hardware, an.formula, an.stack):
        with pytest.raises(an.UnknownNameError) as caught:
            lookup("x" * 100_000)
        assert len(str(caught.value)) < 400
    code, out, err = run("step", "--model", "q" * 100_000, "--hardware", "h100-sxm")
    assert code == 2 and len(err) < 1100 and len(err.strip().splitlines()) == 1


def test_the_documented_offload_share_of_0_and_suffixed_token_counts_are_read():
    """--offload-optimizer 0 is 'none', as documented; --tokens 15.6T is the count the user typed,
    and a mistake in it is quoted as typed."""
    flags = "--model llama3-8b --hardware h100-sxm --gpus 8 --seq 4096 --global-batch 64".split()
    assert run("step", *flags, "--offload-optimizer", "0")[0] == 0
    assert an.Layout(offload_optimizer="0").offload_optimizer == 0
    code, out, err = run("step", *flags, "--tokens", "15.6T", "--json")
    steps = next(line["value"] for line in json.loads(out)["lines"] if line["key"] == "steps")
    assert code == 0 and steps == round(15.6e12 / (64 * 4096))
    code, out, err = run("step", *flags, "--tokens", "15.6X")
    assert code == 2 and err.strip() == "--tokens: expected an integer ≥ 1, got '15.6X'"


@pytest.mark.parametrize(
    "stack, hardware, layout, dtype, what",
    [
        (
            "deepspeed",
            "a100-80g",
            dict(pp=4, dp=2, zero=2),
            "bf16",
            "ZeRO 1 at most with pipeline parallelism",
        ),
        ("megatron-lm-2021", "a100-80g", dict(cp=2, dp=4), "bf16", "no context parallelism"),
        (
            "megatron-lm-2021",
            "a100-80g",
            dict(pp=4, dp=2, schedule="zb-h1"),
            "bf16",
            "runs 1f1b, interleaved, not zb-h1",
        ),
        ("megatron-lm-2021", "h100-sxm", dict(dp=8), "fp8", "trains in fp16, bf16, not fp8"),
    ],
)
def test_a_stack_runs_only_what_its_framework_supports(stack, hardware, layout, dtype, what):
    """Framework constraints are stack data (presets/stacks.toml, each with its source): Plan
    refuses what the stack does not run, naming it, and search never ranks such a layout."""
    flash, model = stack != "megatron-lm-2021", (
        "llama3-8b" if stack != "megatron-lm-2021" else "gpt3-175b"
    )
    kw = dict(seq_len=2048, global_batch=64, stack=stack, dtype=dtype, flash_attention=flash)
    with pytest.raises(an.InputError, match=what):
        an.Plan(model, hardware, an.Layout(**layout), **kw)
    if set(layout) == {"dp"}:  # the whole stack in that dtype: search refuses as Plan does
        with pytest.raises(an.InputError, match=what):
            an.search(model, hardware, gpus=8, **kw)
        return
    # a layout refusal: those layouts are left out
    a = an.search(model, hardware, gpus=8, at_limit=True, **kw).arrays
    schedules = {an.plan.SCHEDULES[int(i)] for i in a["schedule"]}
    assert len(a["pp"]) and (a["pp"] > 1).any()
    if stack == "deepspeed":
        assert (
            not ((a["pp"] > 1) & (a["zero"] > 1)).any()
            and (a["zero"] > 1).any()
            and schedules == {"1f1b"}
        )
    else:
        assert not (a["cp"] > 1).any() and schedules <= {"1f1b", "interleaved"}


def test_a_profile_names_its_device_and_is_refused_on_another(tmp_path):
    """A profile written with --hardware names the preset it measured; a plan of another preset
    refuses it (a profile without a preset's name, measured against given peaks, is taken as
    given)."""
    path = tmp_path / "p.toml"
    path.write_text('[profile]\nhardware = "h100-sxm"\n\n[constants]\nmatmul_efficiency = 0.7\n')
    kw = dict(seq_len=4096, global_batch=8, profile=path)
    assert (
        float(an.Plan("llama3-8b", "h100-sxm", an.Layout(dp=8), **kw).inputs["matmul_efficiency"])
        == 0.7
    )
    with pytest.raises(an.InputError, match="measured on h100-sxm, not on h200"):
        an.Plan("llama3-8b", "h200", an.Layout(dp=8), **kw)
    path.write_text('[profile]\ndevice = "cpu"\n\n[constants]\nmatmul_efficiency = 0.7\n')
    assert (
        float(an.Plan("llama3-8b", "h200", an.Layout(dp=8), **kw).inputs["matmul_efficiency"])
        == 0.7
    )


def test_search_asked_for_a_schedule_its_stack_does_not_run_says_so():
    """Asked for the interleaved schedule, search on DeepSpeed's stack says the stack runs 1F1B only
    (not a layout error about chunks)."""
    with pytest.raises(an.InputError, match="stack deepspeed runs 1f1b, not interleaved"):
        an.search(
            "llama3-8b", "a100-80g", gpus=8, seq_len=2048, global_batch=64, stack="deepspeed",
            schedules=("interleaved",),
        )


def test_megatrons_interleaving_takes_whole_layers_a_chunk():
    """Megatron-LM and Megatron-Core give every model chunk of a stage the same layers (an even
    split's layers divisible by pp × vpp): 32 layers over 4 stages × 3 chunks is refused by Plan and
    left out by search on their stacks, and taken on TorchTitan's, which splits stages unevenly;
    with the ends counted as layers the slots are what must divide."""
    m = an.Model(
        layers=32, hidden=1024, heads=16, vocab=32000, position="rope", mlp="swiglu",
        ffn_hidden=2816,
    )
    kw = dict(seq_len=2048, global_batch=16)
    for stack in ("megatron-core", "megatron-lm-2021", "llama3-meta"):
        with pytest.raises(an.InputError, match="32 layers do not split over 4 stages × 3 chunks"):
            an.Plan(m, "h100-sxm", an.Layout(pp=4, vpp=3), stack=stack, **kw)
    assert (
        an.Plan(m, "h100-sxm", an.Layout(pp=4, vpp=3), stack="torchtitan", **kw)
        .memory()
        .total.magnitude
        > 0
    )
    assert an.Plan(m, "h100-sxm", an.Layout(pp=4, vpp=2), **kw).memory().total.magnitude > 0
    search = dict(gpus=8, vpps=(3,), schedules=("interleaved",), progress=False, **kw)
    assert an.search(m, "h100-sxm", **search).evaluated == 0
    assert an.search(m, "h100-sxm", stack="torchtitan", **search).evaluated > 0


@pytest.mark.parametrize(
    "stack, hardware",
    [
        ("megatron-core", "tpu-v6e"),
        ("torchtitan", "tpu-v5p"),
        ("deepspeed", "tpu7x"),
        ("megatron-core", "trn2"),
        ("torchtitan-2025", "trn2"),
        ("deepspeed", "trn2"),
        ("megatron-lm-2021", "mi300x"),
        ("maxtext", "trn2"),
        ("neuronx-distributed", "h100-sxm"),
    ],
)
def test_a_stack_runs_only_on_its_platforms(stack, hardware):
    """Megatron-Core, DeepSpeed and TorchTitan run on CUDA and ROCm, not on TPUs or Trainium
    (stacks.toml `platforms`, each sourced); Plan and search refuse a stack on a device of another
    platform, naming both."""
    kw = dict(seq_len=2048, global_batch=64, stack=stack)
    hw = an.hardware(hardware)
    with pytest.raises(
        an.InputError, match=f"stack: {stack} runs on .*not on {hw.platform} \\({hardware}\\)"
    ):
        an.Plan("llama3-8b", hw, an.Layout(dp=8), **kw)
    with pytest.raises(an.InputError, match=f"not on {hw.platform}"):
        an.search(
            "llama3-8b", hw.replace(scale_out_bandwidth="50 GB/s"), gpus=8, progress=False, **kw
        )


@pytest.mark.parametrize(
    "hardware, stack",
    [
        ("h100-sxm", "megatron-core"),
        ("mi300x", "megatron-core"),
        ("tpu-v6e", "maxtext"),
        ("tpu7x", "maxtext"),
        ("trn2", "neuronx-distributed"),
    ],
)
def test_a_plan_without_a_stack_takes_its_platforms_default(hardware, stack):
    """Without a stack named, a plan and a search model the platform's own (Megatron-Core on CUDA
    and ROCm, MaxText on TPUs, NeuronX Distributed on Trainium), so no device's plans are refused by
    default; a device made by hand names no platform and takes Megatron-Core."""
    hw = an.hardware(hardware).replace(scale_out_bandwidth="50 GB/s", scale_up_bandwidth="400 GB/s")
    assert an.Plan("llama3-8b", hw, an.Layout(dp=8), seq_len=2048, global_batch=64).stack == stack
    assert (
        an.search("llama3-8b", hw, gpus=8, seq_len=2048, global_batch=64, progress=False).stack
        == stack
    )
    by_hand = an.Hardware(
        "mine", peaks={"bf16": "500 TFLOP/s"}, hbm="80 GB", hbm_bandwidth="3 TB/s",
        scale_up="400 GB/s", scale_out="50 GB/s",
    )
    assert (
        by_hand.platform == ""
        and an.Plan("llama3-8b", by_hand, an.Layout(dp=8), seq_len=2048, global_batch=64).stack
        == "megatron-core"
    )


def test_neuronx_distributed_runs_zero_1_at_most():
    """NeuronX Distributed shards the optimizer with ZeRO-1 only: Plan refuses ZeRO 2 and 3 on it,
    search leaves them out and refuses them asked for."""
    hw = an.hardware("trn2").replace(scale_out_bandwidth="50 GB/s")
    with pytest.raises(an.InputError, match="runs ZeRO 1 at most, not zero=3"):
        an.Plan("llama3-8b", hw, an.Layout(dp=16, zero=3), seq_len=2048, global_batch=64)
    a = an.search(
        "llama3-8b", hw, gpus=16, seq_len=2048, global_batch=64, progress=False, at_limit=True
    ).arrays
    assert len(a["zero"]) and a["zero"].max() == 1
    with pytest.raises(an.InputError, match="runs ZeRO 1 at most, not zero=2"):
        an.search(
            "llama3-8b", hw, gpus=16, seq_len=2048, global_batch=64, progress=False, zero=(1, 2)
        )
