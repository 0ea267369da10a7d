"""A plan structure's programs: numbers for every numeric plan of it, without sympy.

Two plans of the same :func:`~.structure.structure` have expressions that differ only in their
numbers. Lowering the template's terms (:func:`.template.build`) once, at the structure's first
plan, gives :class:`~analytic.core.numeric.Program` data for all of them: every plan quantity (with
whether its formulas' domains hold), one stage's memory, search's outputs and the conditions of the
quantities' sources. The data is kept in memory and in the user's cache
(:mod:`analytic.core.cache`), validated when read back, and every plan of the structure, in this
process or another, evaluates it on Python floats: the same operations on the same numbers, so the
same bits.
:class:`Numbers` is one plan's view of the programs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core import cache, unit_table
from ..core.units import Quantity, Unit
from .inputs import Inputs
from .structure import STAGE, numbers, structure

if TYPE_CHECKING:
    from ..core.numeric import Program


@dataclass(frozen=True)
class Part:
    """One program and the names and units of its outputs (for quantities and a stage, the outputs
    are the values, then whether each one's formulas hold)."""

    program: Program
    outputs: tuple[str, ...]
    units: tuple[str, ...]

    @classmethod
    def from_json(cls, data, flags: bool) -> "Part":
        if not isinstance(data, dict) or set(data) != {"program", "outputs", "units"}:
            raise ValueError("not a program part")
        from ..core.numeric import Program

        prog, outputs, units = Program.from_json(data["program"]), data["outputs"], data["units"]
        if not (
            isinstance(outputs, list)
            and isinstance(units, list)
            and len(outputs) == len(units)
            and all(isinstance(x, str) and len(x) < 200 for x in outputs + units)
        ):
            raise ValueError("a part's outputs and units must be names")
        if not all(unit_table.plain(u) for u in units):
            raise ValueError("a part's units must be unit names")
        if len(prog.outputs) != len(outputs) * (2 if flags else 1):
            raise ValueError("a part's program gives other outputs")
        return cls(prog, tuple(outputs), tuple(units))

    def finite(self, values: dict) -> dict:
        """output → (value, unit) for each output that is finite with its formulas' domains
        holding."""
        get, nan, isfinite = values.get, math.nan, math.isfinite
        out = self.program.scalar([get(k, nan) for k in self.program.inputs])
        n = len(self.outputs)
        return {
            name: (v, u)
            for name, v, ok, u in zip(self.outputs, out[:n], out[n:], self.units)
            if ok and isfinite(v)
        }

    @functools.cached_property
    def _index(self) -> dict:
        return {name: i for i, name in enumerate(self.outputs)}

    def lazily(self, values: dict):
        """A function: output name → (value, unit), or None unless it is finite with its formulas'
        domains holding; the program's steps run as far as each name first asked needs
        (:meth:`Program.lazily`), with the bits of :meth:`finite`."""
        get, nan, isfinite = values.get, math.nan, math.isfinite
        prog = self.program
        regs = prog.lazily([get(k, nan) for k in prog.inputs])
        index, n, outputs, units = self._index, len(self.outputs), prog.outputs, self.units

        def hit(name: str):
            i = index.get(name)
            if i is None:
                return None
            r = regs.ask((i, n + i))
            v = r[outputs[i]]
            return (v, units[i]) if r[outputs[n + i]] and isfinite(v) else None

        return hit


@dataclass(frozen=True)
class Bundle:
    """A structure's programs (:func:`.template.build`'s data, validated)."""

    quantities: Part
    stage: Part
    search: Part
    source_names: tuple[str, ...]
    sources: tuple[tuple[int, ...], ...]  # by quantity: the sources it always draws on
    source_keys: tuple[tuple[int, int], ...]  # (quantity, source) drawn on where a condition holds
    source_conditions: Program | None  # those conditions

    @classmethod
    def from_json(cls, data) -> "Bundle":
        """A Bundle from :func:`.template.build`'s data, every field checked; ValueError
        otherwise."""
        if not isinstance(data, dict) or set(data) != {"quantities", "stage", "search", "sources"}:
            raise ValueError("not a structure's programs")
        quantities, stage = Part.from_json(data["quantities"], True), Part.from_json(
            data["stage"], True
        )
        search = Part.from_json(data["search"], False)
        src = data["sources"]
        if not isinstance(src, dict) or set(src) != {"names", "fixed", "conditional", "program"}:
            raise ValueError("not a structure's sources")
        names, fixed, keys = src["names"], src["fixed"], src["conditional"]
        n_q = len(quantities.outputs)
        if not (
            isinstance(names, list) and all(isinstance(s, str) and len(s) < 200 for s in names)
        ):
            raise ValueError("sources must be names")
        if not (
            isinstance(fixed, list)
            and len(fixed) == n_q
            and all(
                isinstance(f, list) and all(type(i) is int and 0 <= i < len(names) for i in f)
                for f in fixed
            )
        ):
            raise ValueError("each quantity's sources must index the names")
        if not (
            isinstance(keys, list)
            and all(
                isinstance(k, list)
                and len(k) == 2
                and type(k[0]) is int
                and type(k[1]) is int
                and 0 <= k[0] < n_q
                and 0 <= k[1] < len(names)
                for k in keys
            )
        ):
            raise ValueError("conditional sources must index the quantities and the names")
        from ..core.numeric import Program

        conditions = None if src["program"] is None else Program.from_json(src["program"])
        if len(keys) != (0 if conditions is None else len(conditions.outputs)):
            raise ValueError("one condition per conditional source")
        return cls(quantities, stage, search, tuple(names), tuple(map(tuple, fixed)),
                   tuple(map(tuple, keys)), conditions)


# structure → Bundle (None: the structure cannot be modelled), for this process
_BUNDLES: dict = {}


def bundle(inp: Inputs, lower=None) -> Bundle | None:
    """The programs of ``inp``'s structure, or None where it has no template or cannot be modelled:
    from memory, else from the user's cache, else ``lower()`` (:func:`.template.build`'s data, or
    None) now; None without ``lower``."""
    key = structure(inp)
    if key is None:
        return None
    if key in _BUNDLES:
        return _BUNDLES[key]
    path = cache.entry("plan", key)
    found = None
    data = cache.read_json(path) if path is not None else None
    if isinstance(data, dict) and data.get("structure") == key:
        try:
            found = Bundle.from_json(data["programs"])
        except (ValueError, KeyError):
            found = None
    if found is None:
        if lower is None:
            return None
        data = lower()
        if data is not None and path is not None:
            # a read-only cache costs a rebuild
            cache.write_json(
                path, {"structure": key, "programs": data}
            )
        found = None if data is None else Bundle.from_json(data)
    _BUNDLES[key] = found
    return found


class Numbers:
    """A numeric plan's numbers from its structure's programs (:func:`bundle`'s, with ``lower``):
    each method answers where the plan's structure has programs and the number is finite with its
    formulas' domains holding, and says None otherwise (the plan's expressions then give the number,
    or the error)."""

    def __init__(self, inp: Inputs, lower=None):
        self.bundle = bundle(inp, lower)
        self._values = numbers(inp) if self.bundle is not None else {}
        self._stages: dict = {}  # stage index → its parts, or None

    @functools.cached_property
    def _quantities(self):
        """name → (value, unit) or None, each computed when first asked."""
        if self.bundle is None:
            return lambda name: None
        return self.bundle.quantities.lazily(self._values)

    def has(self, name: str) -> bool:
        """Whether plan quantity ``name`` has a number from the programs."""
        return self._quantities(name) is not None

    def quantity(self, name: str):
        """Plan quantity ``name`` as the library's Quantity (in the unit it is computed in), or
        None."""
        hit = self._quantities(name)
        return None if hit is None else Quantity(hit[0], Unit.of(hit[1]))

    def count(self, name: str) -> int | None:
        """Plan quantity ``name``, a whole count, as an int; None otherwise (the expressions then
        say)."""
        hit = self._quantities(name)
        return None if hit is None or not float(hit[0]).is_integer() else int(hit[0])

    def sources(self, name: str) -> list[str] | None:
        """The catalogue formulas (sorted) plan quantity ``name`` is composed from, where the
        programs give its number; None otherwise (the expressions then say)."""
        flags = self._source_flags
        if flags is None or not self.has(name):
            return None
        b = self.bundle
        q = b.quantities.outputs.index(name)
        found = [*b.sources[q], *(s for (i, s), on in flags.items() if i == q and on)]
        return sorted(b.source_names[s] for s in found)

    @functools.cached_property
    def _source_flags(self) -> dict | None:
        """(quantity index, source index) → whether its condition holds; None without programs or
        with an input the conditions read missing."""
        b = self.bundle
        if b is None:
            return None
        if b.source_conditions is None:
            return {}
        values = [self._values.get(k, math.nan) for k in b.source_conditions.inputs]
        if any(v != v for v in values):
            return None
        return dict(zip(b.source_keys, b.source_conditions.scalar(values), strict=True))

    def stage(self, k: int) -> dict | None:
        """Pipeline stage ``k``'s memory parts and total as Quantities, or None unless all have
        numbers."""
        hits = self._stage(k)
        if hits is None:
            return None
        return {name: Quantity(v, Unit.of(u)) for name, (v, u) in hits.items()}

    def stage_total(self, k: int) -> float | None:
        """Bytes per GPU on pipeline stage ``k``, or None."""
        hits = self._stage(k)
        return None if hits is None else hits["total"][0]

    def _stage(self, k: int) -> dict | None:
        b = self.bundle
        if b is None:
            return None
        if k not in self._stages:
            hits = b.stage.finite({**self._values, STAGE: float(k)})
            self._stages[k] = hits if len(hits) == len(b.stage.outputs) else None
        return self._stages[k]


__all__ = ["Bundle", "Numbers", "Part", "bundle"]
