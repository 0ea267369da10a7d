"""Terms (the catalogue's expressions as data) and the operations the plan's stages are written
with, held to sympy: replayed, a term is the expression sympy builds; at numbers, each operation
gives sympy's number."""

import math
from decimal import Decimal
from fractions import Fraction

import pytest
import sympy

import analytic as an
from analytic.core import algebra, held, replay, terms
from analytic.core.errors import InputError

h, s, b = (terms.symbol(k) for k in ("hidden", "seq_len", "microbatch_size"))
H, S, B = (an.sym(k) for k in ("hidden", "seq_len", "microbatch_size"))


@pytest.mark.parametrize(
    "build",
    [
        lambda h, s, b, A: 6 * h * s + 2 * b,  # reflected products and sums
        lambda h, s, b, A: 1 - h / (2 * s) + Fraction(1, 3) * b - (-b) * h**-2,
        lambda h, s, b, A: 2 / h - s**2 + h ** Fraction(1, 2) + (b / s) ** Fraction(1, 3),
        lambda h, s, b, A: A.Max(h - 1, 1) * A.Min(s, 10**9) / b,
        lambda h, s, b, A: A.Piecewise((s * b, b > 1), (0, True)) + A.ceiling(h / s),
        lambda h, s, b, A: A.Piecewise((1, A.Eq(A.Mod(h, s), 0)), (h, 1 >= s), (2, True)),
        lambda h, s, b, A: A.sqrt(2 * h * s) * A.exp(b / s) - A.log(h),
    ],
)
def test_a_term_replays_to_the_expression_sympy_builds_and_evaluates_to_its_number(build):
    """The same code on terms and on sympy's symbols (reflected operators, maxima, cases, roots):
    the term replayed is sympy's expression, srepr for srepr, and its value at numbers is sympy's to
    1e-30."""
    lazy = type(
        "Sympy",
        (),
        {
            "Max": staticmethod(lambda *a: sympy.Max(*a, evaluate=False)),
            "Min": staticmethod(lambda *a: sympy.Min(*a, evaluate=False)),
            **{
                n: staticmethod(getattr(sympy, n))
                for n in ("Piecewise", "Eq", "Mod", "ceiling", "sqrt", "exp", "log")
            },
        },
    )
    term, want = build(h, s, b, algebra), build(H, S, B, lazy)
    assert sympy.srepr(replay.to_sympy(term)) == sympy.srepr(want)
    at = {"hidden": 4096, "seq_len": Fraction(8192, 3), "microbatch_size": 2}
    got = terms.value(term, at)
    exact = want.subs({H: 4096, S: sympy.Rational(8192, 3), B: 2})
    got = terms.inexact(got)
    assert abs(got - Decimal(str(sympy.N(exact, 45)))) <= Decimal("1e-30") * abs(got)


def test_the_operations_act_on_numbers_at_once_exactly_and_on_sympy_objects_as_sympy_does():
    """On numbers: Python numbers and bools, exact where sympy's are (a Fraction for a Rational);
    on sympy numbers: sympy's objects, the same values."""
    x, y = Fraction(7, 2), 3
    cases = [
        (algebra.Max, (x, y)),
        (algebra.Min, (x, y)),
        (algebra.Mod, (x, y)),
        (algebra.ceiling, (x,)),
        (algebra.And, (True, False)),
        (algebra.Or, (True, False)),
        (algebra.Not, (False,)),
    ]
    # either side of a boundary, and on it
    for compare in (algebra.Eq, algebra.Gt, algebra.Ge, algebra.Le):
        cases += [(compare, (x, y)), (compare, (y, x)), (compare, (y, y))]
    for op, args in cases:
        got = op(*args)
        want = op(*(sympy.sympify(a) for a in args))
        assert type(got) in (int, Fraction, bool) and sympy.sympify(got) == want, (
            op.__name__,
            got,
            want,
        )
    assert (
        algebra.Piecewise((x, False), (y, True)) == 3
        and algebra.value_at_max(1, "a", 2, "b", 2, "c") == "b"
    )
    assert (
        terms.ratio(6, 4) == Fraction(3, 2)
        and terms.ratio(6, 3) == 2
        and type(terms.ratio(6, 3)) is int
    )
    assert math.isnan(terms.ratio(1, 0)) and math.isnan(algebra.sqrt(-1))
    # NaN, a case without a value, stays NaN with any number
    for op in ("add", "sub", "mul", "div", "pow"):
        for other in (3, Fraction(1, 2), algebra.sqrt(2)):
            assert math.isnan(terms.arithmetic(op, math.nan, other)) and math.isnan(
                terms.arithmetic(op, other, math.nan)
            )
    assert terms.value(terms.power(0, Fraction(1, 2)), {}) == 0 and math.isnan(
        terms.value(terms.power(-1, Fraction(1, 2)), {})
    )
    assert terms.value(terms.power(2, -1), {}) == Fraction(1, 2) and math.isnan(
        terms.value(terms.power(0, -1), {})
    )
    assert terms.value(terms.power(0, 0), {}) == 1 == sympy.Integer(0) ** 0
    # a float of 15 digits is sympy's, replayed as such
    limited = terms.evalf(terms.power(2, Fraction(1, 2)), 15)
    assert not terms.numeric(limited) and replay.to_sympy(limited) == sympy.sqrt(2).evalf(15)
    assert algebra.Mod(Fraction(7, 2), 1) == Fraction(1, 2) and math.isnan(algebra.Mod(3, 0))
    assert terms.value(-terms.symbol("hidden"), {"hidden": algebra.sqrt(4)}) == -2


def test_a_domain_holds_up_to_its_boundary_and_no_further():
    """A catalogue formula's domain at numbers, on each side of its boundary: DualPipe's bubble
    takes two stages (pp ≥ 2) and not one; the SMs left to compute must be some (comm_sms < sms)."""
    bubble = an.formula("pipeline.bubble_time.dualpipe")
    times = {"t_f": "1 ms", "t_b": "2 ms", "t_w": "1 ms", "t_fb": "3 ms"}
    # (p/2 − 1)·…
    assert (
        bubble.evaluate(pp=2, **{k: v for k, v in times.items() if k in bubble.symbols}).magnitude
        == 0
    )
    with pytest.raises(InputError, match="two stages"):
        bubble.evaluate(pp=1, **{k: v for k, v in times.items() if k in bubble.symbols})
    share = an.formula("compute.sm_share")
    assert share.evaluate(sms=132, comm_sms=131).magnitude == pytest.approx(1 / 132)
    with pytest.raises(InputError, match="all the SMs"):
        share.evaluate(sms=132, comm_sms=132)


def test_past_a_root_a_number_is_a_decimal_of_40_digits():
    """sqrt(2)·exp(1/3) at 40 significant digits (sympy evaluates such an expression to 30 before it
    becomes a float, so both give the same float)."""
    got = terms.arithmetic("mul", algebra.sqrt(2), algebra.exp(Fraction(1, 3)))
    want = sympy.N(sympy.sqrt(2) * sympy.exp(sympy.Rational(1, 3)), 50)
    assert isinstance(got, Decimal) and abs(got - Decimal(str(want))) < Decimal("1e-38")
    assert float(got) == float(want)


def test_a_power_past_the_exact_exponents_is_a_decimal_of_40_digits():
    """Up to EXACT_POWER a whole power is exact; past it an exact rational power would hold about
    as many digits as its exponent, so it is a Decimal: 2/3 to the 10¹² underflows to zero, and the
    nodes 10⁶ draws reach among 10⁶ (parallelism.ep.nodes_reached, N·(1 − (1 − 1/N)^k)) are
    N·(1 − e^(k·ln(1 − 1/N))) to 1e-12, as a hostile topk of 10¹² is 3 nodes of 3."""
    assert terms.arithmetic("pow", Fraction(2, 3), terms.EXACT_POWER) == Fraction(2**1024, 3**1024)
    past = terms.arithmetic("pow", Fraction(2, 3), 10**12)
    assert type(past) is Decimal and past == 0
    exact = [terms.arithmetic("pow", base, 10**12 + 1) for base in (0, 1, Fraction(-1))]
    assert exact == [0, 1, -1] and all(type(x) is int for x in exact)  # 0 and ±1 stay exact
    reached = an.formula("parallelism.ep.nodes_reached")
    n = 10**6
    expected = n * (1 - math.exp(n * math.log1p(-1 / n)))
    assert reached.evaluate(nodes=n, topk=n).magnitude == pytest.approx(expected, rel=1e-12)
    assert reached.evaluate(nodes=3, topk=1e12).magnitude == 3


def test_a_formula_holding_no_real_number_raises_only_when_asked():
    """A case a plan does not take may have no value (a division by zero): the formula holds NaN,
    sums and products of it too, and an InputError naming it comes only when its value is asked."""
    middle = an.Formula("layers", terms.ratio(4, 0), "", "") * 2 + 1
    assert held.holds_number(middle) and math.isnan(middle.term)
    with pytest.raises(InputError, match="layers: the result is not a finite real number"):
        middle.value()


def test_formulas_holding_numbers_convert_units_and_keep_each_others_domains():
    """A formula holding a number bound where another unit is declared is converted (2 PFLOP as
    FLOPs), a sum converts its second part to the first's unit (1 GB + 1 MB), and a sum keeps the
    domain of both parts: the part outside its domain raises when the sum's value is asked."""
    mfu = an.formula("compute.mfu")
    at = {"step_time": "10 s", "gpus": 8, "peak_flops": "1 PFLOP/s"}
    assert mfu.bind(
        {"flops": an.Formula("C", 2, "PFLOP", ""), **at}
    ).value().magnitude == pytest.approx(2 / 80)
    assert (an.Formula("a", 1, "GB", "") + an.Formula("b", 1, "MB", "")).value().to(
        "GB"
    ).magnitude == pytest.approx(1.001)
    outside = an.formula("compute.sm_share").bind({"sms": 132, "comm_sms": 132})
    assert held.holds_number(outside)
    with pytest.raises(
        InputError,
        match=r"compute.sm_share: outside the formula's domain \(in one\): .*all the SMs",
    ):
        (an.Formula("one", 1, "", "") + outside).value()


def test_each_catalogue_formula_takes_the_symbols_its_expression_holds():
    """A formula's keywords come from its terms (no sympy), its expression's free symbols from
    sympy: the same for every catalogue formula, sympy's folds of 0·x, 0/x, x/x and x − x made by
    the terms too."""
    for name, f in an.formulas().items():
        free = {an.core.symbols.info(s).keyword for s in f.expr.free_symbols}
        assert terms.keywords(f.raw[0]) == free, name
    t = terms.symbol("tp")
    assert 0 / t == 0 * t == t * 0 == t - t == 0 and t / t == 1 and (2 * t).keywords == {"tp"}
