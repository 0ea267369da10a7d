"""The formula catalogue, one module per topic, each formula as published (with its source)."""

from __future__ import annotations

from . import (  # noqa: F401
    collectives,
    compute,
    device,
    memory,
    model,
    offload,
    ops,
    parallelism,
    pipeline,
    reliability,
    scaling,
)
from ._catalogue import CATALOGUE, lookup


def formula(name: str):
    """The catalogue formula called ``name`` (e.g. ``"memory.model_states.zero1"``)."""
    return lookup(name)


def formulas() -> dict:
    """Every catalogue formula by name."""
    return dict(CATALOGUE)
