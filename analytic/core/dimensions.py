"""Dimension analysis of expressions: the unit an expression has when every symbol stands for one of
its declared unit (counts as pure numbers). The catalogue checks each formula's declared unit with
it."""

from __future__ import annotations

import sympy

from . import symbols as _symbols
from .errors import UnitError
from .functions import value_at_max
from .operations import OPERATIONS
from .units import DIMENSIONLESS, DimensionalityError, Quantity, Unit, strip_counts

#: sympy's one-argument functions → the unit of their value (operations.OPERATIONS)
_FUNCTION_UNITS = {
    getattr(sympy, op.sympy): op.units for op in OPERATIONS.values() if op.units is not None
}


def units_of(expr) -> Quantity:
    """The unit of an expression with every symbol replaced by 1 of its unit (counts stripped)."""
    if isinstance(expr, sympy.Symbol):
        return Quantity(1, strip_counts(_symbols.info(expr).unit))
    if expr.is_Number or expr in (sympy.pi, sympy.E):
        return Quantity(1, DIMENSIONLESS)
    if isinstance(expr, sympy.Add):
        terms = [units_of(a) for a in expr.args]
        for t in terms[1:]:
            t.to(terms[0].units)  # raises DimensionalityError on a mismatch
        return terms[0]
    if isinstance(expr, sympy.Mul):
        out = Quantity(1, DIMENSIONLESS)
        for a in expr.args:
            out = out * units_of(a)
        return Quantity(1, out.units)
    if isinstance(expr, sympy.Pow):
        base, exp = expr.args
        b = units_of(base)
        if exp.free_symbols:
            if not b.dimensionless or not units_of(exp).dimensionless:
                raise _incompatible(b.units, " (symbolic exponent)")
            return Quantity(1, DIMENSIONLESS)
        return Quantity(1, (b ** float(exp)).units)
    if isinstance(expr, value_at_max):  # its values, alike
        return units_of(sympy.Add(*expr.args[1::2], evaluate=False))
    if isinstance(expr, (sympy.Min, sympy.Max)):
        # zero has every dimension (Max(0, t))
        args = [a for a in expr.args if a != 0] or [
            expr.args[0]
        ]
        return units_of(sympy.Add(*args, evaluate=False)) if len(args) > 1 else units_of(args[0])
    if isinstance(expr, sympy.Mod):  # a remainder, in its operands' unit
        a, b = (units_of(x) for x in expr.args)
        b.to(a.units)
        return a
    if isinstance(expr, sympy.Piecewise):
        units = [units_of(e) for e, _ in expr.args]
        for u in units[1:]:
            u.to(units[0].units)
        return units[0]
    rule = _FUNCTION_UNITS.get(type(expr))
    if rule == "operand":
        return units_of(expr.args[0])
    if rule == "dimensionless":
        inner = units_of(expr.args[0])
        if not inner.dimensionless:
            raise _incompatible(inner.units, f" (argument of {expr.func})")
        return Quantity(1, DIMENSIONLESS)
    raise UnitError(f"cannot check the dimensions of {expr.func.__name__}")


def check_dimensions(f) -> Unit:
    """Substitute every symbol's unit in the Formula ``f`` (counts as pure numbers); raise UnitError
    unless every sum is homogeneous and the result times ``coefficient_unit`` has the dimension of
    ``unit``."""
    try:
        got = units_of(f.expr)
    except DimensionalityError as exc:
        raise UnitError(f"{f.name}: terms of different dimensions are added: {exc}") from None
    got_unit = Quantity(1, strip_counts(got.units * f.coefficient_unit))
    want = strip_counts(f.unit)
    if got_unit.dimensionality != Quantity(1, want).dimensionality:
        raise UnitError(
            f"{f.name}: expression has {got_unit.dimensionality}, "
            f"declared unit {f.unit:~P} has {want.dimensionality}"
        )
    return f.unit


def _incompatible(unit: Unit, why: str) -> DimensionalityError:
    return DimensionalityError(
        f"Cannot convert from '{unit}' ({unit.dimensionality}) to 'dimensionless' "
        f"(dimensionless){why}"
    )
