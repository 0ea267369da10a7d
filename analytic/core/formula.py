"""Formula: a named sympy expression whose symbols carry units, with its source and assumptions.

A symbol stands for the magnitude of its quantity in the unit declared in
:mod:`analytic.core.symbols`; ``Formula.unit`` is the unit of the result
(:class:`analytic.core.quantity.Unit`, which pint reads as its own). Numbers stay exact (sympy
rationals) until ``evaluate`` returns a :class:`pint.Quantity`.

A formula declared on terms (:mod:`analytic.core.terms`, as the catalogue declares them) makes its
sympy expression, domain and caveats when one of them is first read, and evaluates at numbers
without sympy.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cached_property

from . import held, replay, terms
from . import symbols as _symbols
from .errors import FreeSymbolError, InputError, UnitError, UnknownNameError
from .units import DIMENSIONLESS, DimensionalityError, Q, Unit, as_unit, data, is_quantity, is_unit
from .values import count, exact, exact_number, in_range, is_sympy, unit_of


class _Sympy:
    """sympy, imported when first used: a formula declared on terms is evaluated at numbers without
    it."""

    def __getattr__(self, name):
        import sympy as module

        value = getattr(module, name)
        setattr(self, name, value)
        return value


sympy = _Sympy()


def magnitude(keyword: str, value, unit: Unit | None = None):
    """``value`` as an exact sympy magnitude in ``keyword``'s declared unit (or in ``unit``).

    Accepts what :func:`analytic.core.symbols.read_magnitude` reads (a pint Quantity, a string of
    one number and one unit, a bare number for dimensionless symbols, pure counts and FLOPs), a
    sympy expression (taken as already in the symbol's unit) or a Formula (converted from its unit).
    A number for a declared keyword (``unit`` not given) must lie in the symbol's domain
    (:mod:`analytic.core.values`)."""
    if isinstance(value, Formula):
        target = _symbols.info(keyword).unit if unit is None else unit
        return value.expr * exact(held.unit_factor(keyword, value, target))
    if is_sympy(value):
        if not value.is_number:
            return _symbols.canonical(value)
        if unit is None:
            return held.checked(keyword, value)
        if value.is_negative:
            raise InputError(f"{keyword}: expected a non-negative value, got {value!r}")
        return in_range(keyword, value, value)
    return exact(_symbols.read_magnitude(keyword, value, unit))


@dataclass(frozen=True, eq=False)
class Formula:
    """A named expression with units, a source and its assumptions.

    ``coefficient_unit`` is the unit carried by the numeric coefficients (16Ψ is 16 bytes per
    parameter: ``byte``); the catalogue's dimension check multiplies it in."""

    name: str
    expr: sympy.Expr = held.Declared()
    unit: Unit
    source: str
    assumptions: tuple[str, ...] = ()
    description: str = ""
    coefficient_unit: Unit | None = DIMENSIONLESS
    keywords: tuple[str, ...] = ()  # inputs accepted even where the value does not depend on them
    # (condition, why[, formula]): where it holds; evaluating outside it is an InputError
    domain: tuple = held.Declared(
        ()
    )
    # the catalogue formulas this one is composed from (itself, for one of them)
    sources: frozenset = frozenset()
    # (condition, why): where the approximation is good; evaluating this formula outside it
    caveats: tuple = held.Declared(
        ()
    )
    # warns (ApproximationWarning) but answers (composed formulas do not carry them) (source,
    # condition) for the sources drawn on only where a condition holds (a symbolic piece of
    # ``cases``)
    source_conditions: tuple = held.Declared(())

    def __post_init__(self):
        d = self.__dict__
        raw = tuple(d[k] for k in held.SYMPY_FIELDS)
        if held.on_terms(raw[0], [c for c, *_ in raw[1] + raw[2]] + [c for _, c in raw[3]]):
            for k in held.SYMPY_FIELDS:  # made by _realise when first read
                del d[k]
            domain = tuple((c, why, *(origin or (self.name,))) for c, why, *origin in raw[1])
            d["_terms"] = (raw[0], domain, *raw[2:])
        else:
            self._realise(raw)
        object.__setattr__(self, "unit", as_unit(self.unit))
        if self.coefficient_unit is not None:
            object.__setattr__(self, "coefficient_unit", as_unit(self.coefficient_unit))
        object.__setattr__(self, "assumptions", tuple(self.assumptions))

    def _realise(self, raw: tuple | None = None) -> None:
        """The sympy expression, domain, caveats and source conditions, canonical (from ``raw`` or
        the terms)."""
        expr, domain, caveats, source_conditions = self.__dict__["_terms"] if raw is None else raw
        if isinstance(expr, str):
            from .expressions import symbolic

            expr = symbolic(expr, self.name)  # parsed, never evaluated

        def canonical(x):
            return _symbols.canonical(sympy.sympify(replay.to_sympy(x)))

        d = self.__dict__
        d["expr"] = canonical(expr)
        d["domain"] = tuple(
            (canonical(c), why, *(origin or (self.name,))) for c, why, *origin in domain
        )
        d["caveats"] = tuple((canonical(c), why) for c, why in caveats)
        d["source_conditions"] = tuple((s, canonical(c)) for s, c in source_conditions)

    @property
    def raw(self) -> tuple:
        """(expression, domain, caveats, source conditions) as held: terms or numbers for a formula
        declared on terms or holding numbers (:mod:`.held`), else sympy."""
        d = self.__dict__
        return d["_terms"] if "_terms" in d else tuple(d[k] for k in held.SYMPY_FIELDS)

    @property
    def term(self):
        """The expression as held: a number (a numeric plan's), a term, or a sympy expression."""
        d = self.__dict__
        return d["_terms"][0] if "_terms" in d else d["expr"]

    @property
    def raw_domain(self) -> tuple:
        return self.raw[1]

    @property
    def raw_caveats(self) -> tuple:
        return self.raw[2]

    @property
    def raw_source_conditions(self) -> tuple:
        return self.raw[3]

    def replaced(self, **changes) -> "Formula":
        """``dataclasses.replace`` that keeps what the formula holds as it is (no sympy made for
        it)."""
        d = self.__dict__
        out = {f.name: d[f.name] for f in fields(Formula) if f.name not in held.SYMPY_FIELDS}
        out.update(zip(held.SYMPY_FIELDS, self.raw))
        out.update(changes)
        return Formula(**out)

    # --- what it is -------------------------------------------------------------------------
    @cached_property
    def symbols(self) -> dict[str, Unit]:
        """keyword → unit of every free symbol, in the notation table's order."""
        declared = self.__dict__.get("_terms")
        if declared is not None:
            free = terms.keywords(declared[0]) | set(self.keywords)
        else:
            free = {_symbols.info(s).keyword for s in self.expr.free_symbols} | set(self.keywords)
        return {kw: i.unit for kw, i in _symbols.REGISTRY.items() if kw in free}

    def latex(self, digits: int | None = None) -> str:
        """The expression in LaTeX; with ``digits``, its numbers as floats of that many significant
        digits."""
        return sympy.latex((self.n(digits) if digits is not None else self).expr)

    def n(self, digits: int = 4) -> "Formula":
        """The same formula with its exact numbers as floats of ``digits`` significant digits, to
        read."""
        return self.replaced(expr=self.expr.evalf(count("digits", digits, allow_symbol=False)))

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
                    raise UnknownNameError(
                        f"keyword for {self.name} (it takes {', '.join(self.symbols) or 'none'})",
                        kw,
                        self.symbols,
                    )
                raise UnknownNameError(f"keyword for {self.name}", kw, self.symbols)
        if complete:
            missing = [kw for kw in self.symbols if kw not in values]
            if missing:
                raise InputError(
                    f"{self.name}: missing {', '.join(missing)} "
                    f"(it takes {', '.join(self.symbols)})"
                )

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
                raise held.outside(self.name, origin, why)
            if c != sympy.true:
                out.append((c, why, origin))
        return tuple(out)

    def evaluate(self, **values):
        """The value as a Quantity in ``self.unit``; every free symbol must be given."""
        self._check_keywords(values, complete=True)
        if "_terms" in self.__dict__:
            at = held.bound(self, values)
            if at is not None:
                return held.value(at)
        repl = self._replacements(values)
        self._within(repl)
        result = self.expr.xreplace(repl)
        if result.free_symbols:
            left = sorted(_symbols.keyword_of(x) for x in result.free_symbols)
            raise FreeSymbolError(
                f"{self.name}: free symbols remain: {', '.join(left)}; give them numbers, or use "
                ".subs() to keep them"
            )
        self._warn_caveats(repl)
        return Q(_expressions().to_float(result, self.name), self.unit)

    def _warn_caveats(self, repl: dict | None = None) -> None:
        """An ApproximationWarning for each caveat whose condition ``repl`` decides false."""
        for cond, why in self.caveats:
            if (cond.xreplace(repl) if repl else cond) == sympy.false:
                held.approximate(self.name, why)

    __call__ = evaluate

    def value(self):
        """The value of a formula without free symbols."""
        if "_terms" in self.__dict__:
            at = self if held.holds_number(self) else held.bound(self, {})
            if at is not None:
                return held.value(at)
        if self.expr.free_symbols:
            raise FreeSymbolError(
                f"{self.name}: free symbols remain: {', '.join(self.symbols)}; "
                "give them numbers or use .expr"
            )
        self._within()
        self._warn_caveats()
        return Q(_expressions().to_float(self.expr, self.name), self.unit)

    def subs(self, **values) -> "Formula":
        """Partial application: the given symbols replaced (by numbers, Quantities, expressions or
        Formulas), the rest still free."""
        self._check_keywords(values, complete=False)
        if "_terms" in self.__dict__:
            at = held.bound(self, values)
            if at is not None:
                return at
        from .provenance import merged_sources, source_map

        repl = self._replacements(values)
        own = {s: c.xreplace(repl) for s, c in source_map(self).items()}
        sources = merged_sources(
            own, *(source_map(v) for v in values.values() if isinstance(v, Formula))
        )
        return replace(
            self,
            expr=_expressions().substituted(self.expr, repl),
            domain=self._within(repl, strict=False),
            **sources,
            caveats=tuple((c.xreplace(repl), why) for c, why in self.caveats),
        )

    def bind(self, values: dict) -> "Formula":
        """``subs`` with the entries of ``values`` that this formula takes (the rest ignored), a
        plain number being a magnitude in its symbol's unit (as a plan holds its inputs)."""
        taken = {k: v for k, v in values.items() if k in self.symbols}
        if "_terms" in self.__dict__:
            at = held.bound(self, taken, magnitudes=True)
            if at is not None:
                return at
        return self.subs(
            **{k: exact(v) if type(v) in held.NUMBERS else v for k, v in taken.items()}
        )

    def diff(self, keyword: str) -> "Formula":
        """∂/∂keyword, in ``unit / unit(keyword)``."""
        s = _symbols.sym(keyword)
        return Formula(
            f"∂({self.name})/∂{keyword}", sympy.diff(self.expr, s),
            self.unit / _symbols.info(keyword).unit, self.source, self.assumptions,
            coefficient_unit=None, domain=self.domain, sources=self.sources,
            source_conditions=self.source_conditions,
        )

    def lambdify(self):
        """A numpy function of keyword arguments (magnitudes in the symbols' units)."""
        return self._compiled

    @cached_property
    def _compiled(self):
        from .lowering import keyword_function

        return keyword_function(self)

    # --- dimensions -------------------------------------------------------------------------
    def check_dimensions(self) -> Unit:
        """Substitute every symbol's unit (counts as pure numbers); raise UnitError unless every sum
        is homogeneous and the result times ``coefficient_unit`` has the dimension of ``unit``."""
        from .dimensions import check_dimensions

        return check_dimensions(self)

    # --- arithmetic (composition) -----------------------------------------------------------
    def _combine(self, other, op, name):
        if held.holds_data(self):
            out = held.combined(self, other, op, name)
            if out is not None:
                return out
        from .provenance import merged_sources, source_map

        if isinstance(other, Formula):
            if op in ("+", "-"):
                other_expr = magnitude(other.name, other, self.unit)
                unit = self.unit
            else:
                other_expr, unit = other.expr, (
                    self.unit * other.unit if op == "*" else self.unit / other.unit
                )
        elif is_quantity(other):
            other = data(other)
            if op in ("+", "-"):
                other_expr, unit = magnitude(self.name, other, self.unit), self.unit
            else:
                other_expr = exact(other.magnitude)
                unit = self.unit * other.units if op == "*" else self.unit / other.units
        else:
            other_expr = exact(other) if not is_sympy(other) else other
            if op in ("+", "-") and not self.unit.dimensionless:
                raise UnitError(
                    f"cannot {'add' if op == '+' else 'subtract'} a bare number to {self.name} in"
                    f" {self.unit:~P}"
                )
            unit = self.unit
        expr = {
            "+": self.expr + other_expr,
            "-": self.expr - other_expr,
            "*": self.expr * other_expr,
            "/": self.expr / other_expr,
        }[op]
        domain = self.domain + tuple(
            d for d in getattr(other, "domain", ()) if d not in self.domain
        )
        return Formula(
            name or self.name,
            expr,
            unit,
            self.source,
            self.assumptions,
            coefficient_unit=None,
            domain=domain,
            **merged_sources(*(source_map(f) for f in (self, other) if isinstance(f, Formula))),
        )

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

    def renamed(
        self, name: str, source: str | None = None, assumptions=None, description=None
    ) -> "Formula":
        return self.replaced(
            name=name,
            source=source or self.source,
            assumptions=tuple(assumptions) if assumptions is not None else self.assumptions,
            description=self.description if description is None else description,
        )

    def to(self, unit) -> "Formula":
        """The same quantity expressed in another unit."""
        unit = as_unit(unit) if is_unit(unit) else unit_of("unit", str(unit))
        try:
            factor = self.unit.factor(unit)
        except DimensionalityError:
            raise UnitError(f"{self.name}: cannot express {self.unit:~P} in {unit:~P}") from None
        if held.holds_data(self):
            return self.replaced(
                expr=held.arithmetic(self.term, exact_number(factor), "*"),
                unit=unit,
                coefficient_unit=None,
            )
        return replace(self, expr=self.expr * exact(factor), unit=unit, coefficient_unit=None)


# END


def _expressions():
    """:mod:`.expressions` (sympy's), imported where a formula holds a sympy expression."""
    from . import expressions

    return expressions
