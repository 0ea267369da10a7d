"""Provenance: the catalogue formulas an expression is composed from, each under the condition that
it is drawn on (a piece of a case analysis whose condition is still open), kept beside the expression
by :class:`analytic.core.formula.Formula` and carried through its arithmetic, substitution and cases."""

from __future__ import annotations

import sympy


def source_map(f) -> dict:
    """source → the condition under which the Formula ``f`` draws on it (sympy.true: wherever it holds)."""
    if not f.source_conditions:
        return dict.fromkeys(f.sources, sympy.true)
    where = dict(f.source_conditions)
    return {s: where.get(s, sympy.true) for s in f.sources}


def merged_sources(*maps: dict) -> dict:
    """The ``sources`` and ``source_conditions`` of a Formula composed of parts with these
    :func:`source_map`s: a source is drawn on where any part draws on it; one whose condition is
    decided false is dropped."""
    out: dict = {}
    for m in maps:
        for s, c in m.items():
            prev = out.get(s)
            out[s] = c if prev is None or c == sympy.true else prev if prev == sympy.true else sympy.Or(prev, c)
    out = {s: c for s, c in out.items() if c != sympy.false}
    return {"sources": frozenset(out), "source_conditions": tuple(sorted((s, c) for s, c in out.items() if c != sympy.true))}


__all__ = ["merged_sources", "source_map"]
