"""Plans compiled ahead of time (analytic.compiled): current, equal to the expressions, used only
where they answer, and the same for search."""

import dataclasses
import importlib
import math
import operator
import random
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import analytic as an
from analytic import compiled
from analytic.compiled import _index
from analytic.errors import InputError
from analytic.numeric import OPS
from analytic.plan.structure import Compiled, structure
from analytic.plan.template import module_source
from analytic.strategies import plans
from analytic.symbols import info

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = importlib.import_module("analytic.search_programs")


def essay(**kw):
    return an.Plan(an.model("llama3-405b"), an.hardware("h100-sxm"),
                   an.Layout(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True), seq_len=8192, global_batch=2048, **kw)


def deepseek():
    return an.Plan(an.model("deepseek-v3"), an.hardware("h800"),
                   an.Layout(pp=16, dp=128, ep=64, zero=1, schedule="dualpipe", comm_sms=20),
                   seq_len=4096, global_batch=15360, dtype="fp8", training_tokens="14.8e12 token")


def current() -> bool:
    return _index.DIGEST == compiled.source_digest()


#: tests of the compiled numbers, which need modules compiled from these sources
needs_current = pytest.mark.skipif(not current(), reason="the modules are stale: test_the_digest_is_current fails")


def test_the_digest_is_current():
    """The shipped modules were compiled from these sources (else plans take the expressions)."""
    assert current(), "run python scripts/compile_plans.py"


def test_the_shipped_modules_are_what_the_template_compiles():
    """Two modules compiled again here are the shipped files byte for byte (scripts/compile_plans.py
    --check compares them all)."""
    for plan in (essay(), deepseek()):
        key = structure(plan._in)
        assert key in _index.STRUCTURES
        path = ROOT / "analytic" / "compiled" / f"{compiled.module_name(key)}.py"
        assert path.read_text() == module_source(plan, key)


def test_the_shipped_structures_are_the_scripts():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from compile_plans import structures
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert set(structures()) >= set(_index.STRUCTURES)
    shipped = {p.stem for p in (ROOT / "analytic" / "compiled").glob("p_*.py")}
    assert shipped == {compiled.module_name(k) for k in _index.STRUCTURES}


def _close(got: float, want: float, scale: float) -> bool:
    return abs(got - want) <= 1e-12 * max(abs(want), scale) + 1e-300


@needs_current
@given(plans(gpus=16), st.sampled_from(["bf16", "fp8"]), st.booleans())
@settings(max_examples=25, deadline=None)
def test_compiled_numbers_equal_the_expressions(plan, dtype, tokens):
    """Every quantity (and the catalogue formulas it is composed from) and every stage's memory,
    compiled and from the plan's expressions, to 1e-12
    (a difference of large numbers, such as the headroom or a bubble that is zero, relative to the
    scale of what it subtracts: the HBM, the step time, one)."""
    try:
        plan = plan.replace(dtype=dtype, training_tokens="1e12 token" if tokens else None)
    except InputError:  # no FP8 on this hardware
        return
    c = Compiled(plan._in)
    assert c.module is not None, f"no compiled module for {plan!r}"
    scale = {"byte": plan.hardware.hbm.to("byte").magnitude, "second": c.quantity("step_time").magnitude,
             "dimensionless": 1.0}  # what a difference of large numbers is measured against
    for name in plan.quantities():
        try:
            want = plan.expr(name).value()
        except InputError:  # e.g. steps without training tokens: compiled, it is NaN and not given
            assert not c.has(name) and c.quantity(name) is None
            continue
        got = c.quantity(name)
        assert c.sources(name) == sorted(plan.expr(name).sources), name  # the branches the plan takes
        assert got.units == want.units or want.dimensionless, name
        assert _close(got.magnitude, want.magnitude, scale.get(str(want.units), 0)), (name, got, want)
    for k in range(int(plan.layout.pp)):
        parts = c.stage(k)
        for part, f in plan._stage(k).items():
            assert _close(parts[part].to("byte").magnitude, f.value().to("byte").magnitude, 0), (k, part)


@needs_current
def test_a_shipped_plan_builds_no_expression():
    plan = deepseek()
    plan.memory(), plan.memory_by_stage(), plan.step_time(), plan.time_breakdown(ops=True), plan.mfu()
    plan.communication(), plan.communication_time(), plan.hardware_flops(), plan.model_flops("palm")
    assert plan.gpus == 2048 and plan.microbatches == 120
    # DualPipe's mirror stage, no TP or CP traffic (tp = cp = 1), ZeRO-1's reduce-scatter and all-gather
    assert "pipeline.mirror_stage.dualpipe" in plan.sources("memory.weights")
    assert plan.sources("communication.tp") == plan.sources("communication.cp") == []
    dp = plan.sources("communication.dp")
    assert "collectives.reduce_scatter.bytes_sent" in dp and "collectives.all_reduce.bytes_sent" not in dp
    stages = plan.memory_by_stage()  # each from its own parts; the fullest are the ranks of the first and last
    fullest = max(range(16), key=lambda k: stages[k].total)  # stages (DualPipe: both hold embedding, head, MTP)
    assert fullest == 0 and stages[15].total == stages[0].total > stages[1].total
    assert plan.memory().stage == 0 and plan.memory().total == stages[0].total
    assert plan._exprs == {}
    assert plan.expr("step_time").value().magnitude == pytest.approx(plan.step_time().magnitude, rel=1e-12)


@needs_current
def test_a_shipped_plan_names_its_fullest_stage_when_it_is_the_last():
    """Llama 3 8B over 4 stages with full recomputation keeps only layer inputs, so the last stage,
    which also takes the loss of a 128,256-entry vocabulary, is the fullest: the worst stage a compiled
    plan names is the one its stage-by-stage parts (another path) put highest."""
    plan = an.Plan(an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(pp=4, dp=2, recompute="full"),
                   seq_len=8192, global_batch=64)
    assert plan._compiled.module is not None
    totals = [m.total for m in plan.memory_by_stage()]
    assert max(range(4), key=totals.__getitem__) == 3 and totals[3] > totals[0]
    assert plan.memory().stage == 3 and plan.memory().total == totals[3]


@needs_current
def test_modules_of_other_sources_are_not_used(monkeypatch):
    """An edited catalogue: the digest differs, no module answers, and the numbers come from the
    expressions, the same."""
    want = essay().step_time()
    monkeypatch.setattr(compiled, "source_digest", lambda: "edited")
    plan = essay()
    assert plan._compiled.module is None and plan._compiled.quantity("step_time") is None
    assert plan._compiled.stage(0) is None
    assert plan.step_time().magnitude == pytest.approx(want.magnitude, rel=1e-12)
    assert plan._exprs  # it took the expressions


@needs_current
def test_what_the_compiled_numbers_cannot_give_is_the_expressions_error():
    """Without training tokens the run's days are NaN compiled, so the plan asks its expressions,
    which say what is missing; a hardware without calibrated constants likewise."""
    plan = essay()
    assert not plan._compiled.has("steps") and plan._compiled.has("step_time")
    with pytest.raises(InputError, match="training_tokens"):
        plan.value("steps")
    bare = dataclasses.replace(an.hardware("h100-sxm"), key="", name="bare", calibrations={})
    plan = an.Plan(an.model("llama3-8b"), bare, an.Layout(tp=8), seq_len=4096, global_batch=64)
    assert plan._compiled.has("memory.total") and not plan._compiled.has("step_time")
    assert plan._compiled.count("gpus") == 8 and isinstance(plan._compiled.count("gpus"), int)
    with pytest.raises(an.PresetError):
        plan.step_time()


@needs_current
def test_a_new_model_of_a_known_architecture_searches_without_a_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    PROGRAMS._COMPILED.clear()
    model = an.model("llama3-8b").replace(layers=20, hidden=3072, heads=24, kv_heads=8, ffn_hidden=8192,
                                          head_dim=None, name="mine")
    res = an.search(model, an.hardware("h100-sxm"), gpus=32, seq_len=4096, global_batch=128, progress=False)
    assert res.compiled is False and not list(tmp_path.iterdir())
    best = res.best
    plan = best.plan(model, an.hardware("h100-sxm"), seq_len=4096, global_batch=128)
    assert best.step_time == pytest.approx(plan.expr("step_time").value().magnitude, rel=1e-12)
    assert best.memory == pytest.approx(plan.expr("memory.total").value().magnitude, rel=1e-12)


_EDGES = [0.0, -0.0, 1.0, -2.5, 3.0, 1e308, -1e308, math.inf, -math.inf, math.nan, 0.5, 7.0]


def _draw(rng: random.Random, keyword: str):
    """A number in ``keyword``'s symbol's domain, in its unit."""
    domain = info(keyword).domain
    if isinstance(domain, tuple):  # a choice's index
        return rng.randrange(len(domain[1]))
    return {"count": lambda: rng.randint(1, 64), "count0": lambda: rng.randint(0, 8),
            "fraction": lambda: Fraction(rng.randint(1, 100), 100), "fraction0": lambda: Fraction(rng.randint(0, 100), 100),
            }.get(domain, lambda: Fraction(rng.randint(1, 10**6), rng.choice([1, 10, 1000])))()


@needs_current
def test_each_compiled_catalogue_formula_equals_its_expression():
    """Every catalogue formula the package ships as a function (``_formulas``: all but those with
    caveats), at numbers drawn in its symbols' domains: the function's value is the expression's to
    1e-12, and where the expression refuses the numbers (outside the formula's domain) the function
    gives none."""
    from analytic.compiled import _formulas
    rng, checked, refused = random.Random(0), 0, 0
    assert set(_formulas.FORMULAS) == {n for n, f in an.formulas().items() if not f.caveats}
    for name, (_, inputs, unit) in _formulas.FORMULAS.items():
        f = an.formula(name)
        for _ in range(4):
            values = {k: _draw(rng, k) for k in inputs}
            hit = compiled.formula(name, {k: float(v) for k, v in values.items()})
            try:
                want = f.subs(**{k: sympy.Rational(v.numerator, v.denominator) if isinstance(v, Fraction)
                                 else sympy.Integer(v) for k, v in values.items()}).value()
            except InputError:
                assert hit is None, (name, values)
                refused += 1
                continue
            assert hit is not None and hit[1] == unit == str(f.unit), (name, values)
            assert _close(hit[0], float(want.magnitude), 0), (name, values, hit, want)
            checked += 1
    assert checked > 600 and refused < checked


@pytest.mark.parametrize("op", sorted(OPS))
def test_the_scalar_kernels_are_numpys_on_edge_values(op):
    """Each operation on Python floats gives what numpy gives (NaN where numpy gives NaN), so one
    plan and many layouts get the same numbers."""
    fn, arity = OPS[op]
    operators = {"add": operator.add, "mul": operator.mul, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
                 "ge": operator.ge, "eq": operator.eq, "ne": operator.ne}  # written as operators
    scalar = operators.get(op) or getattr(compiled.SCALAR, {"and": "and_", "or": "or_", "not": "not_"}.get(op, op))
    n = arity or 2
    rng = np.random.default_rng(0)
    for _ in range(200):
        args = [float(x) for x in rng.choice(_EDGES, size=n)]
        if op == "gcd" and not all(math.isfinite(a) and abs(a) < 1e15 for a in args):
            continue  # integers only (group sizes)
        with np.errstate(all="ignore"):
            want = fn(*[np.float64(a) for a in args])
        got = scalar(*args)
        if isinstance(want, np.ndarray):
            want = want.item()
        want = float(want)
        assert (math.isnan(got) and math.isnan(want)) or got == want, (op, args, got, want)


def test_the_readme_counts_the_shipped_structures():
    """The README's count of compiled structures is the number of modules analytic/compiled ships."""
    from pathlib import Path
    root = Path(__file__).parent.parent
    shipped = len(list((root / "analytic" / "compiled").glob("p_*.py")))
    assert f"of the golden plans ({shipped} of them)" in " ".join((root / "README.md").read_text().split())
