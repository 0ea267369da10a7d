"""A predicted case under each reading of a setting its source does not state (its interleaving
depth, its FLOP convention, a peak known only within a range): the case's plan with the reading's
changes, predicted with the shipped constants, and its step time's relative error. The case keeps
the reading its assumptions give; REPORT.md shows the others beside it, never choosing one by its
error."""

from __future__ import annotations

from ..core.errors import InputError
from ..core.values import as_quantity
from . import calibration

#: the tables of a case's plan a reading's ``plan`` merges into rather than replaces
MERGED = ("layout", "hardware_overrides", "model_overrides")


def merged(plan: dict, change: dict) -> dict:
    """``plan`` with ``change``'s entries, the tables of :data:`MERGED` merged key by key."""
    out = {**plan, **{k: v for k, v in change.items() if k not in MERGED}}
    for key in MERGED:
        if key in change:
            out[key] = {**plan.get(key, {}), **change[key]}
    return out


def readings(case: dict, constants: dict, fitted: list) -> list[dict]:
    """``case``'s alternative readings (its ``reading`` tables: ``name``, a ``plan`` of changes, a
    ``convention``), each with the step time's relative error under the fitted ``constants``."""
    out = []
    for reading in case.get("reading", []):
        if not isinstance(reading, dict) or not isinstance(reading.get("name"), str):
            raise InputError(
                f"case {case['id']}: a reading needs a name and may give plan and convention"
            )
        alt = calibration.Case(
            case["id"],
            merged(case["plan"], reading.get("plan", {})),
            case["metric"],
            reading.get("convention", case.get("convention", "6nd")),
            as_quantity("published", case["published"]),
            group=case["group"],
        )
        out.append(
            {
                "reading": reading["name"],
                "error": calibration.step_error(alt, calibration.predict(alt, constants, fitted)),
            }
        )
    return out
