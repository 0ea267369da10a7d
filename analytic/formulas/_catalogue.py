"""The catalogue's registry: every formula is declared once, by name, in its topic module."""

from __future__ import annotations

from ..core.errors import UnknownNameError
from ..core.formula import Formula
from ..core.symbols import info
from ..core.terms import symbol

CATALOGUE: dict[str, Formula] = {}


def define(
    name,
    expr,
    unit,
    source,
    assumptions=(),
    description="",
    coefficient_unit="",
    keywords=(),
    domain=(),
    caveats=(),
) -> Formula:
    """Declare a catalogue formula. ``domain``: (condition, why) pairs where it holds (beyond them
    ``evaluate`` raises rather than return a number the formula does not mean, such as a negative
    time); ``caveats``: (condition, why) pairs where its approximation is good (beyond them it
    warns)."""
    if name in CATALOGUE:
        raise ValueError(f"formula {name!r} declared twice")
    f = Formula(
        name,
        expr,
        unit,
        source,
        tuple(assumptions),
        description,
        coefficient_unit,
        tuple(keywords),
        tuple(domain),
        frozenset({name}),
        tuple(caveats),
    )
    CATALOGUE[name] = f
    return f


def S(*keywords):
    """The symbols of the given keywords, as terms (a shorthand for the topic modules)."""
    out = tuple(symbol(info(k).keyword) for k in keywords)
    return out if len(out) > 1 else out[0]


def lookup(name: str) -> Formula:
    try:
        return CATALOGUE[name]
    except KeyError:
        raise UnknownNameError("formula", name, CATALOGUE) from None
