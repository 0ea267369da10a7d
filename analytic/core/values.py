"""Reading a user's value: one number with one unit, exactly, inside its declared domain.

Every entry point (``Formula.evaluate`` and ``subs``, ``Model``, ``Layout``, ``Plan`` and its
overrides, ``Hardware``, ``search``, the CLI) reads values through these functions, so a value is
checked the same way wherever it enters:

- a string is ONE number followed by at most ONE unit expression ("50 GB/s", "400 Gbit/s",
  "1/hour"); anything else (``'5 us 3'``, ``'9**9**9 GB/s'``, text over :data:`MAX_TEXT`
  characters) is a :class:`UnitError` naming the text. No string reaches pint's expression
  evaluator; a unit is read by :mod:`.unit_table`;
- a pint quantity (of analytic's registry or another's) is read through its unit's names, as the
  library's own (:mod:`.quantity`);
- numbers are exact (floats by their shortest decimal) and finite, with magnitudes between
  :data:`TINY` and :data:`HUGE` in the symbol's unit (float64's range, with room for the products
  a formula takes), counts at most :data:`MAX_COUNT`;
- each symbol's domain (:data:`DOMAINS`) is enforced on Python and sympy numbers alike.

Nothing here imports sympy, pint or numpy: a Python number is read as an exact ``int`` or
``Fraction``, and a value is a sympy object (a numpy number) only where the caller has imported
sympy (numpy).
"""

from __future__ import annotations

import math
import numbers
import re
import sys
from decimal import Decimal
from fractions import Fraction

from . import unit_table
from .counts import MAX_COUNT, MAX_TEXT, show, step_tokens, suffixed_count, whole
from .errors import InputError, UnitError, shown
from .terms import Term
from .units import DIMENSIONLESS, Quantity, Unit, data, is_quantity

#: largest magnitude accepted, in the symbol's unit: float64 reaches 1.8e308, and formulas multiply
HUGE = 1e300
#: smallest non-zero magnitude accepted, in the symbol's unit (float64 subnormals start at 2.2e-308)
TINY = 1e-300
#: domain name → what it admits (a symbol's domain is one of these names, or ("choice", options):
#: an index)
DOMAINS = {
    "count": "an integer ≥ 1",
    "count0": "an integer ≥ 0",
    "positive": "a number > 0",
    "nonnegative": "a number ≥ 0",
    "fraction": "a number in (0, 1]",
    "fraction0": "a number in [0, 1]",
    "one_or_more": "a number ≥ 1",
}


def is_sympy(x) -> bool:
    """Whether ``x`` is a sympy object (False without importing sympy while it is not imported: no
    value can be one then)."""
    if type(x) in _PLAIN:
        return False
    sympy = sys.modules.get("sympy")
    return sympy is not None and isinstance(x, sympy.Basic)


#: types no sympy object has (checked first: most values are these)
_PLAIN = frozenset({int, float, bool, str, type(None)})
#: the types most numbers a plan reads are: each a number, its float() the correctly rounded one
NUMBER_TYPES = frozenset({int, float, Fraction})


def _numpy_is(x, kind: str) -> bool:
    """Whether ``x`` is a numpy scalar of ``kind`` ("bool_", "integer", "floating"); False while
    numpy is not imported (no value can be one then)."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(x, getattr(numpy, kind))


def is_number(x) -> bool:
    """Whether ``x`` is a number: anything but an expression in symbols (sympy's with free symbols,
    or a term)."""
    if type(x) in _PLAIN or type(x) in NUMBER_TYPES:
        return True
    if type(x) is Term:
        return False
    return not is_sympy(x) or x.is_number


def is_integral(x) -> bool:
    """Whether an exact number (int, Fraction or sympy number) is whole."""
    if is_sympy(x):
        return bool(x.is_integer)
    return isinstance(x, int) or x.denominator == 1


_ADMITS = {
    "count": lambda v: is_integral(v) and 1 <= v <= MAX_COUNT,
    "count0": lambda v: is_integral(v) and 0 <= v <= MAX_COUNT,
    "positive": lambda v: v > 0,
    "nonnegative": lambda v: v >= 0,
    "fraction": lambda v: 0 < v <= 1,
    "fraction0": lambda v: 0 <= v <= 1,
    "one_or_more": lambda v: v >= 1,
}

_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
#: a number and what follows it (a unit where :func:`unit_table.plain` says so)
_QUANTITY = re.compile(rf"\s*({_NUMBER})\s*(.*?)\s*", re.DOTALL)
#: one over a quantity of one unit, as a rate is written: "1/(50000 hour)"
_PER = re.compile(rf"\s*({_NUMBER})\s*/\s*\(\s*({_NUMBER})\s*([^()]*?)\s*\)\s*", re.DOTALL)


def _text(keyword: str, text: str) -> str:
    if len(text) > MAX_TEXT:
        raise UnitError(
            f"{keyword}: a value of {len(text):,} characters; expected one number and one unit "
            f"in at most {MAX_TEXT}"
        )
    return text


def parse_quantity(keyword: str, text: str):
    """``text`` as ``(Fraction, unit string or None)``: one number, then at most one unit; or one
    over a quantity of one unit, ``"1/(50000 hour)"``."""
    per = _PER.fullmatch(_text(keyword, text))
    # N/(M unit): N/M per unit
    if per and unit_table.plain(per.group(3), one_name=True) and Fraction(per.group(2)):
        number, unit = Fraction(per.group(1)) / Fraction(per.group(2)), f"/{per.group(3)}"
        if number and not 1e-307 < abs(number) < 1e308:
            raise InputError(
                f"{keyword}: {text!r} is outside the magnitudes the library computes with"
            )
        return number, unit
    m = _QUANTITY.fullmatch(_text(keyword, text))
    if not m or m.group(2) and not unit_table.plain(m.group(2)):
        raise UnitError(
            f"{keyword}: cannot read {text!r} as one number with one unit (e.g. '50 GB/s', '5 us',"
            " '405e9')"
        )
    number = Fraction(m.group(1))
    if number and not 1e-307 < abs(number) < 1e308:  # beyond float64, before any unit conversion
        raise InputError(f"{keyword}: {text!r} is outside the magnitudes the library computes with")
    return number, (m.group(2) or None)


def unit_of(keyword: str, text: str) -> Unit:
    """The unit named by ``text`` (names and ``* / **`` only; '' is dimensionless)."""
    if not text.strip():
        return DIMENSIONLESS
    if len(text) > MAX_TEXT or not unit_table.plain(text):
        raise UnitError(f"{keyword}: {text!r} is not a unit")
    try:
        text = text.strip().replace("·", "*")
        return Unit.of("1" + text if text.startswith("/") else text)  # '/hour' is per hour
    except UnitError:  # a name units.txt does not define
        raise UnitError(f"{keyword}: unknown unit {text.strip()!r}") from None


def quantity(keyword: str, value):
    """A string or a quantity (the library's or any pint registry's) as the library's Quantity (a
    plain number as itself)."""
    if isinstance(value, str):
        number, unit = parse_quantity(keyword, value)
        return number if unit is None else Quantity(number_value(number), unit_of(keyword, unit))
    if isinstance(value, Quantity) or not is_quantity(value):
        return value
    try:
        return data(value)
    except UnitError:  # a unit of another registry that units.txt does not define
        raise UnitError(
            f"{keyword}: {value!r} comes from another pint registry and its unit"
            f" {str(value.units)!r} is not defined in analytic's; pass analytic's Quantity (an.Q_)"
            " or a string"
        ) from None


def as_quantity(keyword: str, value) -> Quantity:
    """:func:`quantity`, a plain number as a dimensionless Quantity."""
    q = quantity(keyword, value)
    return (
        q
        if isinstance(q, Quantity)
        else Quantity(number_value(q) if isinstance(q, Fraction) else q)
    )


def number_value(x: Fraction):
    """A Fraction as an int when whole, else a float (what pint multiplies)."""
    return int(x) if x.denominator == 1 else float(x)


def exact_number(x) -> int | Fraction:
    """A Python or numpy number as an exact, finite ``int`` or ``Fraction`` (a whole one as an int;
    floats by their shortest decimal); a sympy rational as the same, a sympy float by its shortest
    decimal."""
    if is_sympy(x):
        if x.is_Float and x.is_finite:
            return exact_number(float(x))
        if not (x.is_Rational and x.is_finite):
            raise InputError(f"expected a finite rational number, got {x}")
        return int(x) if x.is_integer else Fraction(int(x.p), int(x.q))
    if isinstance(x, bool) or _numpy_is(x, "bool_"):
        raise InputError(f"expected a number, got the boolean {x!r}")
    if isinstance(x, int) or _numpy_is(x, "integer"):
        return int(x)
    if isinstance(x, Decimal):
        if not x.is_finite():
            raise InputError(f"expected a finite number, got {x!r}")
        x = Fraction(x)
    elif isinstance(x, float) or _numpy_is(x, "floating"):
        if not math.isfinite(x):
            raise InputError(f"expected a finite number, got {x!r}")
        x = Fraction(repr(float(x)))
    elif isinstance(x, numbers.Rational):
        x = Fraction(int(x.numerator), int(x.denominator))
    elif isinstance(x, numbers.Real):
        return exact_number(float(x))
    else:
        raise InputError(f"expected a real number, got {type(x).__name__} {x!r}")
    return int(x) if x.denominator == 1 else x


def as_float(x) -> float:
    """An exact number as a float: a Fraction or sympy rational by one correctly rounded division
    (as float() of a Fraction gives; a sympy rational's without mpmath)."""
    if type(x) in NUMBER_TYPES:
        return float(x)
    if is_sympy(x) and x.is_Rational:
        return x.p / x.q
    return float(x)


def exact(x):
    """A Python, numpy or sympy number as an exact, finite sympy number (floats by their shortest
    decimal)."""
    if is_sympy(x):
        if x.is_number and x.is_finite is not True:
            raise InputError(f"expected a finite number, got {x}")
        return x
    n = exact_number(x)
    import sympy

    return sympy.Integer(n) if isinstance(n, int) else sympy.Rational(n.numerator, n.denominator)


def in_range(keyword: str, value, shown):
    """``value`` if its size is between TINY and HUGE (or zero)."""
    size = abs(value)
    if size > HUGE or (size != 0 and size < TINY):
        raise InputError(
            f"{keyword}: {show(shown)} is outside the magnitudes the library computes with "
            f"({TINY:g} to {HUGE:g} in the symbol's unit)"
        )
    return value


def check_domain(keyword: str, domain, value, shown=None):
    """``value`` (an exact number: int, Fraction or sympy) if it lies in ``domain``; an InputError
    naming both otherwise."""
    shown = value if shown is None else shown
    if domain is None:
        return value
    if isinstance(domain, tuple):  # ("choice", options)
        options = domain[1]
        if not (is_integral(value) and 0 <= value < len(options)):
            raise InputError(
                f"{keyword}: expected an index 0–{len(options) - 1} "
                f"({', '.join(f'{i} {o}' for i, o in enumerate(options))}), got {show(shown)}"
            )
        return value
    if not _ADMITS[domain](value):
        extra = (
            f" (at most {MAX_COUNT:,})"
            if domain.startswith("count") and is_integral(value) and value > 0
            else ""
        )
        raise InputError(f"{keyword}: expected {DOMAINS[domain]}{extra}, got {show(shown)}")
    return value


def count(name: str, value, *, minimum: int = 1, allow_symbol: bool = True, shown=None):
    """A whole count ≥ ``minimum`` (at most MAX_COUNT), as an int; a sympy expression with symbols
    is returned as it is (unless ``allow_symbol`` is False; ``symbols.canonical`` maps a user's
    Symbol("dp") to the declared one). Strings are not counts here; see
    :func:`analytic.core.counts.parse_count`."""
    if type(value) is int and minimum <= value <= MAX_COUNT:  # the common case, without sympy
        return value
    shown = show(value if shown is None else shown)
    if not is_number(value):
        if not allow_symbol:
            raise InputError(f"{name}: expected an integer, got the expression {value}")
        return value
    if isinstance(value, (bool, str)) or _numpy_is(value, "bool_") or value is None:
        raise InputError(f"{name}: expected an integer ≥ {minimum}, got {shown}")
    try:
        as_exact = exact_number(value)
    except InputError:
        raise InputError(f"{name}: expected an integer ≥ {minimum}, got {shown}") from None
    if not is_integral(as_exact):
        raise InputError(f"{name}: expected an integer, got {shown}")
    return whole(name, Fraction(int(as_exact)), minimum=minimum, shown=shown)


def batch_tokens(value, seq_len: int, name: str = "batch_tokens") -> tuple[int, str]:
    """Tokens per step, exactly, from a count ('16M', '16Mi', '16777216', '16e6', or a number), and
    a note. The one reading of a batch in tokens (Plan, search and the CLI): a decimal suffix whose
    count is not whole sequences of ``seq_len`` while its binary reading is ('16M' at 8,192 tokens)
    is read as binary, and the note says so (the CLI prints it, Plan and search keep it in
    ``.notes`` and warn)."""
    if isinstance(value, str) and suffixed_count(value) is not None:
        number, suffix = suffixed_count(value)
    elif isinstance(value, str) or is_quantity(value):  # a quantity of tokens ('16 Mitoken')
        q = quantity(name, value)
        if not isinstance(q, Quantity) or q.dimensionality != {"[token]": 1}:
            raise UnitError(
                f"{name}: expected a token count such as 16M, 16Mi or 16777216, or a quantity in"
                f" tok, got {show(value)}"
            )
        number, suffix = exact_number(q.to("token").magnitude), None
    else:
        number, suffix = exact_number(value), None
    return step_tokens(Fraction(number), suffix, seq_len, name, value)


def fraction(name: str, value, *, upper: float | None = 1.0):
    """A positive number, at most ``upper`` (a fraction of peak by default; ``upper=None``: any), as
    an exact int or Fraction (a sympy number or expression as it is)."""
    q = quantity(name, value)
    if isinstance(q, Quantity):
        if not q.dimensionless:
            raise UnitError(f"{name}: expected a plain number, got {q:~P}")
        q = q.to("").magnitude
    if not is_number(q):
        return q
    try:
        x = exact(q) if is_sympy(q) else exact_number(q)
    except InputError as exc:
        raise InputError(f"{name}: {exc}") from None
    if not (x > 0 and (upper is None or x <= upper)) or abs(x) > HUGE:
        raise InputError(
            f"{name}: expected a number in "
            + (f"(0, {upper:g}]" if upper else "(0, ∞)")
            + f", got {value!r}"
        )
    return x


def share(name: str, value):
    """A number in [0, 1] (a share of something; 0 is none) as :func:`fraction` gives it."""
    try:
        # '0' as the number it writes
        read = quantity(name, value) if isinstance(value, str) else value
        x = (
            0
            if not isinstance(read, bool) and is_number(read) and read == 0
            else fraction(name, value)
        )
    except InputError:
        x = None
    if x is None or not is_number(x):
        raise InputError(f"{name}: expected a number in [0, 1], got {value!r}")
    return x


def choice(name: str, value, options):
    """``value`` if it is one of the (string) ``options``."""
    if not isinstance(value, str) or value not in options:
        raise InputError(
            f"{name}: expected one of {', '.join(map(repr, options))}, got {shown(value)}"
        )
    return value


def flag(name: str, value) -> bool:
    """``value`` if it is a bool: a string such as "no" or a number is not read as one."""
    if not (isinstance(value, bool) or _numpy_is(value, "bool_")):
        raise InputError(f"{name}: expected True or False, got {value!r}")
    return bool(value)


def distinct(name: str, values) -> tuple:
    """``values`` as a tuple, refused when empty or when a value repeats."""
    if isinstance(values, (str, bytes)) or not isinstance(
        values, (list, tuple, set, frozenset, range)
    ):
        raise InputError(f"{name}: expected a list or tuple of choices, got {values!r}")
    values = tuple(values)
    if not values:
        raise InputError(f"{name}: expected at least one choice, got {values!r}")
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        raise InputError(f"{name}: {seen[0]!r} is given more than once in {values!r}")
    return values
