"""Fixtures for every test folder (tests/, validation/, derivations/)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def docs() -> str:
    """The README and the docs/ pages, whitespace collapsed: where the figures the documentation
    states are looked up."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return " ".join(" ".join(p.read_text().split()) for p in pages)
