"""The operations a program runs, in one table: for each, its arity, whether its value is a truth
value, its kernel on Python floats (:meth:`.numeric.Program.scalar`), its numpy function (a program
run on arrays), the sympy class or function it stands for (:mod:`.lowering` reads sympy
expressions by it, :mod:`.replay` builds a term's sympy view with it) and, for a function, the
unit of its value (:mod:`.dimensions`). The terms' own operations on exact numbers are
:data:`.terms.NUMBER_OPS`; which of them are conditions is this table's.

The float kernels follow numpy at the edges (inf, NaN, division by zero), so a plan's numbers on
Python floats and a search's on arrays agree bit for bit. This module imports neither sympy nor
numpy: each names what it needs of them.
"""

from __future__ import annotations

import builtins
import functools
import math
import operator
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Operation:
    """``arity``: its operands (None: two or more); ``scalar``: its kernel on Python floats (an
    n-ary one on a tuple of them); ``numpy``: numpy's function, as ``numpy(np)``; ``sympy``: the
    sympy class or function of the same operation, by name (None: none, or the library's own);
    ``condition``: its value is a truth value; ``units``, for a one-operand function: "operand"
    (its operand's unit) or "dimensionless" (a dimensionless operand and value), as the dimension
    check (:mod:`.dimensions`) reads it."""

    arity: int | None
    scalar: Callable
    numpy: Callable
    sympy: str | None = None
    condition: bool = False
    units: str | None = None


def _recip(x):
    if x:
        return 1.0 / x
    return math.copysign(math.inf, x)


def _sqrt(x):
    return math.sqrt(x) if x >= 0 else math.nan


def _log(x):
    return math.log(x) if x > 0 else -math.inf if x == 0 else math.nan


def _exp(x):
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _rounded(fn):
    def apply(x):
        return float(fn(x)) if math.isfinite(x) else x

    return apply


def _div(a, b):
    """a / b as numpy divides (±inf or NaN by zero)."""
    if b:
        return a / b
    return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)


def _pow(a, b):
    try:
        r = a**b
    except (ZeroDivisionError, OverflowError):
        # ±inf: negative only for a negative base to an odd power
        odd = math.isfinite(b) and b == int(b) and int(b) % 2 == 1
        return math.copysign(math.inf, a) if odd else math.inf
    return math.nan if isinstance(r, complex) else r


def _mod(a, b):
    try:
        return a % b
    except ZeroDivisionError:
        return math.nan


def _gcd(a, b):
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.nan
    return float(math.gcd(round(a), round(b)))


def _extreme(pick):
    def apply(args):
        for v in args:
            if v != v:
                return math.nan  # NaN propagates, as numpy's maximum and minimum do
        return pick(args)

    return apply


def _np_gcd(np):
    def gcd(a, b):
        return np.gcd(np.rint(a).astype(np.int64), np.rint(b).astype(np.int64)).astype(np.float64)

    return gcd


def _numpy(name: str):
    return lambda np: getattr(np, name)


def _relation(fn, numpy_name: str, sympy_name: str) -> Operation:
    return Operation(2, fn, _numpy(numpy_name), sympy_name, condition=True)


#: operation name → Operation; the n-ary ones take a tuple on floats (add and mul left to right,
#: as a + b + c)
OPERATIONS = {
    "add": Operation(None, functools.partial(functools.reduce, operator.add), _numpy("add"), "Add"),
    "mul": Operation(
        None, functools.partial(functools.reduce, operator.mul), _numpy("multiply"), "Mul"
    ),
    "max": Operation(None, _extreme(builtins.max), _numpy("maximum"), "Max"),
    "min": Operation(None, _extreme(builtins.min), _numpy("minimum"), "Min"),
    "and": Operation(None, all, _numpy("logical_and"), "And", condition=True),
    "or": Operation(None, any, _numpy("logical_or"), "Or", condition=True),
    "recip": Operation(1, _recip, lambda np: lambda x: np.divide(1.0, x)),
    "sqrt": Operation(1, _sqrt, _numpy("sqrt"), "sqrt"),
    "log": Operation(1, _log, _numpy("log"), "log", units="dimensionless"),
    "exp": Operation(1, _exp, _numpy("exp"), "exp", units="dimensionless"),
    "abs": Operation(1, abs, _numpy("abs"), "Abs", units="operand"),
    "floor": Operation(1, _rounded(math.floor), _numpy("floor"), "floor", units="operand"),
    "ceiling": Operation(1, _rounded(math.ceil), _numpy("ceil"), "ceiling", units="operand"),
    "not": Operation(1, operator.not_, _numpy("logical_not"), "Not", condition=True),
    "pow": Operation(2, _pow, _numpy("float_power"), "Pow"),
    "div": Operation(2, _div, _numpy("divide")),
    "mod": Operation(2, _mod, _numpy("mod"), "Mod"),
    "gcd": Operation(2, _gcd, _np_gcd),
    "lt": _relation(operator.lt, "less", "StrictLessThan"),
    "le": _relation(operator.le, "less_equal", "LessThan"),
    "gt": _relation(operator.gt, "greater", "StrictGreaterThan"),
    "ge": _relation(operator.ge, "greater_equal", "GreaterThan"),
    "eq": _relation(operator.eq, "equal", "Equality"),
    "ne": _relation(operator.ne, "not_equal", "Unequality"),
    "where": Operation(3, lambda c, a, b: a if c else b, _numpy("where")),
}

#: operation → arity (None for two or more)
ARITY = {name: op.arity for name, op in OPERATIONS.items()}

#: the operations whose value is a truth value
CONDITIONS = frozenset(name for name, op in OPERATIONS.items() if op.condition)


__all__ = ["ARITY", "CONDITIONS", "OPERATIONS", "Operation"]
