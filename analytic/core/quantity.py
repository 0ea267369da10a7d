"""Units and quantities as data: what the library computes with, pint's objects made from them on
demand.

:class:`Unit` and :class:`Quantity` hold what pint's would (a container of unit names and a
magnitude), convert with pint's factors (:mod:`.unit_table`) and print as pint prints them (the
default, compact and pretty formats, abbreviated or not, with pint's sorting and exponents), so a
number and its text are the same whichever made them; ``.pint()`` gives pint's object, which answers
a LaTeX or HTML format and a few of pint's methods asked of one (:data:`_PINT_ONLY`). A run that
never asks imports no pint.
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal
from fractions import Fraction

from . import unit_table as table
from .registry import pint_quantity, pint_units

#: the magnitude format of a quantity formatted without one (the registry's default_format)
DEFAULT_FORMAT = ".12g"
_EXP = re.compile(r"([0-9]\.?[0-9]*)e(-?)\+?0*([0-9]+)")


def _split(spec: str) -> tuple[str, str, bool] | None:
    """(magnitude spec, style, short) of a format spec, or None for a style pint alone writes
    (LaTeX, HTML, ...)."""
    if not spec:
        return DEFAULT_FORMAT, "D", False
    mspec, style = spec.replace("~", ""), "D"
    if mspec[-1:] in ("P", "C", "D"):
        style, mspec = mspec[-1], mspec[:-1]
    if any(c.isalpha() and c not in "bcdeEfFgGnosxX%" for c in mspec):
        return None
    return mspec, style, "~" in spec


class Dimensions(dict):
    """A unit's dimensions ("[time]" → exponent), written as pint writes them."""

    def __str__(self):
        return table.format_units(tuple(self.items()), ordered=False)

    def __repr__(self):
        return "<UnitsContainer({%s})>" % ", ".join(f"'{k}': {v}" for k, v in sorted(self.items()))


class Unit(str):
    """A unit as data: pint's container of canonical names and exponents (``items``). It is also the
    text pint reads as the same unit ("gigabyte / second"), so pint takes it wherever it takes a
    unit."""

    def __new__(cls, items: tuple = ()):
        self = super().__new__(cls, table.format_units(items, ordered=False) if items else "")
        self.items, self._dims = items, None
        return self

    def __reduce__(self):
        return _named, (str.__str__(self),)

    @classmethod
    def of(cls, unit) -> "Unit":
        """A Unit from a unit's text, a Unit, or pint's unit (or a Quantity's units)."""
        if type(unit) is cls:
            return unit
        if isinstance(unit, str):
            return _named(unit)
        items = getattr(unit, "_units", None)
        if items is None:
            raise table.UnitError(f"expected a unit, got {unit!r}")
        # another registry's names, read as units.txt reads them
        return cls(
            table.canonical(dict(items).items())
        )

    @property
    def dimensionality(self) -> dict:
        if self._dims is None:
            self._dims = Dimensions(table.dimensionality(self.items))
        return self._dims

    @property
    def dimensionless(self) -> bool:
        return not self.dimensionality

    def factor(self, other) -> int | float:
        """pint's factor from this unit to ``other``."""
        return table.factor(self.items, Unit.of(other).items)

    def exact_factor(self, other):
        """The factor from this unit to ``other`` as the exact Fraction the definitions state."""
        return table.exact_factor(self.items, Unit.of(other).items)

    def __mul__(self, other):
        if _is_unit(other):
            return Unit(table.times(self.items, Unit.of(other).items))
        return Quantity(1, self) * other if hasattr(other, "magnitude") else Quantity(other, self)

    __rmul__ = __mul__

    def __truediv__(self, other):
        if _is_unit(other):
            return Unit(table.times(self.items, Unit.of(other).items, -1))
        return Quantity(1, self) / other

    def __rtruediv__(self, other):
        if isinstance(other, str):
            return Unit.of(other) / self
        return Quantity(other, Unit(table.times((), self.items, -1)))

    def __pow__(self, n):
        return Unit(tuple((k, v * n) for k, v in self.items if v * n != 0))

    def __eq__(self, other):
        """Equal to a unit (the library's or pint's) of the same names and powers, never to text
        (``Unit.of`` reads a unit's text): "GB" and "gigabyte" name one unit and cannot share its
        hash."""
        if isinstance(other, Unit):
            return dict(self.items) == dict(other.items)
        if isinstance(other, str):
            return False
        if _is_unit(other):
            return dict(self.items) == dict(Unit.of(other).items)
        return NotImplemented

    def __ne__(self, other):
        out = self.__eq__(other)
        return out if out is NotImplemented else not out

    def __hash__(self):
        return hash(frozenset(self.items))

    def __format__(self, spec: str) -> str:
        split = _split(spec)
        if split is None:
            return format(self.pint(), spec)
        return table.format_units(self.items, split[1], split[2])

    def __str__(self):
        return table.format_units(self.items)

    def __repr__(self):
        return f"<Unit('{table.format_units(self.items, ordered=False)}')>"

    def __getattr__(self, name):
        if name not in _PINT_ONLY:
            raise AttributeError(name)
        return getattr(self.pint(), name)

    def pint(self):
        """pint's unit, in the registry in use."""
        return pint_units(self.items)


def _is_unit(x) -> bool:
    """Whether ``x`` is a unit: a Unit, a unit's text or pint's unit (a quantity has a
    magnitude)."""
    return isinstance(x, str) or hasattr(x, "_units") and not hasattr(x, "magnitude")


#: what pint's objects answer and the library's ask pint for (an attribute not here is not asked:
#: ``hasattr`` of anything else is False without importing pint)
_PINT_ONLY = frozenset(
    {
        "check",
        "compatible_units",
        "is_compatible_with",
        "to_base_units",
        "to_compact",
        "to_preferred",
        "to_reduced_units",
        "to_root_units",
        "to_tuple",
        "m_from",
        "from_",
        "systems",
    }
)


@functools.lru_cache(maxsize=4096)
def _named(text: str) -> Unit:
    return Unit(table.container(text))


DIMENSIONLESS = Unit()


def _operand(other):
    """``other`` as (magnitude, Unit): a Quantity or unit (ours or pint's; a unit's magnitude 1) or
    a number (dimensionless)."""
    if isinstance(other, Quantity):
        return other.magnitude, other.units
    if isinstance(other, Unit):
        return 1, other
    if hasattr(other, "_units"):
        return getattr(other, "magnitude", 1), Unit.of(other)
    return other, DIMENSIONLESS


def converted(m, factor):
    """Magnitude ``m`` times a unit's ``factor``, as pint converts it (exact numbers kept exact)."""
    if factor == 1 and type(factor) is int:
        return m * factor
    if isinstance(m, Decimal):
        return m * Decimal(str(factor))
    if isinstance(m, Fraction):
        return m * Fraction(str(factor))
    return m * factor


class Quantity:
    """A magnitude and a :class:`Unit`: a pint Quantity's number and unit, as data."""

    __slots__ = ("magnitude", "units")

    def __init__(self, magnitude, units=DIMENSIONLESS):
        self.magnitude, self.units = magnitude, Unit.of(units)

    @property
    def m(self):
        return self.magnitude

    @property
    def u(self) -> Unit:
        return self.units

    @property
    def dimensionality(self) -> dict:
        return self.units.dimensionality

    @property
    def dimensionless(self) -> bool:
        return self.units.dimensionless

    def to(self, unit) -> "Quantity":
        unit = Unit.of(unit)
        return Quantity(converted(self.magnitude, self.units.factor(unit)), unit)

    def m_as(self, unit):
        return self.to(unit).magnitude

    def _in_mine(self, other):
        m, u = _operand(other)
        if u == self.units:
            return m
        if m == 0 and not isinstance(other, Quantity) and u is DIMENSIONLESS:
            return m  # pint adds a bare zero to any quantity
        return converted(m, u.factor(self.units))

    def __add__(self, other):
        return Quantity(self.magnitude + self._in_mine(other), self.units)

    __radd__ = __add__

    def __sub__(self, other):
        return Quantity(self.magnitude - self._in_mine(other), self.units)

    def __rsub__(self, other):
        return Quantity(self._in_mine(other) - self.magnitude, self.units)

    def __mul__(self, other):
        m, u = _operand(other)
        return Quantity(self.magnitude * m, Unit(table.times(self.units.items, u.items)))

    def __rmul__(self, other):
        m, u = _operand(other)
        return Quantity(m * self.magnitude, Unit(table.times(u.items, self.units.items)))

    def __truediv__(self, other):
        m, u = _operand(other)
        return Quantity(self.magnitude / m, Unit(table.times(self.units.items, u.items, -1)))

    def __rtruediv__(self, other):
        m, u = _operand(other)
        return Quantity(m / self.magnitude, Unit(table.times(u.items, self.units.items, -1)))

    def __pow__(self, n):
        return Quantity(self.magnitude**n, self.units**n)

    def __neg__(self):
        return Quantity(-self.magnitude, self.units)

    def __pos__(self):
        return self

    def __abs__(self):
        return Quantity(abs(self.magnitude), self.units)

    def _compare(self, other, op):
        try:
            return op(self.magnitude, self._in_mine(other))
        except table.DimensionalityError:
            if op is _eq:
                return False
            raise

    def __eq__(self, other):
        return self._compare(other, _eq)

    def __lt__(self, other):
        return self._compare(other, lambda a, b: a < b)

    def __le__(self, other):
        return self._compare(other, lambda a, b: a <= b)

    def __gt__(self, other):
        return self._compare(other, lambda a, b: a > b)

    def __ge__(self, other):
        return self._compare(other, lambda a, b: a >= b)

    def __hash__(self):
        return hash(frozenset(self.dimensionality.items()))

    def _plain(self):
        if not self.dimensionless:
            raise table.DimensionalityError(
                f"Cannot convert from '{self.units}' ({self.units.dimensionality}) to "
                "'dimensionless' (dimensionless)"
            )
        return self.to(DIMENSIONLESS).magnitude

    def __float__(self):
        return float(self._plain())

    def __int__(self):
        return int(self._plain())

    def __bool__(self):
        return bool(self.magnitude)

    def __round__(self, n=None):
        return Quantity(round(self.magnitude, n), self.units)

    def __format__(self, spec: str) -> str:
        split = _split(spec)
        if split is None:
            return format(self.pint(), spec)
        mspec, style, short = split
        mstr = ("{:" + mspec + "}").format(self.magnitude)
        if style == "P":
            found = _EXP.match(mstr)
            if found:
                exp = int(found.group(2) + found.group(3))
                mstr = _EXP.sub(r"\1×10" + f"{exp:n}".translate(table.PRETTY), mstr)
        ustr = table.format_units(self.units.items, style, short)
        if ustr == "":
            return mstr
        return f"{mstr} {ustr[2:] if ustr.startswith('1 / ') else ustr}"

    def __str__(self):
        return format(self, "")

    def __repr__(self):
        m = f"{self.magnitude:.9}" if isinstance(self.magnitude, float) else f"{self.magnitude}"
        return f"<Quantity({m}, '{table.format_units(self.units.items, ordered=False)}')>"

    def pint(self):
        """pint's Quantity, in the registry in use."""
        return pint_quantity(self.magnitude, self.units.items)

    def __getattr__(self, name):
        if name not in _PINT_ONLY:
            raise AttributeError(name)
        return getattr(self.pint(), name)


def _eq(a, b):
    return a == b
