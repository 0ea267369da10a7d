import os
import random
import subprocess
import sys
import warnings
from fractions import Fraction

import numpy as np
import pytest
import sympy

import analytic as an
from analytic.core.errors import FreeSymbolError, InputError, UnitError, UnknownNameError
from analytic.core.symbols import info


def test_zero0_of_405b():
    f = an.formula("memory.model_states.zero0")
    assert format(f.evaluate(params=405e9).to("TB"), ".12g") == "6.48 terabyte"
    assert f.evaluate(params=an.Q_(405e9, "parameter")).to("TB") == f.evaluate(params=405e9).to(
        "TB"
    )


def test_evaluate_converts_units():
    f = an.formula("collectives.all_reduce.time")
    a = f.evaluate(message="1 GB", ranks=8, bandwidth="400 Gbit/s", latency="0 s")
    b = f.evaluate(
        message=an.Q_(1000, "MB"), ranks=8, bandwidth=an.Q_(50, "GB/s"), latency=an.Q_(0, "us")
    )
    assert a.to("s").magnitude == pytest.approx(b.to("s").magnitude, rel=1e-15)
    assert a.to("s").magnitude == pytest.approx(2 * 7 / 8 * 1e9 / 50e9, rel=1e-15)


def test_wrong_unit_names_keyword_and_units():
    f = an.formula("collectives.all_reduce.time")
    with pytest.raises(UnitError, match="bandwidth.*GB"):
        f.evaluate(message="1 GB", ranks=8, bandwidth="50 GB", latency="0 s")


def test_bare_number_rejected_for_bytes_but_accepted_for_counts():
    f = an.formula("collectives.all_reduce.bytes_sent")
    with pytest.raises(UnitError, match="message"):
        f.evaluate(message=1e9, ranks=8)
    assert f.evaluate(message="1 GB", ranks=8).to("GB").magnitude == pytest.approx(1.75)
    with pytest.raises(UnitError, match="message"):
        f.evaluate(message="1e9", ranks=8)  # a number in a string is as ambiguous as a bare one
    states = an.formula("memory.model_states.zero1")
    # counts: fine
    assert states.evaluate(params="405e9", dp="64") == states.evaluate(params=405e9, dp=64)
    with pytest.raises(UnitError, match="dp: expected a plain number"):
        states.evaluate(params=405e9, dp="64 s")
    # FLOPs have one unit, so a bare number is read in it; seconds have several, so it is refused
    t = an.formula("compute.train_time")
    kw = dict(gpus=8192, peak_flops="989 TFLOP/s", mfu=0.4)
    assert t.evaluate(flops=1e25, **kw) == t.evaluate(flops="1e25 FLOP", **kw)
    assert t.evaluate(flops=1e25, **kw).to("s").magnitude == pytest.approx(
        1e25 / (8192 * 989e12 * 0.4)
    )
    with pytest.raises(UnitError, match="step_time"):
        an.formula("compute.mfu").evaluate(
            flops=1e25, step_time=100, gpus=8, peak_flops="989 TFLOP/s"
        )


def test_free_symbols_left_by_evaluate_are_named_by_keyword():
    f = an.formula("memory.model_states.zero1")
    with pytest.raises(an.FreeSymbolError, match="remain: params;"):
        f.evaluate(params=an.sym("params"), dp=8)


def test_missing_and_unknown_keywords_list_expected():
    f = an.formula("memory.model_states.zero1")
    with pytest.raises(InputError, match="dp"):
        f.evaluate(params=1e9)
    with pytest.raises(UnknownNameError, match="params"):
        f.evaluate(params=1e9, dp=8, tp=2)


def test_unknown_formula_suggests():
    with pytest.raises(UnknownNameError, match="zero1"):
        an.formula("memory.model_states.zero_1")


def test_subs_partial_and_exact():
    f = an.formula("memory.model_states.zero1").subs(params=405e9)
    assert list(f.symbols) == ["dp"]
    assert f.expr == sympy.Integer(1620000000000) + sympy.Integer(4860000000000) / an.sym("dp")
    assert f.evaluate(dp=64).to("GB").magnitude == pytest.approx(1620 + 4860 / 64)


def test_subs_with_symbol_stays_free():
    f = an.formula("compute.training_flops").subs(tokens=an.sym("params") * 20)
    assert f.expr == 120 * an.sym("params") ** 2


def test_lambdify_agrees_with_evaluate_on_arrays():
    f = an.formula("collectives.reduce_scatter.time")
    fn = f.lambdify()
    msg = np.array([1e6, 1e9])
    out = fn(
        message=msg, ranks=np.array([4, 64]), bandwidth=np.array([50e9, 450e9]),
        latency=np.array([1e-5, 2e-5]),
    )
    for i in range(2):
        q = f.evaluate(
            message=an.Q_(msg[i], "byte"),
            ranks=[4, 64][i],
            bandwidth=an.Q_([50e9, 450e9][i], "byte/s"),
            latency=an.Q_([1e-5, 2e-5][i], "s"),
        )
        assert out[i] == pytest.approx(q.to("s").magnitude, rel=1e-12)


def test_diff_has_unit_and_sign():
    f = an.formula("memory.model_states.zero1")
    d = f.diff("dp")
    assert d.evaluate(params=1e9, dp=8).magnitude < 0


def test_value_raises_on_free_symbols():
    with pytest.raises(FreeSymbolError):
        an.formula("memory.model_states.zero1").value()


def test_nan_and_negative_rejected():
    f = an.formula("memory.model_states.zero0")
    with pytest.raises(InputError):
        f.evaluate(params=float("nan"))
    with pytest.raises(InputError):
        f.evaluate(params=-1)


def test_latex_and_repr_latex():
    f = an.formula("memory.model_states.zero1")
    assert f.latex() == "4 \\Psi + \\frac{12 \\Psi}{N_{d}}"
    assert f._repr_latex_().startswith("$")


def test_sympy_symbol_named_like_keyword_is_accepted():
    f = an.formula("memory.model_states.zero1").subs(dp=sympy.Symbol("dp") * 2)
    assert f.expr.free_symbols == {an.sym("params"), an.sym("dp")}


def test_n_gives_floats_of_the_asked_digits():
    """A ring all-reduce over 8 ranks at 450 GB/s: S·2·7/8 / 450e9 = 3.888…e-12·S seconds, read as
    3.89e-12; the exact formula stays exact, and the float one evaluates to the same time."""
    f = an.formula("collectives.all_reduce.time").subs(ranks=8, bandwidth="450 GB/s")
    short = f.n(3)
    assert str(short.expr.coeff(an.sym("message"))) == "3.89e-12"
    assert "3.89" in f.latex(digits=3) and "1800000000000" in f.latex()
    exact, rounded = (
        g.evaluate(message="1 GB", latency="5 us").to("s").magnitude for g in (f, f.n(15))
    )
    assert rounded == pytest.approx(exact, rel=1e-14)
    assert short.unit == f.unit and short.sources == f.sources
    with pytest.raises(an.InputError, match="digits"):
        f.n(0)


def test_exact_numbers_become_correctly_rounded_floats():
    """A rational is one correctly rounded division (1/3, and 1 + 1e-30, which rounds to 1); one
    past the float range is refused, not returned as inf."""
    from analytic.core.expressions import to_float

    assert to_float(sympy.Rational(1, 3)) == 1 / 3
    assert to_float(sympy.Rational(10**30 + 1, 10**30)) == 1.0
    assert to_float(sympy.Integer(2) ** 60 + 1) == float(2**60)
    with pytest.raises(InputError, match="not a finite real number"):
        to_float(sympy.Integer(10) ** 400)


def test_a_product_past_the_float_range_is_refused_on_numbers_too():
    """1e300 parameters × 1.8e8 bytes each: an exact product past the float range, one InputError
    (it was an OverflowError from float() of the exact integer)."""
    f = an.formula("memory.optimizer_step.foreach")
    with pytest.raises(InputError, match="not a finite real number"):
        f.evaluate(params=1e300, element_bytes=an.Q_(179769314.0, "byte"))


def test_a_symbolic_case_draws_on_a_pieces_sources_only_where_it_is_taken():
    """cases() with an open condition keeps every piece's sources, each under the condition that its
    piece is taken; substituting the open input leaves those of the piece taken, as building the
    same cases with the number does."""
    from analytic.core.composition import cases
    from analytic.core.provenance import source_map

    ring, rs = an.formula("collectives.all_reduce.bytes_sent"), an.formula(
        "collectives.reduce_scatter.bytes_sent"
    )
    tp = an.sym("tp")

    def built(tp_value):
        return cases("t", "byte", (ring, sympy.Gt(tp_value, 1)), (rs, True))

    open_ = built(tp)
    assert open_.sources == {
        "collectives.all_reduce.bytes_sent",
        "collectives.reduce_scatter.bytes_sent",
    }
    where = source_map(open_)
    assert where["collectives.all_reduce.bytes_sent"] == sympy.Gt(tp, 1)
    assert where["collectives.reduce_scatter.bytes_sent"] == sympy.Le(tp, 1)
    for value in (1, 4):
        assert (
            open_.subs(tp=value).sources
            == built(value).sources
            == {
                (
                    "collectives.all_reduce.bytes_sent"
                    if value > 1
                    else "collectives.reduce_scatter.bytes_sent"
                )
            }
        )
    both = open_ + built(4)  # a source one part always draws on is drawn on unconditionally
    assert source_map(both)["collectives.all_reduce.bytes_sent"] == sympy.true


def _draw(rng: random.Random, keyword: str):
    """A number in ``keyword``'s symbol's domain, in its unit."""
    domain = info(keyword).domain
    if isinstance(domain, tuple):  # a choice's index
        return rng.randrange(len(domain[1]))
    return {
        "count": lambda: rng.randint(1, 64),
        "count0": lambda: rng.randint(0, 8),
        "fraction": lambda: Fraction(rng.randint(1, 100), 100),
        "fraction0": lambda: Fraction(rng.randint(0, 100), 100),
    }.get(domain, lambda: Fraction(rng.randint(1, 10**6), rng.choice([1, 10, 1000])))()


def _at(f, values, exact: bool):
    """(value, warned) of ``f`` bound to ``values``: as numbers (the formula's terms), or as sympy
    numbers (its sympy expression substituted); an InputError where it refuses them."""
    if exact:
        values = {
            k: (
                sympy.Rational(v.numerator, v.denominator)
                if isinstance(v, Fraction)
                else sympy.Integer(v)
            )
            for k, v in values.items()
        }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = f.bind(values).value().magnitude
    return value, len(caught)


def test_each_catalogue_formula_at_numbers_equals_its_expression():
    """Every catalogue formula at numbers drawn in its symbols' domains, evaluated on its terms
    without sympy and from its sympy expression: the same value to 1e-12, the same refusals (outside
    its domain, or no finite real value) and the same caveats warned."""
    rng, checked, refused = random.Random(0), 0, 0
    for name, f in sorted(an.formulas().items()):
        for _ in range(4):
            values = {k: _draw(rng, k) for k in f.symbols}
            try:
                want = _at(f, values, exact=True)
            except InputError:
                with pytest.raises(InputError):
                    _at(f, values, exact=False)
                refused += 1
                continue
            got = _at(f, values, exact=False)
            assert got[1] == want[1], (name, values)
            assert abs(got[0] - want[0]) <= 1e-12 * abs(want[0]) + 1e-300, (name, values, got, want)
            checked += 1
    assert checked > 700 and refused < checked / 4


def test_a_numeric_plan_and_a_catalogue_formula_at_numbers_import_no_sympy(tmp_path):
    """A plan whose inputs are numbers composes its formulas on numbers: its memory, step time and
    MFU, and a catalogue formula evaluated at Quantities, come without importing sympy."""
    code = (
        "import sys\nimport analytic as an\nplan = an.Plan(an.model('llama3-70b'),"
        " an.hardware('h100-sxm'), an.Layout(tp=8, pp=4, dp=8, zero=1), seq_len=8192,"
        " global_batch=512)\nplan.memory(), plan.step_time(), plan.mfu(),"
        " plan.time_breakdown(ops=True),"
        " plan.communication()\nan.formula('compute.mfu').evaluate(flops='1e18 FLOP', step_time='10"
        " s', gpus=1024, peak_flops='989 TFLOP/s')\nprint('sympy' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "ANALYTIC_CACHE": str(tmp_path)},
    )
    assert out.stdout.split() == ["False"], out.stderr


def test_a_catalogue_formula_whose_expression_was_read_still_evaluates_on_its_terms():
    """Reading a formula's sympy expression (a symbolic plan reads many) leaves its terms: a numeric
    plan built after a symbolic one still holds numbers, not sympy expressions, and the same
    numbers."""
    from analytic.core import held

    layout = an.Layout(tp=8, pp=4, dp=8, zero=1)
    args = dict(seq_len=8192, global_batch=512)
    before = an.Plan(an.model("llama3-70b"), an.hardware("h100-sxm"), layout, **args).expr(
        "step_time"
    )
    an.Plan(
        an.model("llama3-70b"), an.hardware("h100-sxm"), layout.replace(dp=an.sym("dp")), **args
    ).expr("step_time")
    after = an.Plan(an.model("llama3-70b"), an.hardware("h100-sxm"), layout, **args).expr(
        "step_time"
    )
    assert held.holds_number(before) and held.holds_number(after)
    assert after.term == before.term and after.sources == before.sources
