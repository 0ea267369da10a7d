"""Formula: a named sympy expression whose symbols carry units, with its source and assumptions.

A symbol stands for the magnitude of its quantity in the unit declared in :mod:`analytic.core.symbols`;
``Formula.unit`` is the unit of the result. Numbers stay exact (sympy rationals) until
``evaluate`` returns a :class:`pint.Quantity`.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, replace
from functools import cached_property

import sympy

from . import symbols as _symbols
from .dimensions import DIMENSIONLESS, units_of
from .errors import ApproximationWarning, FreeSymbolError, InputError, UnitError, UnknownNameError
from .expressions import symbolic
from .lowering import program
from .provenance import merged_sources, source_map
from .units import Q_, as_unit, pint, strip_counts
from .values import count, exact, in_range, is_number, unit_of


def magnitude(keyword: str, value, unit: pint.Unit | None = None):
    """``value`` as an exact sympy magnitude in ``keyword``'s declared unit (or in ``unit``).

    Accepts what :func:`analytic.core.symbols.read_magnitude` reads (a pint Quantity, a string of one number
    and one unit, a bare number for dimensionless symbols, pure counts and FLOPs), a sympy expression
    (taken as already in the symbol's unit) or a Formula (converted from its unit). A number for a
    declared keyword (``unit`` not given) must lie in the symbol's domain (:mod:`analytic.core.values`)."""
    if isinstance(value, Formula):
        target = _symbols.info(keyword).unit if unit is None else unit
        try:
            factor = Q_(1, value.unit).to(target).magnitude
        except pint.DimensionalityError:
            raise UnitError(f"{keyword}: expected {_symbols.wanted(target)}, "
                            f"got formula {value.name!r} in {value.unit:~P}") from None
        return value.expr * exact(factor)
    if isinstance(value, sympy.Basic):
        if not value.is_number:
            return _symbols.canonical(value)
        if unit is None:
            return _checked(keyword, value)
        if value.is_negative:
            raise InputError(f"{keyword}: expected a non-negative value, got {value!r}")
        return in_range(keyword, value, value)
    return exact(_symbols.read_magnitude(keyword, value, unit))


@functools.lru_cache(maxsize=1 << 14)
def _checked(keyword: str, value: sympy.Expr) -> sympy.Expr:
    """A sympy number for a declared keyword, checked once per (keyword, value): plans bind the same
    exact inputs into many formulas."""
    try:
        return _symbols.info(keyword).check(exact(value))
    except InputError as exc:
        raise InputError(f"{keyword}: {exc}" if not str(exc).startswith(keyword) else str(exc)) from None


def substituted(expr, repl: dict):
    """``expr.xreplace(repl)``, except that a Max or Min whose new arguments are not all numbers is left
    unevaluated: deciding which of two large expressions in symbols is larger (sympy's local zeros) is slow
    and rarely possible, and substituting numbers later evaluates it."""
    if expr in repl:
        return repl[expr]
    if not expr.args:
        return expr
    args = [substituted(a, repl) for a in expr.args]
    if all(a is b for a, b in zip(args, expr.args)):
        return expr
    if expr.func is sympy.Max:
        return lazy_max(*args)
    if expr.func is sympy.Min:
        return lazy_min(*args)
    return expr.func(*args)


def lazy_max(*args):
    """sympy.Max, left unevaluated while symbols remain: the catalogue's, the plan's and a substitution's
    maxima of expressions in symbols; substituting numbers evaluates it."""
    return sympy.Max(*args, evaluate=all(is_number(a) for a in args))


def lazy_min(*args):
    """sympy.Min, left unevaluated while symbols remain (see :func:`lazy_max`)."""
    return sympy.Min(*args, evaluate=all(is_number(a) for a in args))


@dataclass(frozen=True, eq=False)
class Formula:
    """A named expression with units, a source and its assumptions.

    ``coefficient_unit`` is the unit carried by the numeric coefficients (16Ψ is 16 bytes per
    parameter: ``byte``); the catalogue's dimension check multiplies it in."""

    name: str
    expr: sympy.Expr
    unit: pint.Unit
    source: str
    assumptions: tuple[str, ...] = ()
    description: str = ""
    coefficient_unit: pint.Unit | None = DIMENSIONLESS
    keywords: tuple[str, ...] = ()  # inputs accepted even where the value does not depend on them
    domain: tuple = ()  # (condition, why[, formula]): where it holds; evaluating outside it is an InputError
    sources: frozenset = frozenset()  # the catalogue formulas this one is composed from (itself, for one of them)
    caveats: tuple = ()  # (condition, why): where the approximation is good; evaluating this formula outside it
    # warns (ApproximationWarning) but answers (composed formulas do not carry them)
    # (source, condition) for the sources drawn on only where a condition holds (a symbolic piece of ``cases``)
    source_conditions: tuple = ()

    def __post_init__(self):
        expr = symbolic(self.expr, self.name) if isinstance(self.expr, str) else sympy.sympify(self.expr)  # no eval
        object.__setattr__(self, "expr", _symbols.canonical(expr))
        object.__setattr__(self, "domain", tuple((_symbols.canonical(sympy.sympify(c)), why, *(origin or (self.name,)))
                                                 for c, why, *origin in self.domain))
        object.__setattr__(self, "caveats", tuple((_symbols.canonical(sympy.sympify(c)), why)
                                                  for c, why in self.caveats))
        object.__setattr__(self, "source_conditions", tuple((s, _symbols.canonical(sympy.sympify(c)))
                                                            for s, c in self.source_conditions))
        object.__setattr__(self, "unit", as_unit(self.unit))
        if self.coefficient_unit is not None:
            object.__setattr__(self, "coefficient_unit", as_unit(self.coefficient_unit))
        object.__setattr__(self, "assumptions", tuple(self.assumptions))

    # --- what it is -------------------------------------------------------------------------
    @cached_property
    def symbols(self) -> dict[str, pint.Unit]:
        """keyword → unit of every free symbol, in the notation table's order."""
        free = {_symbols.info(s).keyword for s in self.expr.free_symbols} | set(self.keywords)
        return {kw: i.unit for kw, i in _symbols.REGISTRY.items() if kw in free}

    def latex(self, digits: int | None = None) -> str:
        """The expression in LaTeX; with ``digits``, its numbers as floats of that many significant digits."""
        return sympy.latex((self.n(digits) if digits is not None else self).expr)

    def n(self, digits: int = 4) -> "Formula":
        """The same formula with its exact numbers as floats of ``digits`` significant digits, to read."""
        return replace(self, expr=self.expr.evalf(count("digits", digits, allow_symbol=False)))

    def _repr_latex_(self) -> str:
        unit = f"{self.unit:~L}" if not self.unit.dimensionless else ""
        return f"${self.latex()}\\;\\left[{unit}\\right]$"

    def __repr__(self) -> str:
        return f"Formula({self.name!r}: {self.expr} [{self.unit:~P}])"

    def pretty(self) -> str:
        return sympy.pretty(self.expr, use_unicode=True)

    # --- evaluation -------------------------------------------------------------------------
    def _check_keywords(self, values: dict, *, complete: bool) -> None:
        for kw in values:
            if kw not in self.symbols:
                if kw in _symbols.REGISTRY:
                    raise UnknownNameError(f"keyword for {self.name} (it takes {', '.join(self.symbols) or 'none'})",
                                           kw, self.symbols)
                raise UnknownNameError(f"keyword for {self.name}", kw, self.symbols)
        if complete:
            missing = [kw for kw in self.symbols if kw not in values]
            if missing:
                raise InputError(f"{self.name}: missing {', '.join(missing)} "
                                 f"(it takes {', '.join(self.symbols)})")

    def _replacements(self, values: dict) -> dict:
        return {_symbols.sym(kw): magnitude(kw, v) for kw, v in values.items()}

    def _within(self, repl: dict | None = None, *, strict: bool = True) -> tuple:
        """The domain with ``repl`` substituted, the conditions that now hold dropped; ``strict``:
        an InputError where a condition is decided false (``subs`` keeps it, for ``evaluate`` and
        ``value`` to raise: a plan binds formulas for choices it may not take)."""
        out = []
        for cond, why, origin in self.domain:
            c = cond.xreplace(repl) if repl else cond
            if c == sympy.false and strict:
                where = f" (in {self.name})" if self.name != origin else ""
                raise InputError(f"{origin}: outside the formula's domain{where}: {why}")
            if c != sympy.true:
                out.append((c, why, origin))
        return tuple(out)

    def evaluate(self, **values) -> pint.Quantity:
        """The value as a Quantity in ``self.unit``; every free symbol must be given."""
        self._check_keywords(values, complete=True)
        repl = self._replacements(values)
        self._within(repl)
        result = self.expr.xreplace(repl)
        if result.free_symbols:
            left = sorted(_symbols.keyword_of(x) for x in result.free_symbols)
            raise FreeSymbolError(f"{self.name}: free symbols remain: {', '.join(left)}; give them numbers, or use "
                                  ".subs() to keep them")
        self._warn_caveats(repl)
        return Q_(to_float(result, self.name), self.unit)

    def _warn_caveats(self, repl: dict | None = None) -> None:
        """An ApproximationWarning for each caveat whose condition ``repl`` decides false."""
        for cond, why in self.caveats:
            if (cond.xreplace(repl) if repl else cond) == sympy.false:
                warnings.warn(f"{self.name}: {why}", ApproximationWarning, stacklevel=3)

    __call__ = evaluate

    def value(self) -> pint.Quantity:
        """The value of a formula without free symbols."""
        if self.expr.free_symbols:
            raise FreeSymbolError(f"{self.name}: free symbols remain: {', '.join(self.symbols)}; "
                                  "give them numbers or use .expr")
        self._within()
        self._warn_caveats()
        return Q_(to_float(self.expr, self.name), self.unit)

    def subs(self, **values) -> "Formula":
        """Partial application: the given symbols replaced (by numbers, Quantities, expressions or
        Formulas), the rest still free."""
        self._check_keywords(values, complete=False)
        repl = self._replacements(values)
        own = {s: c.xreplace(repl) for s, c in source_map(self).items()}
        sources = merged_sources(own, *(source_map(v) for v in values.values() if isinstance(v, Formula)))
        return replace(self, expr=substituted(self.expr, repl), domain=self._within(repl, strict=False), **sources,
                       caveats=tuple((c.xreplace(repl), why) for c, why in self.caveats))

    def bind(self, values: dict) -> "Formula":
        """``subs`` with the entries of ``values`` that this formula takes (the rest ignored)."""
        return self.subs(**{k: v for k, v in values.items() if k in self.symbols})

    def diff(self, keyword: str) -> "Formula":
        """∂/∂keyword, in ``unit / unit(keyword)``."""
        s = _symbols.sym(keyword)
        return Formula(f"∂({self.name})/∂{keyword}", sympy.diff(self.expr, s),
                       self.unit / _symbols.info(keyword).unit, self.source, self.assumptions,
                       coefficient_unit=None, domain=self.domain, sources=self.sources,
                       source_conditions=self.source_conditions)

    def lambdify(self):
        """A numpy function of keyword arguments (magnitudes in the symbols' units)."""
        return self._compiled

    @cached_property
    def _compiled(self):
        keywords = list(self.symbols)
        fn = program([self.expr], {_symbols.sym(k): k for k in keywords})
        name = self.name

        def compiled(**values):
            missing = [k for k in keywords if k not in values]
            extra = [k for k in values if k not in keywords]
            if missing or extra:
                raise InputError(f"{name}: lambdified function takes {', '.join(keywords)}"
                                 + (f"; missing {', '.join(missing)}" if missing else "")
                                 + (f"; unknown {', '.join(extra)}" if extra else ""))
            args = [values[k] for k in keywords]
            if all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args):
                return fn.scalar([float(a) for a in args])[0]  # numbers: Python floats, no array per step
            return fn(*args)[0]

        compiled.keywords = tuple(keywords)
        compiled.__doc__ = f"{name} [{self.unit:~P}] of {', '.join(keywords)}"
        return compiled

    # --- dimensions -------------------------------------------------------------------------
    def check_dimensions(self) -> pint.Unit:
        """Substitute every symbol's unit (counts as pure numbers); raise UnitError unless every sum
        is homogeneous and the result times ``coefficient_unit`` has the dimension of ``unit``."""
        try:
            got = units_of(self.expr)
        except pint.DimensionalityError as exc:
            raise UnitError(f"{self.name}: terms of different dimensions are added: {exc}") from None
        got_unit = Q_(1, strip_counts(got.units * self.coefficient_unit))
        want = strip_counts(self.unit)
        if got_unit.dimensionality != Q_(1, want).dimensionality:
            raise UnitError(f"{self.name}: expression has {got_unit.dimensionality}, "
                            f"declared unit {self.unit:~P} has {want.dimensionality}")
        return self.unit

    # --- arithmetic (composition) -----------------------------------------------------------
    def _combine(self, other, op, name):
        if isinstance(other, Formula):
            if op in ("+", "-"):
                other_expr = magnitude(other.name, other, self.unit)
                unit = self.unit
            else:
                other_expr, unit = other.expr, (self.unit * other.unit if op == "*" else self.unit / other.unit)
        elif isinstance(other, pint.Quantity):
            if op in ("+", "-"):
                other_expr, unit = magnitude(self.name, other, self.unit), self.unit
            else:
                other_expr = exact(other.magnitude)
                unit = self.unit * other.units if op == "*" else self.unit / other.units
        else:
            other_expr = exact(other) if not isinstance(other, sympy.Basic) else other
            if op in ("+", "-") and not self.unit.dimensionless:
                raise UnitError(f"cannot {'add' if op == '+' else 'subtract'} a bare number to {self.name} in {self.unit:~P}")
            unit = self.unit
        expr = {"+": self.expr + other_expr, "-": self.expr - other_expr,
                "*": self.expr * other_expr, "/": self.expr / other_expr}[op]
        if isinstance(unit, pint.Quantity):
            unit = unit.units
        domain = self.domain + tuple(d for d in getattr(other, "domain", ()) if d not in self.domain)
        return Formula(name or self.name, expr, unit, self.source, self.assumptions, coefficient_unit=None,
                       domain=domain, **merged_sources(*(source_map(f) for f in (self, other) if isinstance(f, Formula))))

    def __add__(self, other):
        return self._combine(other, "+", None)

    def __sub__(self, other):
        return self._combine(other, "-", None)

    def __mul__(self, other):
        return self._combine(other, "*", None)

    def __truediv__(self, other):
        return self._combine(other, "/", None)

    def __rmul__(self, other):
        return self._combine(other, "*", None)

    def renamed(self, name: str, source: str | None = None, assumptions=None, description=None) -> "Formula":
        return replace(self, name=name, source=source or self.source,
                       assumptions=tuple(assumptions) if assumptions is not None else self.assumptions,
                       description=self.description if description is None else description)

    def to(self, unit) -> "Formula":
        """The same quantity expressed in another unit."""
        unit = unit if isinstance(unit, pint.Unit) else unit_of("unit", str(unit))
        try:
            factor = Q_(1, self.unit).to(unit).magnitude
        except pint.DimensionalityError:
            raise UnitError(f"{self.name}: cannot express {self.unit:~P} in {unit:~P}") from None
        return replace(self, expr=self.expr * exact(factor), unit=unit, coefficient_unit=None)


def composed(name: str, expr, unit, *parts) -> Formula:
    """A Formula of ``expr``, an expression built from the Formulas ``parts``: their domains and
    sources carried over (what arithmetic on Formulas does, for expressions such as Max and Piecewise)."""
    parts = [p for p in parts if isinstance(p, Formula)]
    domain = tuple(dict.fromkeys(d for p in parts for d in p.domain))
    return Formula(name, expr, unit, "", domain=domain, **merged_sources(*(source_map(p) for p in parts)))


def cases(name: str, unit, *pieces) -> Formula:
    """A Formula that is the first of ``(Formula, condition)`` pieces whose condition holds (the last
    condition should be True). Conditions that are already decided collapse: numeric layouts get
    the plain expression, symbolic ones a Piecewise. Its sources are those of the pieces it may take,
    each under the condition that the piece is taken (``source_conditions``)."""
    exprs, reachable, earlier = [], [], []
    for f, cond in pieces:
        exprs.append((magnitude(name, f, as_unit(unit)) if isinstance(f, Formula) else sympy.sympify(f), cond))
        if cond is not False and cond != sympy.false:
            taken = sympy.And(cond, *(sympy.Not(c) for c in earlier))
            if isinstance(f, Formula) and taken != sympy.true:  # a piece's domain and sources only where it is taken
                f = replace(f, domain=tuple((sympy.Or(sympy.Not(taken), d), *rest) for d, *rest in f.domain),
                            **merged_sources({s: sympy.And(taken, c) for s, c in source_map(f).items()}))
            reachable.append(f)
        if cond is True or cond == sympy.true:
            break
        earlier.append(cond)
    return composed(name, sympy.Piecewise(*exprs), unit, *reachable)


def to_float(expr: sympy.Expr, name: str = "expression") -> float:
    """An exact sympy number as a float (the edge where exactness ends)."""
    if isinstance(expr, sympy.Rational):  # one correctly rounded division
        try:
            return expr.p / expr.q
        except OverflowError:
            pass  # past the float range: said below
    try:
        val = complex(sympy.N(expr, 30))
    except TypeError:
        raise FreeSymbolError(f"{name}: cannot evaluate {expr}") from None
    if val.imag != 0 or not math.isfinite(val.real):
        raise InputError(f"{name}: the result is not a finite real number ({expr})")
    return val.real
