"""Fuzzing the public API and the CLI: every call returns a finite, correctly dimensioned result or
raises an analytic.core.errors exception, never anything else. The 'ci' hypothesis profile runs
1,000 examples per entry point."""

import contextlib
import io
import math
import os
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pint
import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import analytic as an
from analytic.cli.main import main
from analytic.core.errors import AnalyticError

CI = os.environ.get("HYPOTHESIS_PROFILE") == "ci"
FUZZ = settings(
    max_examples=1000 if CI else 100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

NAMES = sorted(an.formulas())
UNITS = [
    "",
    "byte",
    "GB",
    "GiB",
    "Gbit/s",
    "GB/s",
    "FLOP",
    "TFLOP/s",
    "s",
    "ms",
    "parameter",
    "token",
    "1/s",
]
FOREIGN = UNITS + ["m", "kg", "furlong", "GB/"]  # not in the registry: must fail as a UnitError
numbers = st.one_of(
    st.integers(-(10**6), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1e-300, 1e300, -1.0, 1e30, 1e-30]),
)
# a user's own registry: bits dimensionless, its own Quantity class
FOREIGN_REGISTRY = pint.UnitRegistry()
#: the adversarial space: trailing junk, operators, huge and tiny magnitudes, sympy numbers outside
#: any domain
adversarial = st.one_of(
    st.builds(
        lambda x, u, junk: f"{x} {u}{junk}",
        st.sampled_from(["5", "450", "8", "1e400", "1e-310", "9**9**9"]),
        st.sampled_from(["us", "GB/s", "", "byte"]),
        st.sampled_from([" 3", " 2", " 8", "", "**9", " us"]),
    ),
    st.sampled_from(
        [
            sympy.Integer(-5),
            sympy.oo,
            -sympy.oo,
            sympy.zoo,
            sympy.nan,
            sympy.Rational(1, 3),
            sympy.Float(2.5),
            sympy.Integer(10) ** 400,
            sympy.E,
        ]
    ),
    st.builds(
        lambda x, u: FOREIGN_REGISTRY.Quantity(x, u),
        st.sampled_from([1, 268, 1e-310, 1e310]),
        st.sampled_from(["kB", "MB", "s", "GB/s", "bit", "dimensionless"]),
    ),
    st.sampled_from(
        [10**400, 2**53 + 1, Decimal("Infinity"), Decimal("1e400"), Fraction(1, 3), "x" * 1000]
    ),
)
values = st.one_of(
    numbers,
    adversarial,
    st.builds(
        lambda x, u: an.Q_(x, u), st.floats(-1e30, 1e30, allow_nan=False), st.sampled_from(UNITS)
    ),
    st.builds(lambda x, u: f"{x} {u}", st.floats(1e-20, 1e30), st.sampled_from(FOREIGN)),
    st.text(max_size=12),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)


#: the catalogue's margins, negative by design where what they measure is short (a stage that does
#: not fit)
SIGNED = {"memory.headroom"}


def finite(q) -> bool:
    return math.isfinite(float(q.magnitude))


@FUZZ
@given(st.sampled_from(NAMES), st.data())
def test_formula_evaluate(name, data):
    f = an.formula(name)
    kws = list(f.symbols) + data.draw(
        st.lists(st.sampled_from(["tp", "bogus", "params"]), max_size=1)
    )
    kwargs = {k: data.draw(values) for k in kws}
    try:
        q = f.evaluate(**kwargs)
    except AnalyticError:
        return
    # inside its domain every catalogue formula is a finite amount, non-negative but for a margin
    assert (
        isinstance(q, pint.Quantity)
        and q.units == f.unit
        and finite(q)
        and (q.magnitude >= 0 or name in SIGNED)
    )


@FUZZ
@given(
    st.sampled_from(
        [n for n in NAMES if {"zero", "recompute", "schedule"} & set(an.formula(n).symbols)]
        or ["memory.model_states.zero1"]
    ),
    st.integers(-3, 50),
)
def test_symbolic_choices_out_of_range_are_refused(name, index):
    """A Piecewise over the discrete choices: an index outside the choice list is an error, not a
    number."""
    f = an.formula(name)
    kw = {k: index for k in f.symbols if k in ("zero", "recompute", "schedule")}
    try:
        f.subs(**kw)
    except AnalyticError:
        assert any(not 0 <= v < len(an.symbols.CHOICES[k]) for k, v in kw.items())
        return
    assert all(0 <= v < len(an.symbols.CHOICES[k]) for k, v in kw.items())


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "layers",
                "hidden",
                "heads",
                "vocab",
                "kv_heads",
                "ffn_hidden",
                "experts",
                "topk",
                "max_seq_len",
                "mlp",
                "position",
                "head_dim",
            ]
        ),
        values,
        max_size=6,
    ),
    st.integers(1, 64),
    st.integers(1, 4096),
)
def test_model_construction(extra, layers, hidden):
    kwargs = dict(layers=layers, hidden=hidden, heads=8, vocab=1000, position="rope") | extra
    try:
        m = an.Model(**kwargs)
        n = m.total_params
    except AnalyticError:
        return
    assert n > 0 and m.active_params <= n


degrees = st.one_of(
    st.integers(-2, 64), st.floats(allow_nan=True), st.sampled_from([1, 2, 4, 8, 16]),
    st.text(max_size=3),
)


@FUZZ
@given(
    st.fixed_dictionaries({k: degrees for k in ("tp", "pp", "dp", "cp", "vpp")}),
    st.sampled_from(
        [
            0,
            1,
            2,
            3,
            4,
            -1,
            "1",
            2.0,
            True,
            np.int64(3),
            np.array([1, 2]),
            an.sym("zero"),
            an.sym("dp"),
        ]
    ),
    st.sampled_from(
        [
            "none",
            "selective",
            "full",
            "all",
            np.array(["none"]),
            an.sym("recompute"),
            an.sym("zero"),
        ]
    ),
    st.sampled_from(
        [
            "1f1b",
            "interleaved",
            "gpipe",
            "zb-h1",
            "zb-h2",
            "dualpipe",
            "bogus",
            ["1f1b"],
            an.sym("schedule"),
        ]
    ),
    st.one_of(st.integers(-1, 9000), st.floats(allow_nan=True)),
    st.one_of(st.integers(-1, 600), st.just(64)),
    st.sampled_from(["llama3-8b", "gpt3-175b", "deepseek-v3"]),
    st.sampled_from([0, 20, 131, 132, -1, 2.5, "20", True, an.sym("comm_sms")]),
)
def test_plan(deg, zero, recompute, schedule, seq, batch, name, comm_sms):
    try:
        layout = an.Layout(
            **deg, zero=zero, recompute=recompute, schedule=schedule, comm_sms=comm_sms
        )
        plan = an.Plan(
            an.model(name), an.hardware("h100-sxm"), layout, seq_len=seq, global_batch=batch
        )
        mem, step = plan.memory(), plan.step_time()
    except AnalyticError:
        return
    assert finite(mem.total) and mem.total.magnitude > 0
    assert finite(step) and step.magnitude > 0 and 0 < plan.mfu() <= 1


OVERRIDES = (
    "peak_flops",
    "sms",
    "hbm",
    "scale_up_bandwidth",
    "scale_out_bandwidth",
    "gpus_per_node",
    "matmul_efficiency",
    "link_efficiency",
    "latency",
    "overlap",
    "interruption_rate",
    "restart_time",
)


@FUZZ
@given(st.dictionaries(st.sampled_from(OVERRIDES), values, max_size=3))
def test_plan_overrides(overrides):
    """Any override is either in its domain (and the plan's numbers stay finite, its MFU at most 1)
    or refused. An MFU reads 0 only where the step is so long that GPUs × peak × step leaves
    float64's range (an efficiency of 2.6e-300 makes the step 1.8e299 s)."""
    try:
        plan = an.Plan(
            an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(tp=8, sequence_parallel=True),
            seq_len=4096, global_batch=16, training_tokens="1e12 token", **overrides,
        )
        step, mem, mfu = plan.step_time(), plan.memory(), plan.mfu()
        goodput = plan.expr("goodput").value()
    except AnalyticError:
        return
    assert finite(step) and step.magnitude > 0 and finite(mem.total) and mfu <= 1
    assert 0 < mfu or (mfu == 0 and step.magnitude > 1e250)
    assert 0 <= goodput.magnitude <= 1


@FUZZ
@given(st.text(max_size=20), st.text(max_size=20))
def test_preset_names(model_name, hw_name):
    for fn, name, kind in ((an.model, model_name, an.Model), (an.hardware, hw_name, an.Hardware)):
        try:
            found = fn(name)
        except AnalyticError:
            continue
        assert isinstance(found, kind)


flags = st.sampled_from(
    (
        "--model --hardware --gpus --tp --pp --dp --cp --ep --zero --seq --batch-tokens"
        " --global-batch --mfu --dtype --schedule --recompute --tpp --json --set --list --comm-sms"
        " --vpp --scale-out-bandwidth --microbatch-size"
    ).split()
)
args = st.one_of(
    flags,
    st.sampled_from(
        [
            "8",
            "16",
            "0",
            "-1",
            "1e30",
            "nan",
            "16M",
            "llama3-8b",
            "h100-sxm",
            "bf16",
            "x",
            "8192",
            "2048",
            "params=1e9",
            "message=1",
            "1f1b",
            "1e400",
            "8 8",
            "9007199254740993",
            "dp=10**10**10",
            "dp=8 8",
            "",
            "1.5M",
            "0 GB/s",
            "1e-310 GB/s",
            "450 GB/s 2",
        ]
    ),
    st.text(max_size=6),
)


@FUZZ
@given(
    st.sampled_from(["step", "memory", "formula", "search", "bogus"]), st.lists(args, max_size=8)
)
def test_cli_never_tracebacks(command, argv):
    if command == "search" and "--gpus" in argv:
        argv = [a for a in argv if a not in ("1e30",)]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([command, *argv])
        except SystemExit as exc:  # --help
            code = exc.code
    assert code in (0, 2), (command, argv, err.getvalue())
    if code == 2:
        assert len(err.getvalue().strip().splitlines()) == 1 and "Traceback" not in err.getvalue()


@FUZZ
@given(
    st.one_of(st.integers(-2, 64), st.floats(allow_nan=True)),
    st.sampled_from([0, 1024, 2048]),
    st.sampled_from([-1, 64, 128]),
    st.data(),
)
def test_search(gpus, seq, batch, data):
    """Few sequence lengths and batches, so the compiled expressions come from the cache."""
    bad = data.draw(
        st.dictionaries(
            st.sampled_from(["zero", "recompute", "schedules"]),
            st.sampled_from([(), (7,), ("x",), (0,), ("none",), ("1f1b",)]),
            max_size=1,
        )
    )
    kwargs = dict(recompute=("none",), schedules=("1f1b",), zero=(1,)) | bad
    try:
        res = an.search(
            an.model("llama3-8b"), an.hardware("h100-sxm"), gpus=gpus, seq_len=seq,
            global_batch=batch, progress=False, **kwargs,
        )
    except AnalyticError:
        return
    hbm = an.hardware("h100-sxm").hbm.to("byte").magnitude
    for r in res.ranked[:3]:
        assert math.isfinite(r.step_time) and r.step_time > 0 and 0 < r.memory <= hbm


def test_extreme_but_valid_scales_stay_finite_and_ordered():
    f = an.formula
    zero = [
        f(f"memory.model_states.zero{k}").bind({"params": 1e15, "dp": 10**6}).value().magnitude
        for k in range(4)
    ]
    assert all(math.isfinite(z) and z > 0 for z in zero) and zero == sorted(zero, reverse=True)
    t = f("compute.train_time").evaluate(
        flops="1e30 FLOP", gpus=10**6, peak_flops="2 PFLOP/s", mfu=0.4
    )
    assert math.isfinite(t.magnitude) and t.to("year").magnitude == pytest.approx(
        1e30 / (1e6 * 2e15 * 0.4) / 31557600
    )
    ar = f("collectives.all_reduce.time").evaluate(
        message="1 PB", ranks=10**6, bandwidth="50 GB/s", latency="5 us"
    )
    rs = f("collectives.reduce_scatter.time").evaluate(
        message="1 PB", ranks=10**6, bandwidth="50 GB/s", latency="5 us"
    )
    assert math.isfinite(ar.magnitude) and ar.magnitude == pytest.approx(
        2 * rs.magnitude, rel=1e-12
    )
    n = f("scaling.chinchilla.optimal_params").evaluate(flops="1e30 FLOP")
    assert (
        math.isfinite(n.magnitude)
        and n.magnitude
        > f("scaling.chinchilla.optimal_params").evaluate(flops="1e29 FLOP").magnitude
    )
