"""How the command writes: JSON that is JSON, and text that any standard output can take.

:func:`json_text` writes a value that is not a finite number (a step time no link can give) as
``null``, which JSON has, never ``NaN``, which it has not. :func:`prepare` readies standard output:
a closed one ends the command quietly with exit 141 (a closed pipe's code); where its encoding
(``LANG=C``, Latin-1) cannot take the notation's characters (Ψ, ×, –, ≈, ...), they are
written in ASCII (Psi, x, -, ~, ...).
"""

from __future__ import annotations

import codecs
import json
import math
import sys

#: the notation's characters as ASCII writes them
ASCII = {
    "Ψ": "Psi",
    "×": "x",
    "·": "*",
    "–": "-",
    "—": "-",
    "−": "-",
    "≈": "~",
    "≤": "<=",
    "≥": ">=",
    "→": "->",
    "←": "<-",
    "…": "...",
    "≠": "!=",
    "±": "+/-",
    "∂": "d",
    "√": "sqrt",
    "∞": "inf",
    "²": "^2",
    "³": "^3",
    "⁴": "^4",
    "ᵀ": "^T",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
    "α": "alpha",
    "β": "beta",
    "γ": "gamma",
    "δ": "delta",
    "η": "eta",
    "μ": "u",
    "σ": "sigma",
    "τ": "tau",
    "Δ": "Delta",
    "Σ": "Sum",
    "ℓ": "l",
}


def _ascii(error: UnicodeEncodeError):
    text = error.object[error.start : error.end]
    return "".join(ASCII.get(c, "?") for c in text), error.end


codecs.register_error("analytic-ascii", _ascii)


def json_text(data, **options) -> str:
    """``data`` as JSON (``options`` as :func:`json.dumps` takes them), with every number that is
    not finite written as null."""

    def plain(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        return x

    return json.dumps(plain(data), allow_nan=False, **options)


class ClosedOutput(Exception):
    """Standard output is closed: nothing the command prints could be read."""


def prepare() -> None:
    """Ready standard output for the command (see the module); ClosedOutput where it is closed."""
    if sys.stdout is None:
        raise ClosedOutput("standard output is closed")
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        try:
            "Ψ×–≈".encode(sys.stdout.encoding or "ascii")
        except (UnicodeEncodeError, LookupError):
            reconfigure(errors="analytic-ascii")
