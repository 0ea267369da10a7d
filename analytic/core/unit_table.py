"""The unit definitions of ``units.txt`` read without pint: names, symbols, prefixes, dimensions and
conversion factors, computed as pint computes them from the same file.

A unit is held as pint holds it, a container: ``((name, exponent), ...)`` in canonical names
("gigabyte", "second"), in the order pint's containers keep. Names resolve as pint resolves them (a
name, symbol or alias; else a prefix and a unit, a plural "s" allowed), and a conversion factor is
pint's float, made by the same operations in the same order (``tests/test_quantity.py`` holds both
against pint), so a quantity converted here has the digits pint gives it.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from pathlib import Path

from .errors import UnitError

#: the definitions file (pint's syntax); :mod:`.registry` defines what a pint registry lacks of it
FILE = Path(__file__).with_name("units.txt")


class UndefinedUnit(UnitError):
    """A name ``units.txt`` does not define."""


class DimensionalityError(UnitError):
    """Two units of different dimensions where one is converted to the other."""


class _Definition:
    __slots__ = ("name", "symbol", "scale", "reference", "dimension")

    def __init__(self, name, symbol, scale, reference, dimension=None):
        self.name, self.symbol, self.scale, self.reference, self.dimension = (name, symbol, scale,
                                                                              reference, dimension)


_TOKEN = re.compile(
    r"\s*(?:(-?\d+\.?\d*(?:[eE][+-]?\d+)?|-?\.\d+(?:[eE][+-]?\d+)?)"
    r"|(\*\*|\^|[*/()·])|(%|[^\s*/()·^%]+))"
)


def _tokens(text: str) -> list:
    out, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise UnitError(f"cannot read {text!r} as a unit")
        pos = m.end()
        number, op, name = m.groups()
        if number is not None:
            try:
                out.append(("n", int(number)))
            except ValueError:
                out.append(("n", float(number)))
        elif op is not None:
            out.append(("o", "**" if op == "^" else "*" if op == "·" else op))
        else:
            out.append(("u", name))
    return out


#: a unit's name as a user or the cache writes one: letters (µ, °, _ among them), or %
_NAME = re.compile(r"[A-Za-z_µμ°][A-Za-z_µμ]*|%")


def plain(text: str, one_name: bool = False) -> bool:
    """Whether ``text`` is a unit as the library reads one from a user or its cache: names joined by
    ``*``, ``/`` or ``·``, each with at most a power of one digit (``**`` or ``^``, maybe
    negative), opened by ``/`` or ``1/`` for a unit per another ("/hour"); ``one_name``: one name
    and its power."""
    try:
        tokens = _tokens(text)
    except UnitError:
        return False
    if tokens[:2] == [("n", 1), ("o", "/")]:
        tokens = tokens[1:]
    if tokens[:1] == [("o", "/")]:
        tokens = tokens[1:]
    i = 0
    while True:
        if i >= len(tokens) or tokens[i][0] != "u" or not _NAME.fullmatch(tokens[i][1]):
            return False
        i += 1
        if tokens[i : i + 1] == [("o", "**")]:
            kind, power = tokens[i + 1] if i + 1 < len(tokens) else ("", None)
            if kind != "n" or type(power) is not int or not -9 <= power <= 9:
                return False
            i += 2
        if i == len(tokens):
            return True
        if one_name or tokens[i] not in (("o", "*"), ("o", "/")):
            return False
        i += 1


def times(a: tuple, b: tuple, sign: int = 1) -> tuple:
    """The container ``a · b`` (``a / b`` with ``sign`` -1), as pint's UnitsContainer makes it."""
    out = dict(a)
    for k, v in b:
        out[k] = out.get(k, 0) + sign * v
        if out[k] == 0:
            del out[k]
    return tuple(out.items())


class _Parsed:
    """An expression of numbers and names as pint's ParserHelper evaluates it: a scale and an
    ordered container of names."""

    __slots__ = ("scale", "items")

    def __init__(self, scale=1, items=()):
        self.scale, self.items = scale, items

    def times(self, other, sign=1):
        return _Parsed(
            self.scale * other.scale if sign > 0 else self.scale / other.scale,
            times(self.items, other.items, sign),
        )

    def power(self, n):
        return _Parsed(self.scale**n, tuple((k, v * n) for k, v in self.items))


def parse(text: str) -> _Parsed:
    """``text`` (names, numbers, ``* / ** ^ ( )``) evaluated as pint evaluates a unit expression."""
    tokens, pos = _tokens(text), 0

    def peek():
        return tokens[pos] if pos < len(tokens) else (None, None)

    def atom():
        nonlocal pos
        kind, value = peek()
        pos += 1
        if kind == "n":
            return _Parsed(value)
        if kind == "u":
            return _Parsed(1, ((value, 1),))
        if (kind, value) == ("o", "("):
            inner = product()
            if peek() != ("o", ")"):
                raise UnitError(f"cannot read {text!r} as a unit")
            pos += 1
            return inner
        raise UnitError(f"cannot read {text!r} as a unit")

    def factor():
        nonlocal pos
        base = atom()
        if peek() == ("o", "**"):
            pos += 1
            kind, value = peek()
            if kind != "n":
                raise UnitError(f"cannot read {text!r} as a unit")
            pos += 1
            return base.power(value)
        return base

    def product():
        nonlocal pos
        out = factor()
        while peek() in (("o", "*"), ("o", "/")):
            op = peek()[1]
            pos += 1
            out = out.times(factor(), 1 if op == "*" else -1)
        return out

    if not tokens:
        return _Parsed()
    out = product()
    if pos != len(tokens):
        raise UnitError(f"cannot read {text!r} as a unit")
    return out


def definitions() -> list[tuple[str, str, list[str], bool]]:
    """The lines of ``units.txt`` as (name, value, [symbol, *aliases], is a prefix), in the file's
    order (a prefix's names without their "-")."""
    out = []
    for line in FILE.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, value, *aliases = (p.strip() for p in line.split("="))
            prefix = name.endswith("-")
            if prefix:
                name, aliases = name[:-1], [a[:-1] for a in aliases]
            out.append((name, value, aliases, prefix))
    return out


def _read() -> tuple[dict, dict]:
    # key (name, symbol or alias) → (name, symbol, scale), in pint's order
    prefixes = {
        "": ("", "", 1)
    }
    units = {}  # key (name, symbol or alias) → _Definition
    for name, value, aliases, prefix in definitions():
        if prefix:
            entry = (name, aliases[0] if aliases else name, parse(value).scale)
            for key in (name, *aliases):
                prefixes[key] = entry
            continue
        symbol = aliases[0] if aliases else name
        if value.startswith("["):
            d = _Definition(name, symbol, 1, None, value)
        else:
            p = parse(value)
            d = _Definition(name, symbol, p.scale, p.items)
        for key in (name, *aliases):
            units[key] = d
    return prefixes, units


PREFIXES, UNITS = _read()
#: names :func:`name_of` added to UNITS as a prefix and a unit ("gigabyte"): never a base for
#: another prefix
_PREFIXED: set[str] = set()


@functools.lru_cache(maxsize=None)
def name_of(text: str) -> str:
    """The canonical name of a unit name, symbol or alias, prefixed or plural ("GB" →
    "gigabyte")."""
    if text in UNITS:
        return UNITS[text].name
    candidates = {}
    for suffix in ("", "s"):
        for prefix, (pname, _, _) in PREFIXES.items():
            if text.startswith(prefix) and text.endswith(suffix):
                name = text[len(prefix) :]
                if suffix:
                    name = name[: -len(suffix)]
                    if len(name) == 1:
                        continue
                # one prefix, as pint ("kilogigabyte")
                if name in UNITS and not (pname and name in _PREFIXED):
                    candidates[(pname, UNITS[name].name)] = None
    for p, u in list(candidates):
        if p:
            candidates.pop(("", p + u), None)
    if not candidates:
        raise UndefinedUnit(f"{text!r} is not a unit analytic defines")
    prefix, unit = next(iter(candidates))
    if prefix:
        name = prefix + unit
        symbol = PREFIXES[prefix][1] + UNITS[unit].symbol
        if name not in UNITS:
            UNITS[name] = _Definition(name, symbol, PREFIXES[prefix][2], ((unit, 1),))
            _PREFIXED.add(name)
        return name
    return unit


def symbol_of(name: str) -> str:
    """The symbol of a canonical name ("gigabyte" → "GB")."""
    return UNITS[name].symbol


@functools.lru_cache(maxsize=4096)
def container(text: str) -> tuple:
    """The unit ``text`` names, as a container ("GB/s" → (("gigabyte", 1), ("second", -1)))."""
    p = parse(text)
    if p.scale != 1:
        raise UnitError(f"{text!r}: a unit has no number in it")
    return canonical(p.items)


def canonical(items) -> tuple:
    """A container of any names (a user's, another registry's) in canonical ones, names that resolve
    alike merged and "dimensionless" dropped."""
    out = ()
    for k, v in items:
        if k != "dimensionless":
            out = times(out, ((name_of(k), v),))
    return out


@functools.lru_cache(maxsize=4096)
def dimensionality(units: tuple) -> tuple:
    """The dimensions of a container, as ``(("[time]", -1), ...)`` (no zero exponents)."""
    out = {}

    def walk(items, exp):
        for k, v in items:
            d = UNITS[name_of(k)]
            if d.dimension is not None:
                out[d.dimension] = out.get(d.dimension, 0) + exp * v
            elif d.reference is not None:
                walk(d.reference, exp * v)

    walk(units, 1)
    return tuple((k, v) for k, v in out.items() if v != 0)


@functools.lru_cache(maxsize=4096)
def factor(src: tuple, dst: tuple):
    """The number that converts a magnitude in ``src`` to ``dst``: pint's, by its operations
    (an DimensionalityError error where the dimensions differ)."""
    if dict(dimensionality(src)) != dict(dimensionality(dst)):
        raise DimensionalityError(
            f"Cannot convert from '{format_units(src, ordered=False)}'"
            f" ({format_units(dimensionality(src), ordered=False)}) to"
            f" '{format_units(dst, ordered=False)}'"
            f" ({format_units(dimensionality(dst), ordered=False)})"
        )
    numerator, denominator = {}, {}

    def walk(items, exp):
        for k, v in items:
            exp2 = exp * v
            d = UNITS[name_of(k)]
            if d.dimension is not None:
                continue
            if exp2 < 0:
                denominator[d.scale] = denominator.get(d.scale, 0) - exp2
            else:
                numerator[d.scale] = numerator.get(d.scale, 0) + exp2
            if d.reference is not None:
                walk(d.reference, exp2)

    ratio = times(src, dst, -1)
    if not ratio:
        return 1
    walk(ratio, 1)
    while any(k in denominator for k in numerator):
        for k, n in list(numerator.items()):
            if k in denominator and n >= denominator[k]:
                numerator[k] -= denominator.pop(k)
        for k, n in list(denominator.items()):
            if k in numerator and n >= numerator[k]:
                denominator[k] -= numerator.pop(k)
    out = 1
    for k, n in numerator.items():
        if n != 0:
            out *= k**n
    for k, n in denominator.items():
        if n != 0:
            out *= k**-n
    return out


@functools.lru_cache(maxsize=4096)
def exact_factor(src: tuple, dst: tuple) -> Fraction:
    """:func:`factor` as the exact rational the definitions state (each scale the decimal units.txt
    writes), not rounded: 1/day → 1/s is 1/86400."""
    factor(src, dst)  # the dimensions checked, as factor checks them
    out = Fraction(1)

    def walk(items, exp):
        nonlocal out
        for k, v in items:
            d = UNITS[name_of(k)]
            if d.dimension is None:
                out *= Fraction(repr(d.scale)) ** (exp * v)
                if d.reference is not None:
                    walk(d.reference, exp * v)

    walk(times(src, dst, -1), 1)
    return out


#: pretty exponents, as pint writes them
PRETTY = str.maketrans("0123456789-.", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻\u22c5")

#: formats of a unit: product, division, power, exponent
_STYLES = {
    "D": ("{} * {}", "{} / {}", "{} ** {}", "{:n}".format),
    "C": ("*", "{}/{}", "{}**{}", "{:n}".format),
    "P": ("·", "{}/{}", "{}{}", lambda x: f"{x:n}".translate(PRETTY)),
}


def _join(fmt: str, items: list) -> str:
    if not items:
        return ""
    if "{}" not in fmt:
        return fmt.join(items)
    out = items[0]
    for x in items[1:]:
        out = fmt.format(out, x)
    return out


def format_units(items: tuple, style: str = "D", short: bool = False, ordered: bool = True) -> str:
    """A container as pint's formatter writes it (``style`` D, C or P; ``short``: symbols)."""
    if not items:
        return "" if short else "dimensionless"
    product, division, power, exp = _STYLES[style]
    rows = [((symbol_of(k) if short else k), v, k) for k, v in items]
    if ordered:
        rows.sort(key=lambda r: r[2])
    pos = [n if v == 1 else power.format(n, exp(abs(v))) for n, v, _ in rows if not v < 0]
    neg = [n if v == -1 else power.format(n, exp(abs(v))) for n, v, _ in rows if v < 0]
    out = _join(product, pos) or "1"
    return out if not neg else _join(division, [out, _join(division, neg)])
