"""The source text's configuration and figures (presets/essay.toml), read without sympy or pint."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path


@cache
def essay() -> dict:
    """essay.toml: its ``config`` (the plan the text describes) and ``text`` (the figures it
    states)."""
    return tomllib.loads(
        (Path(__file__).parent.parent / "presets" / "essay.toml").read_text(encoding="utf-8")
    )
