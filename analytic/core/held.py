"""Formulas that hold numbers: what a numeric plan composes, without sympy.

A catalogue formula is declared on terms (:mod:`.terms`); bound to numbers for every symbol it takes
it holds the number (an int or Fraction, exact as sympy's rationals; a Decimal of 40 digits past a
root, exponential, logarithm or fractional power), its domain's conditions decided (those that fail
kept, to raise when its value is asked) and its caveats decided. Arithmetic, case analyses and
compositions of such formulas hold numbers too, so a plan whose inputs are all numbers builds every
quantity without sympy; where any input is a sympy expression the formulas hold sympy expressions,
as :class:`~.formula.Formula` always did.
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal
from fractions import Fraction

from . import symbols as _symbols
from . import terms
from .errors import InputError, UnitError
from .units import DimensionalityError, Q, Unit, data, is_quantity
from .values import exact, exact_number, is_sympy


class Declared:
    """A field a formula declared on terms makes when first read (its sympy form); ``default`` as a
    dataclass field's."""

    def __init__(self, *default):
        self.default = default

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            if not self.default:
                raise AttributeError(self.name)  # a field without a default
            return self.default[0]
        fields = obj.__dict__
        if self.name not in fields:
            obj._realise()
        return fields[self.name]

    def __set__(self, obj, value):
        obj.__dict__[self.name] = value


#: the types of a number a formula holds (a float: NaN, where a case the plan does not take has no
#: value)
NUMBERS = frozenset({int, Fraction, Decimal, float})


#: the fields of a formula declared on terms that hold sympy objects once made
SYMPY_FIELDS = ("expr", "domain", "caveats", "source_conditions")


def on_terms(expr, conditions) -> bool:
    """Whether a formula is declared on terms: its expression a term or an exact number, each
    condition a term or a bool."""
    return (type(expr) is terms.Term or type(expr) in NUMBERS) and all(
        isinstance(c, (terms.Term, bool)) for c in conditions
    )


def holds_number(f) -> bool:
    """Whether the Formula ``f`` holds a number (a numeric plan's formulas, a catalogue
    constant)."""
    raw = f.__dict__.get("_terms")
    return (
        raw is not None
        and type(raw[0]) in NUMBERS
        and not any(type(c) is terms.Term for c, *_ in raw[1])
    )


def holds_data(f) -> bool:
    """Whether the Formula ``f`` holds a number, or a term in a plan template's inputs alone (no
    catalogue symbol free): what composes without sympy."""
    d = f.__dict__
    out = d.get("_data")
    if out is None:  # kept: a formula does not change
        raw = d.get("_terms")
        out = d["_data"] = raw is not None and _data(raw[0]) and all(_data(c) for c, *_ in raw[1])
    return out


def _data(x) -> bool:
    return type(x) in NUMBERS or type(x) is bool or (type(x) is terms.Term and not x.keywords)


def made(like, name: str, term, unit: Unit, *, source: str = "", assumptions: tuple = (),
         description: str = "", coefficient_unit=None, keywords: tuple = (), domain: tuple = (),
         sources=frozenset(), caveats: tuple = (), source_conditions: tuple = ()):
    """A Formula (of ``like``'s class) holding ``term``, its fields as given, in the form the
    class's checks give them (a Unit, each condition with its origin): what composing numbers makes
    many times a plan."""
    f = object.__new__(type(like))
    f.__dict__.update(
        name=name,
        unit=unit,
        source=source,
        assumptions=assumptions,
        description=description,
        coefficient_unit=coefficient_unit,
        keywords=keywords,
        sources=sources,
        _terms=(term, domain, caveats, source_conditions),
    )
    return f


@functools.lru_cache(maxsize=4096)
def factor(source: Unit, target: Unit):
    """The exact factor from ``source`` to ``target`` (DimensionalityError where they differ)."""
    return exact_number(source.factor(target))


def unit_factor(keyword: str, f, target: Unit):
    """The exact factor from the Formula ``f``'s unit to ``target``; a UnitError naming ``keyword``
    where the dimensions differ."""
    try:
        return factor(f.unit, target)
    except DimensionalityError:
        raise UnitError(
            f"{keyword}: expected {_symbols.wanted(target)}, got formula {f.name!r} in {f.unit:~P}"
        ) from None


def in_unit(keyword: str, f, target: Unit):
    """The number ``f`` holds, in ``target``; a UnitError naming ``keyword`` where the dimensions
    differ."""
    k = unit_factor(keyword, f, target)
    return f.term if k == 1 else terms.arithmetic("mul", f.term, k)


@functools.lru_cache(maxsize=4096)
def unit_of(a: Unit, b: Unit, op: str) -> Unit:
    return a * b if op == "*" else a / b


def arithmetic(a, b, op: str):
    return terms.arithmetic({"+": "add", "-": "sub", "*": "mul", "/": "div"}[op], a, b)


def sources(*formulas) -> dict:
    """The ``sources`` and ``source_conditions`` of a formula composed of ``formulas``: their union
    where none draws on a source under a condition (a numeric plan's), else
    :func:`.provenance.merged_sources`."""
    conditional = [sc for f in formulas for sc in f.raw_source_conditions]
    if not conditional:
        return {
            "sources": frozenset().union(*(f.sources for f in formulas)),
            "source_conditions": (),
        }
    from .provenance import merged_sources, source_map

    if all(_data(c) for _, c in conditional):  # a template's: the open sources each on its own
        always = frozenset().union(
            *(f.sources.difference(s for s, _ in f.raw_source_conditions) for f in formulas)
        )
        return merged_sources(
            dict.fromkeys(always, True),
            *({s: c} for s, c in conditional if s not in always),
            data=True,
        )
    return merged_sources(*(source_map(f) for f in formulas))


def bound(f, values: dict, magnitudes: bool = False):
    """The Formula ``f`` (declared on terms) with ``values`` for its symbols, holding the number, or
    None where a value is a sympy expression or leaves a symbol free (then sympy substitutes).
    ``magnitudes``: plain numbers are magnitudes in their symbol's unit (a plan's inputs, as sympy
    numbers were), else what :func:`~.symbols.read_magnitude` reads (a bare number only for counts
    and FLOPs)."""
    expr, domain, caveats, _ = f.raw
    needs = f.__dict__.get("_needs")
    if needs is None:  # the keywords its expression and conditions take; False: sympy evaluates it
        conditions = (tuple(c for c, *_ in domain), tuple(c for c, _ in caveats))
        needs = f.__dict__["_needs"] = (
            terms.keywords((expr, *conditions)) if terms.numeric((expr, *conditions)) else False
        )
    if needs is False:
        return None
    env = {}
    for kw, v in values.items():
        if is_sympy(v):
            return None
        if type(v) is terms.Term and not v.keywords:  # a template's input, or a term in them
            env[kw] = v
        elif magnitudes and type(v) in NUMBERS:
            env[kw] = checked(kw, v if type(v) in (int, Fraction) else exact_number(v))
        elif hasattr(v, "term") and hasattr(v, "raw_domain"):  # a Formula
            if not holds_data(v):
                return None
            env[kw] = in_unit(kw, v, _symbols.info(kw).unit)
        else:
            env[kw] = _symbols.read_magnitude(kw, v)
    if not needs <= env.keys():
        return None
    memo: dict = {}
    kept = tuple((v, *rest) for c, *rest in domain if (v := _decided(c, env, memo)) is not True)
    number = _decided(expr, env, memo)
    decided = tuple((_decided(c, env, memo), why) for c, why in caveats)
    parts = [v for v in values.values() if hasattr(v, "raw_domain")]
    return made(f, f.name, number, f.unit, source=f.source, assumptions=f.assumptions,
                description=f.description, coefficient_unit=f.coefficient_unit, keywords=f.keywords,
                domain=kept, caveats=decided, **sources(f, *parts))


def checked(keyword: str, value):
    """An exact number (int, Fraction or sympy's) for a declared keyword, a magnitude in its unit,
    its domain checked once per (keyword, value, the value's type): plans bind the same inputs into
    many formulas, and a sympy number equal to a Python one must not answer for it."""
    return _checked(keyword, type(value), value)


@functools.lru_cache(maxsize=1 << 14)
def _checked(keyword: str, kind: type, value):
    try:
        return _symbols.info(keyword).check(exact(value) if is_sympy(value) else value)
    except InputError as exc:
        raise InputError(
            f"{keyword}: {exc}" if not str(exc).startswith(keyword) else str(exc)
        ) from None


def _decided(x, env: dict, memo: dict):
    """A term at numbers; NaN where it is not a finite real number (a formula bound for a case the
    plan may not take: its value raises only if asked)."""
    try:
        return terms.value(x, env, memo)
    except terms.NotReal:
        return math.nan


def outside(name: str, origin: str, why: str) -> InputError:
    """The error of a formula ``name`` evaluated outside the domain of ``origin`` (itself, or a
    formula it is composed of)."""
    where = f" (in {name})" if name != origin else ""
    return InputError(f"{origin}: outside the formula's domain{where}: {why}")


def approximate(name: str, why: str) -> None:
    """The ApproximationWarning of a formula ``name`` evaluated where its caveat ``why`` fails
    (pointing at the caller of ``evaluate`` or ``value``)."""
    import warnings

    from .errors import ApproximationWarning

    warnings.warn(f"{name}: {why}", ApproximationWarning, stacklevel=4)


def value(f):
    """The number a Formula holding one stands for, as a Quantity: its domain checked, its caveats
    warned."""
    for cond, why, origin in f.raw_domain:
        if cond is False:
            raise outside(f.name, origin, why)
    for cond, why in f.raw_caveats:
        if cond is False:
            approximate(f.name, why)
    try:
        x = float(f.term)
    except OverflowError:
        x = math.inf
    if not math.isfinite(x):
        raise InputError(f"{f.name}: the result is not a finite real number")
    return Q(x, f.unit)


def combined(self, other, op: str, name):
    """``Formula._combine`` of a formula holding a number (``self``) with a number, a Quantity or
    another such formula, holding the result (None for anything else)."""
    parts, unit = (self,), self.unit
    if hasattr(other, "raw_domain"):
        if not holds_data(other):
            return None
        parts = (self, other)
        if op in ("+", "-"):
            b = in_unit(other.name, other, self.unit)
        else:
            b, unit = other.term, unit_of(self.unit, other.unit, op)
    elif is_quantity(other):
        other = data(other)
        if op in ("+", "-"):
            b = _symbols.read_magnitude(self.name, other, self.unit)
        else:
            b, unit = exact_number(other.magnitude), unit_of(self.unit, other.units, op)
    elif type(other) in NUMBERS or (type(other) is terms.Term and not other.keywords):
        if op in ("+", "-") and not self.unit.dimensionless:
            raise UnitError(
                f"cannot {'add' if op == '+' else 'subtract'} a bare number to {self.name} in"
                f" {self.unit:~P}"
            )
        b = other if type(other) in (int, Fraction, terms.Term) else exact_number(other)
    else:
        return None
    domain = self.raw_domain
    if len(parts) > 1:
        domain = domain + tuple(d for d in other.raw_domain if d not in domain)
    return made(self, name or self.name, arithmetic(self.term, b, op), unit, source=self.source,
                assumptions=self.assumptions, domain=domain, **sources(*parts))
