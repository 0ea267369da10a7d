"""Operations a formula is written with, on numbers, terms or sympy objects alike: on numbers at
once (exact ints and Fractions stay exact; a numeric plan's conditions are bools), on terms a term
(the catalogue's declarations), on sympy objects sympy's operation (a plan with a symbol): the
plan's stages are written once for numbers and symbols."""

from __future__ import annotations

from .replay import sympy_op, to_sympy
from .terms import NUMBER_OPS, Term, piecewise
from .values import is_sympy


def _kind(args) -> str:
    """"sympy" where an argument is a sympy object, "term" where one is a term, else "number"."""
    kind = "number"
    for a in args:
        if isinstance(a, Term):
            kind = "term"
        elif is_sympy(a):
            return "sympy"
    return kind


def _op(op: str, *args, decide: bool = False):
    """``op`` on numbers (at once), on terms (a term) or on sympy objects (sympy's operation)."""
    kind = _kind(args)
    if kind == "number":
        return NUMBER_OPS[op](*args)
    if kind == "term":
        return Term(op, args)
    return sympy_op(op, decide)(*(to_sympy(a) for a in args))


def Max(*args, decide: bool = False):
    """The largest argument; on sympy objects ``sympy.Max``, left unevaluated while symbols remain
    (deciding which of two large expressions in symbols is larger is slow and rarely possible),
    unless ``decide``: then as sympy decides it."""
    return _op("max", *args, decide=decide)


def Min(*args, decide: bool = False):
    """The smallest argument (see :func:`Max`)."""
    return _op("min", *args, decide=decide)


def Piecewise(*pieces):
    """The first ``(value, condition)`` piece whose condition holds (the last condition True)."""
    pieces = tuple(tuple(p) for p in pieces)
    kind = _kind([x for p in pieces for x in p])
    if kind == "number":
        return next(v for v, c in pieces if c)
    if kind == "term":
        return piecewise(pieces)
    import sympy
    return sympy.Piecewise(*((to_sympy(v), to_sympy(c)) for v, c in pieces))


def Eq(a, b):
    return _op("eq", a, b)


def Gt(a, b):
    return _op("gt", a, b)


def Ge(a, b):
    return _op("ge", a, b)


def Le(a, b):
    return _op("le", a, b)


def And(*args):
    return _op("and", *args)


def Or(*args):
    return _op("or", *args)


def Not(a):
    return _op("not", a)


def Mod(a, b):
    return _op("mod", a, b)


def ceiling(a):
    return _op("ceiling", a)


def floor(a):
    return _op("floor", a)


def gcd(a, b):
    """The greatest common divisor of two exact numbers; on sympy objects
    :class:`analytic.core.functions.common_divisor`."""
    return _op("gcd", a, b)


def sqrt(a):
    return _op("sqrt", a)


def exp(a):
    return _op("exp", a)


def log(a):
    return _op("log", a)


def is_false(c) -> bool:
    """Whether a condition is decided false."""
    return c is False or (is_sympy(c) and c.is_Boolean and bool(c == False))  # noqa: E712


def value_at_max(*pairs):
    """``(key0, value0, key1, value1, ...)``: the value paired with the largest key (the first on a
    tie); on sympy objects :class:`analytic.core.functions.value_at_max`, which chooses once the
    keys are numbers."""
    return _op("value_at_max", *pairs)
