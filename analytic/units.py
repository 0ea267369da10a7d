"""The one unit registry of the library, built from ``units.txt`` (pint's default file is not used:
it makes ``bit`` dimensionless, and ``1 byte + 1 FLOP`` must raise)."""

from __future__ import annotations

import re
import warnings
from fractions import Fraction
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


#: decimal and binary multipliers of a bare count ("16M" tokens, "16Mi" tokens)
COUNT_SUFFIXES = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
                  "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
#: the binary suffix a decimal one is often meant as ("16M" tokens for 16Mi = 2²⁴)
BINARY_SUFFIX = {"k": "Ki", "K": "Ki", "M": "Mi", "G": "Gi", "T": "Ti"}
_COUNT = re.compile(r"\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*(Ki|Mi|Gi|Ti|k|K|M|G|T)?\s*")


def suffixed_count(text: str) -> tuple[Fraction, str | None] | None:
    """``(number, suffix)`` of a count such as '16M', '16Mi', '16777216' or '16e6', exactly (the
    value is ``number · COUNT_SUFFIXES[suffix]``), or None when ``text`` is not one."""
    m = _COUNT.fullmatch(text)
    if not m:
        return None
    try:
        return Fraction(m.group(1)), m.group(2)
    except ValueError:  # '1.2.3'
        return None


def binary_reading(number: Fraction, suffix: str | None) -> Fraction | None:
    """The value of a decimal-suffixed count read with the binary suffix instead ('16M' → 16·2²⁰),
    or None when the count has no decimal suffix."""
    return number * COUNT_SUFFIXES[BINARY_SUFFIX[suffix]] if suffix in BINARY_SUFFIX else None
