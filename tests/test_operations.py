"""The operations' one table: each entry's sympy class or function, its kernel on floats and its
numpy function compute the same operation, and every reader of operations takes them from it."""

import math

import pytest
import sympy

from analytic.core import dimensions, expressions, lowering, numeric, replay, terms
from analytic.core.operations import ARITY, CONDITIONS, OPERATIONS

#: operands by arity: equal, negative and fractional ones, where relations, remainders and roundings
#: differ from their neighbours (a point where sympy's value is not a finite real is passed over)
POINTS = {
    1: [(2.7,), (-2.7,), (0.5,)],
    2: [(7.5, 2.0), (2.0, 2.0), (-7.5, 2.0), (2.0, 7.5)],
    3: [(True, 3.25, -1.5), (False, 3.25, -1.5)],
    None: [(1.5, 4.0), (4.0, -1.5)],
}
LOGIC = {None: [(True, False), (True, True), (False, False)], 1: [(False,), (True,)]}


@pytest.mark.parametrize("name", sorted(k for k, op in OPERATIONS.items() if op.sympy))
def test_an_operation_lowered_from_sympy_is_sympys_value(name):
    """The sympy expression the table names, lowered to a program and run on floats and on numpy,
    gives sympy's own value at the point: a table whose sympy name and kernel disagree fails."""
    op = OPERATIONS[name]
    logic = name in ("and", "or", "not")
    points = (LOGIC if logic else POINTS)[op.arity]
    xs = sympy.symbols(f"x0:{len(points[0])}", **({} if logic else {"real": True}))
    expr = getattr(sympy, op.sympy)(*xs, evaluate=False)
    program = lowering.program([expr], {x: str(x) for x in xs})
    checked = 0
    for point in points:
        want = expr.subs(dict(zip(xs, point)))
        if isinstance(want, sympy.logic.boolalg.BooleanAtom):
            want = float(bool(want))
        elif not (want.is_real and want.is_finite):
            continue
        got = program.scalar([float(v) for v in point])[0]
        array = program(*[float(v) for v in point])[0]
        assert float(got) == pytest.approx(float(want), rel=1e-15), (name, point, got, want)
        assert float(array) == pytest.approx(float(want), rel=1e-15), (name, point, array, want)
        checked += 1
    assert checked >= 1


@pytest.mark.parametrize(
    "name", ["max", "min", "eq", "mod", "sqrt", "log", "exp", "floor", "ceiling"]
)
def test_a_terms_sympy_view_has_the_kernels_value(name):
    """A term of the operation on symbols (the catalogue's, positive: the logic operations are held
    by the lowering's test), replayed as sympy and evaluated at numbers, gives the operation's float
    kernel's value: the sympy view the table names is the same operation."""
    points = POINTS[OPERATIONS[name].arity]
    xs = [terms.Term("sym", (k,)) for k in ("params", "layers")[: len(points[0])]]
    view = replay.to_sympy(terms.Term(name, tuple(xs)))
    checked = 0
    for point in points:
        want = numeric.SCALAR.__dict__[name](*map(float, point))
        if not math.isfinite(float(want)):
            continue
        got = view.subs({replay.to_sympy(x): v for x, v in zip(xs, point)})
        assert float(bool(got) if got in (sympy.true, sympy.false) else got) == pytest.approx(
            float(want), rel=1e-15
        ), (name, point, got, want)
        checked += 1
    assert checked >= 1


def test_the_readers_take_the_table():
    """The programs' arities and both evaluators, the terms' conditions, the lowering's relations
    and functions, the dimension check's functions and the parser's functions are the table's."""
    assert numeric.ARITY is ARITY and set(numeric.numpy_ops()) == set(OPERATIONS)
    assert {k for k in vars(numeric.SCALAR)} == set(OPERATIONS)
    assert terms.CONDITIONS is CONDITIONS
    assert CONDITIONS == {"lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not"}
    assert set(lowering._RELATIONS.values()) == {"lt", "le", "gt", "ge", "eq", "ne"}
    assert set(lowering._FUNCTIONS.values()) == {"log", "exp", "abs", "floor", "ceiling"}
    assert dimensions._FUNCTION_UNITS[sympy.ceiling] == "operand"
    assert dimensions._FUNCTION_UNITS[sympy.log] == "dimensionless"
    assert set(expressions._SYMPY_FUNCTIONS) == {"Max", "Min", "sqrt", "log", "ceiling", "floor"}


def test_the_float_kernels_follow_numpy_at_the_edges():
    """Division by zero, a root of a negative number, the logarithm of zero and an exponential
    past the float range, as numpy gives them (hand values)."""
    scalar = numeric.SCALAR
    assert scalar.div(1.0, 0.0) == math.inf and scalar.div(-1.0, 0.0) == -math.inf
    assert math.isnan(scalar.div(0.0, 0.0)) and math.isnan(scalar.sqrt(-1.0))
    assert scalar.log(0.0) == -math.inf and scalar.exp(1000.0) == math.inf
    assert scalar.recip(-0.0) == -math.inf and math.isnan(scalar.max(1.0, math.nan))
