"""Provenance: the catalogue formulas an expression is composed from, each under the condition that
it is drawn on (a piece of a case analysis whose condition is still open), kept beside the
expression by :class:`analytic.core.formula.Formula` and carried through its arithmetic,
substitution and cases. The conditions are sympy's, or, for a formula holding data (``data``: a plan
template's, whose conditions are terms in its inputs), terms and Python's bools; sympy is imported
only for the first.
"""

from __future__ import annotations


def _truths(data: bool) -> tuple:
    """(true, false) as the conditions of ``data`` or of sympy are written."""
    if data:
        return True, False
    import sympy
    return sympy.true, sympy.false


def source_map(f, data: bool = False) -> dict:
    """source → the condition under which the Formula ``f`` draws on it (true: wherever it
    holds)."""
    true, _ = _truths(data)
    where = dict(f.raw_source_conditions if data else f.source_conditions)
    return {s: where.get(s, true) for s in f.sources}


def merged_sources(*maps: dict, data: bool = False) -> dict:
    """The ``sources`` and ``source_conditions`` of a Formula composed of parts with these
    :func:`source_map`s: a source is drawn on where any part draws on it; one whose condition is
    decided false is dropped."""
    from .algebra import Or
    true, false = _truths(data)
    out: dict = {}
    for m in maps:
        for s, c in m.items():
            prev = out.get(s)
            out[s] = c if prev is None or c == true else prev if prev == true else Or(prev, c)
    out = {s: c for s, c in out.items() if not c == false}
    return {"sources": frozenset(out),
            "source_conditions": tuple(sorted(((s, c) for s, c in out.items() if not c == true),
                                              key=lambda sc: sc[0]))}


__all__ = ["merged_sources", "source_map"]
