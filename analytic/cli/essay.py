"""The source text's configuration and figures (presets/essay.toml), read without sympy or pint."""

from __future__ import annotations

from pathlib import Path

from ..core.cache import package_toml


def essay() -> dict:
    """essay.toml: its ``config`` (the plan the text describes) and ``text`` (the figures it
    states)."""
    return package_toml(Path(__file__).parent.parent / "presets" / "essay.toml")
