"""Formulas composed of formulas: an expression built from parts (their domains and sources carried
over), and a case analysis whose pieces are taken under conditions. Parts that hold numbers
(:mod:`.held`) give a formula holding a number, without sympy."""

from __future__ import annotations

from dataclasses import replace

from . import held
from .formula import DIMENSIONLESS, Formula, magnitude, sympy
from .provenance import merged_sources, source_map
from .terms import Term, piecewise
from .units import as_unit


def composed(name: str, expr, unit, *parts) -> Formula:
    """A Formula of ``expr``, an expression built from the Formulas ``parts``: their domains and
    sources carried over (what arithmetic on Formulas does, for expressions such as Max and
    Piecewise)."""
    parts = [p for p in parts if isinstance(p, Formula)]
    if held._data(expr) and all(held.holds_data(p) for p in parts):
        domain = tuple(dict.fromkeys(d for p in parts for d in p.raw_domain))
        return (
            held.made(parts[0], name, expr, as_unit(unit), coefficient_unit=DIMENSIONLESS,
                      domain=domain, **held.sources(*parts))
            if parts
            else Formula(name, expr, unit, "")
        )
    domain = tuple(dict.fromkeys(d for p in parts for d in p.domain))
    return Formula(
        name, expr, unit, "", domain=domain, **merged_sources(*(source_map(p) for p in parts))
    )


def cases(name: str, unit, *pieces) -> Formula:
    """A Formula that is the first of ``(Formula, condition)`` pieces whose condition holds (the
    last condition should be True). Conditions that are already decided collapse: numeric layouts
    get the plain expression, symbolic ones a Piecewise. Its sources are those of the pieces it may
    take, each under the condition that the piece is taken (``source_conditions``)."""
    taken = _taken(pieces)
    if taken is not None:
        return _as(name, unit, taken)
    if all(_data(f) and (type(c) is bool or held._data(c)) for f, c in pieces):
        return _term_cases(name, as_unit(unit), pieces)
    exprs, reachable, earlier = [], [], []
    for f, cond in pieces:
        exprs.append(
            (
                magnitude(name, f, as_unit(unit)) if isinstance(f, Formula) else sympy.sympify(f),
                cond,
            )
        )
        if cond is not False and cond != sympy.false:
            taken = sympy.And(cond, *(sympy.Not(c) for c in earlier))
            # a piece's domain and sources only where it is taken
            if isinstance(f, Formula) and taken != sympy.true:
                f = replace(
                    f,
                    domain=tuple((sympy.Or(sympy.Not(taken), d), *rest) for d, *rest in f.domain),
                    **merged_sources({s: sympy.And(taken, c) for s, c in source_map(f).items()}),
                )
            reachable.append(f)
        if cond is True or cond == sympy.true:
            break
        earlier.append(cond)
    return composed(name, sympy.Piecewise(*exprs), unit, *reachable)


def _data(f) -> bool:
    return held.holds_data(f) if isinstance(f, Formula) else held._data(f)


def _all(*conditions):
    """The conjunction of conditions (bools or terms), decided where they are."""
    if any(c is False for c in conditions):
        return False
    rest = [c for c in conditions if c is not True]
    return True if not rest else rest[0] if len(rest) == 1 else Term("and", tuple(rest))


def _term_cases(name: str, unit, pieces) -> Formula:
    """:func:`cases` of pieces holding data with conditions in a template's inputs: a piecewise
    term, each piece's domain and sources only where it is taken."""
    exprs, reachable, earlier = [], [], []
    for f, cond in pieces:
        if cond is False:
            continue
        exprs.append((held.in_unit(name, f, unit) if isinstance(f, Formula) else f, cond))
        taken = _all(cond, *(Term("not", (c,)) for c in earlier))
        if isinstance(f, Formula) and taken is not True:
            domain = tuple(
                (Term("or", (Term("not", (taken,)), d)) if d is not True else True, *rest)
                for d, *rest in f.raw_domain
            )
            where = merged_sources(
                {s: _all(taken, c) for s, c in source_map(f, data=True).items()}, data=True
            )
            f = held.made(f, f.name, f.term, f.unit, coefficient_unit=f.coefficient_unit,
                          domain=domain, **where)
        reachable.append(f)
        if cond is True:
            break
        earlier.append(cond)
    return composed(name, piecewise(exprs), unit, *reachable)


def _taken(pieces):
    """The piece taken where every condition up to the first that holds is a decided bool and that
    piece holds a number (a Formula, or a number as one); None otherwise."""
    for f, cond in pieces:
        if cond is True:
            if isinstance(f, Formula):
                return f if held.holds_number(f) else None
            return f if type(f) in held.NUMBERS else None
        if cond is not False:
            return None
    return None


def _as(name: str, unit, taken) -> Formula:
    """The taken piece as the case analysis's Formula: named ``name``, in ``unit``, its domain and
    sources kept."""
    unit = as_unit(unit)
    if not isinstance(taken, Formula):
        return Formula(name, taken, unit, "")
    return held.made(
        taken,
        name,
        held.in_unit(name, taken, unit),
        unit,
        coefficient_unit=DIMENSIONLESS,
        domain=tuple(dict.fromkeys(taken.raw_domain)),
        sources=taken.sources,
        source_conditions=taken.raw_source_conditions,
    )
