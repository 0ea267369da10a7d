"""The one unit registry of the library, built from ``units.txt`` (pint's default file is not used:
it makes ``bit`` dimensionless, and ``1 byte + 1 FLOP`` must raise)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pint

# ".12g" is the default number format; specs such as "~P" inherit it (pint warns about that fallback)
warnings.filterwarnings("ignore", message="The given format spec does not contain a magnitude formatter",
                        category=DeprecationWarning)

ureg = pint.UnitRegistry(str(Path(__file__).with_name("units.txt")), autoconvert_offset_to_baseunit=True)
ureg.formatter.default_format = ".12g"
Q_ = ureg.Quantity
pint.set_application_registry(ureg)


def as_unit(unit: str | pint.Unit) -> pint.Unit:
    """A registry unit from a string or a unit."""
    return unit if isinstance(unit, pint.Unit) else ureg.Unit(unit)


def strip_counts(unit: pint.Unit) -> pint.Unit:
    """``unit`` with the counting dimensions (parameter, token) removed."""
    dims = unit.dimensionality
    out = unit
    for dim, name in (("[parameter]", "parameter"), ("[token]", "token")):
        power = dims.get(dim, 0)
        if power:
            out = out / ureg.Unit(name) ** power
    return out


def is_count(unit: pint.Unit) -> bool:
    """True for dimensionless units and pure counts (parameters, tokens)."""
    return strip_counts(unit).dimensionless


def takes_bare_number(unit: pint.Unit) -> bool:
    """Whether a bare number can stand for a quantity in ``unit``: counts (parameters, tokens) and
    dimensionless ones, and FLOPs, a count of operations with one unit. Bytes, seconds and rates
    have several units a bare number could mean (GB or GiB, s or ms), so it is refused there."""
    return is_count(unit) or unit.dimensionality == ureg.FLOP.dimensionality
