"""The exceptions users can catch. Every one derives from :class:`AnalyticError`."""

from __future__ import annotations

import difflib


def shown(value, limit: int = 80, *, quote: bool = True) -> str:
    """A user's value as a message quotes it: its repr (``quote=False``: its text, a file's name),
    at most ``limit`` characters."""
    text = repr(value) if quote else str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def install_hint(extra: str) -> str:
    """The command that installs the optional dependencies ``extra``, as this package was installed:
    from a source checkout (editable) or from a wheel."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "analytic" / "core").is_dir():
        return f"pip install -e '{root}[{extra}]'"
    return f"pip install 'analytic[{extra}]'"


class AnalyticError(Exception):
    """Base class of every error the library raises on purpose."""


class UnitError(AnalyticError, TypeError):
    """A value has the wrong unit (or a bare number was given where a unit is required)."""


class LayoutError(AnalyticError, ValueError):
    """A parallel layout cannot exist (degrees, divisibility, stages, schedule constraints)."""


class InputError(AnalyticError, ValueError):
    """A value is out of range or of the wrong kind (negative, NaN, non-integer degree, ...)."""


class UnknownNameError(AnalyticError, KeyError):
    """An unknown formula, model, hardware, keyword or quantity name; lists close matches."""

    def __init__(self, kind: str, name: str, known):
        known = sorted(known)
        close = difflib.get_close_matches(str(name)[:200], known, n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        listing = "" if close or len(known) > 40 else f"; known: {', '.join(known)}"
        self.message = f"unknown {kind} {shown(name)}{hint}{listing}"
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class PresetError(AnalyticError, ValueError):
    """A preset file entry is malformed or lacks a source."""


class FreeSymbolError(AnalyticError, ValueError):
    """A numeric answer was asked of an expression that still has free symbols."""


class ValidationError(AnalyticError):
    """A validation case, or its folder, that cannot be read or evaluated; the message names the
    case."""


class ApproximationWarning(UserWarning):
    """A formula was evaluated where its approximation is poor (a first-order model beyond its
    range); the message names the formula, why, and what holds there instead."""


class ReinterpretedWarning(UserWarning):
    """An input was read otherwise than written (e.g. '16M' tokens as 16Mi); the message says
    how."""
