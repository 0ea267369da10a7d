"""Reading a count written as text, exactly ('8', '16384', '16Ki', '2e3', '16M' tokens): never
through a float, and without sympy, pint or numpy (the command line reads its flags here before it
imports them). :mod:`analytic.core.values` reads every other value, and counts given as numbers,
with the same bounds and messages."""

from __future__ import annotations

import re
from fractions import Fraction

from .errors import InputError

#: longest string read as a quantity or a count
MAX_TEXT = 100
#: largest count accepted: float64, in which search and lambdify evaluate, holds every integer up to
#: 2**53
MAX_COUNT = 2**53
#: decimal and binary multipliers of a bare count ("16M" tokens, "16Mi" tokens)
COUNT_SUFFIXES = {
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
#: the binary suffix a decimal one is often meant as ("16M" tokens for 16Mi = 2²⁴)
BINARY_SUFFIX = {"k": "Ki", "K": "Ki", "M": "Mi", "G": "Gi", "T": "Ti"}
_COUNT = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*(Ki|Mi|Gi|Ti|k|K|M|G|T)?\s*")


def show(value) -> str:
    """``value`` for an error message: its repr, a Fraction as a number, at most 40 characters."""
    text = str(value) if isinstance(value, Fraction) else repr(value)
    return text if len(text) <= 40 else f"{text[:24]}… ({len(text):,} characters)"


def whole(name: str, number: Fraction, *, minimum: int = 1, shown: str) -> int:
    """An exact number as a count ≥ ``minimum`` and at most :data:`MAX_COUNT`; ``shown``: how the
    user wrote it, for the message."""
    if number.denominator != 1:
        raise InputError(f"{name}: expected an integer, got {shown}")
    if number < minimum or number > MAX_COUNT:
        raise InputError(
            f"{name}: expected an integer ≥ {minimum} and at most {MAX_COUNT:,}, got {shown}"
        )
    return int(number)


def suffixed_count(text: str) -> tuple[Fraction, str | None] | None:
    """``(number, suffix)`` of a count such as '16M', '16Mi', '16777216' or '16e6', exactly (the
    value is ``number · COUNT_SUFFIXES[suffix]``), or None when ``text`` is not one."""
    m = _COUNT.fullmatch(text) if len(text) <= MAX_TEXT else None
    return (Fraction(m.group(1)), m.group(2)) if m else None


def binary_reading(number: Fraction, suffix: str | None) -> Fraction | None:
    """The value of a decimal-suffixed count read with the binary suffix instead ('16M' →
    16·2²⁰), or None when the count has no decimal suffix."""
    return number * COUNT_SUFFIXES[BINARY_SUFFIX[suffix]] if suffix in BINARY_SUFFIX else None


def parse_count(name: str, text: str, *, minimum: int = 1) -> int:
    """A count written as text ('8', '16384', '16Ki', '2e3'), read exactly: never through a
    float."""
    parsed = suffixed_count(text)
    if parsed is None:
        raise InputError(f"{name}: expected an integer ≥ {minimum}, got {show(text)}")
    return whole(
        name, parsed[0] * COUNT_SUFFIXES.get(parsed[1], 1), minimum=minimum, shown=show(text)
    )


def decimal_suffix(tokens: Fraction) -> tuple[Fraction, str | None]:
    """A count without a suffix as the decimal one it is a whole multiple of, the largest (4,000,000
    and 4e6 are 4 M, 16,000 is 16 k); itself with None where it is no whole multiple of a
    thousand."""
    for suffix in ("T", "G", "M", "k"):
        if tokens % COUNT_SUFFIXES[suffix] == 0:
            return tokens / COUNT_SUFFIXES[suffix], suffix
    return tokens, None


def step_tokens(
    number: Fraction, suffix: str | None, seq_len: int, name: str, written
) -> tuple[int, str]:
    """Tokens per step from ``number`` with a count ``suffix`` (or None), ``written`` so by the
    user, and a note: a decimal count ('16M', '16e6', 16_000_000: a whole multiple of a thousand, a
    million, ...) that is not whole sequences of ``seq_len`` while its binary reading is (16·2²⁰
    at 8,192 tokens) is read as binary, and the note says so. The one rule of
    :func:`analytic.core.values.batch_tokens`."""
    tokens = number * COUNT_SUFFIXES.get(suffix, 1)
    note = ""
    if suffix is None and tokens % seq_len:
        number, suffix = decimal_suffix(tokens)
    if suffix in BINARY_SUFFIX and tokens % seq_len:
        binary = binary_reading(number, suffix)
        if binary % seq_len == 0:
            note = (
                f"{name} {written} read as {float(number):g} {BINARY_SUFFIX[suffix]} ="
                f" {int(binary):,} tokens ({int(binary) // seq_len:,} sequences of {seq_len:,};"
                f" {int(tokens):,} is not whole sequences)"
            )
            tokens = binary
    if tokens > MAX_COUNT:
        raise InputError(
            f"{name}: {show(written)} exceeds the {MAX_COUNT:,} tokens a step can be counted in"
            " exactly"
        )
    if tokens != int(tokens) or tokens < 1 or int(tokens) % seq_len:
        raise InputError(
            f"{name}: {show(written)} is not a whole number of {seq_len}-token sequences"
        )
    return int(tokens), note


__all__ = [
    "BINARY_SUFFIX",
    "COUNT_SUFFIXES",
    "MAX_COUNT",
    "MAX_TEXT",
    "binary_reading",
    "decimal_suffix",
    "parse_count",
    "show",
    "step_tokens",
    "suffixed_count",
    "whole",
]
