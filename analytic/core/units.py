"""Units and quantities as the library gives them.

The library computes with units and quantities as data (:mod:`.quantity`, read from ``units.txt``,
where ``1 byte + 1 FLOP`` raises) and gives pint's objects where a user reads one: :func:`shown` and
:func:`Q` make them, in the user's registry (:mod:`.registry`). pint is imported when the first is
made (``ureg``, ``Q_`` and ``pint`` here are read on use), so the command line, which prints
quantities as data (:func:`as_data`), never imports it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
from collections.abc import Mapping

from .quantity import DIMENSIONLESS, Quantity, Unit, converted
from .registry import pint_quantity, registry, use_registry
from .unit_table import DimensionalityError, UndefinedUnit

__all__ = ["DIMENSIONLESS", "DimensionalityError", "Q", "Quantity", "Shown", "ShownMapping",
           "UndefinedUnit", "Unit", "as_data", "as_unit", "data", "is_count", "is_quantity",
           "is_unit", "readable", "registry", "shown", "strip_counts", "takes_bare_number",
           "use_registry"]


def __getattr__(name):
    if name == "ureg":
        return registry()
    if name == "Q_":
        return registry().Quantity
    if name == "pint":
        registry()
        return sys.modules["pint"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_AS_DATA = contextvars.ContextVar("analytic_units_as_data", default=False)


@contextlib.contextmanager
def as_data():
    """Within it, the quantities and units the library gives are its own (:mod:`.quantity`), not
    pint's."""
    token = _AS_DATA.set(True)
    try:
        yield
    finally:
        _AS_DATA.reset(token)


def shown(x):
    """A Unit or Quantity as the library gives it: pint's, or itself within :func:`as_data`."""
    if _AS_DATA.get() or not isinstance(x, (Unit, Quantity)):
        return x
    return x.pint()


#: the unit a person reads a plan's quantity in, by its kind (computed in bytes and FLOPs)
READABLE = {"byte": "GB", "byte / second": "GB/s", "FLOP / second": "TFLOP/s"}


def readable(x):
    """A plan's quantity as the library gives it (:func:`shown`), in the unit of :data:`READABLE` a
    person reads its kind in (GB, GB/s, TFLOP/s); within :func:`as_data`, or any other value, as it
    is."""
    if _AS_DATA.get() or not is_quantity(x):
        return x
    x = data(x)
    factor, items = _readable_unit(x.units)
    # x.to(the readable unit).pint(), without the Quantity between
    return pint_quantity(x.magnitude if factor is None else converted(x.magnitude, factor), items)


@functools.lru_cache(maxsize=256)
def _readable_unit(unit: Unit) -> tuple:
    """(the factor to the unit a person reads ``unit``'s kind in, or None: none; that unit's
    items)."""
    dims = unit.dimensionality
    person = next((Unit.of(person) for kind, person in READABLE.items()
                   if Unit.of(kind).dimensionality == dims), None)
    return (None, unit.items) if person is None else (unit.factor(person), person.items)


def Q(magnitude, unit=DIMENSIONLESS):
    """A quantity as the library gives it (pint's, or its own within :func:`as_data`)."""
    unit = Unit.of(unit)
    if _AS_DATA.get():
        return Quantity(magnitude, unit)
    return registry().Quantity(magnitude, unit.pint())


def is_quantity(x) -> bool:
    """Whether ``x`` is a quantity, the library's or pint's."""
    if isinstance(x, Quantity):
        return True
    pint = sys.modules.get("pint")
    return pint is not None and isinstance(x, pint.Quantity)


def is_unit(x) -> bool:
    """Whether ``x`` is a unit, the library's or pint's."""
    if isinstance(x, Unit):
        return True
    pint = sys.modules.get("pint")
    return pint is not None and isinstance(x, pint.Unit)


def data(x):
    """A quantity (pint's or the library's) as the library's; anything else as it is."""
    if isinstance(x, Quantity) or not is_quantity(x):
        return x
    return Quantity(x.magnitude, Unit.of(x))


def as_unit(unit) -> Unit:
    """The library's unit from a string, a unit (its own or pint's)."""
    return Unit.of(unit)


_COUNTS = (("[parameter]", "parameter"), ("[token]", "token"))


def strip_counts(unit) -> Unit:
    """``unit`` with the counting dimensions (parameter, token) removed."""
    unit = Unit.of(unit)
    dims = unit.dimensionality
    out = unit
    for dim, name in _COUNTS:
        power = dims.get(dim, 0)
        if power:
            out = out / Unit.of(name) ** power
    return out


def is_count(unit) -> bool:
    """True for dimensionless units and pure counts (parameters, tokens)."""
    return strip_counts(unit).dimensionless


def takes_bare_number(unit) -> bool:
    """Whether a bare number can stand for a quantity in ``unit``: counts (parameters, tokens) and
    dimensionless ones, and FLOPs, a count of operations with one unit. Bytes, seconds and rates
    have several units a bare number could mean (GB or GiB, s or ms), so it is refused there."""
    unit = Unit.of(unit)
    return is_count(unit) or unit.dimensionality == {"[computation]": 1}


class Shown:
    """A dataclass field that holds the library's quantities (one, or a dict of them) and is read as
    the library gives them (:func:`shown`); ``default`` as the field's."""

    def __init__(self, default=None):
        self.default = default

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self.default
        held = obj.__dict__[self.name]
        return ShownMapping(held) if isinstance(held, dict) else shown(held)

    def __set__(self, obj, value):
        obj.__dict__[self.name] = value


class ShownMapping(Mapping):
    """A dict of the library's quantities, each read as the library gives it when it is read (a key
    looked up or listed makes no quantity)."""

    def __init__(self, held: dict):
        self._held = held

    def __getitem__(self, key):
        return shown(self._held[key])

    def __iter__(self):
        return iter(self._held)

    def __contains__(self, key):
        return key in self._held

    def __len__(self):
        return len(self._held)

    def __eq__(self, other):
        return dict(self.items()) == (dict(other.items()) if isinstance(other, Mapping) else other)

    def __repr__(self):
        return repr(dict(self.items()))
