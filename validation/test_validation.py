"""Every validation case as a test: its computed status must be the one the case records
(a disagreement that the case documents stays a disagreement; an improvement flags too)."""

import tomllib
from pathlib import Path

import pytest

from analytic import calibration, validation

HERE = Path(__file__).parent
IDS = [c["id"] for c in validation.load(HERE)[0]]


@pytest.fixture(scope="module")
def results():
    return validation.run(HERE)


@pytest.mark.parametrize("case_id", IDS)
def test_case(results, case_id):
    result = next(r for r in results if r.id == case_id)
    assert result.status == result.expected, (
        f"{result.id}: published {result.published}, ours {result.ours}, error {result.error}, "
        f"status {result.status}, recorded {result.expected}")
    if result.status in ("disagrees", "outside"):
        assert result.reason, f"{result.id}: a disagreement needs a reason naming the primary source"


def test_every_case_has_a_source():
    cases, _ = validation.load(HERE)
    assert all(c.get("source") for c in cases)


def test_report_is_current(results):
    assert (HERE / "REPORT.md").read_text() == validation.markdown(results), "run: analytic validate"


def test_shipped_calibration_is_reproduced():
    from analytic.presets import CALIBRATION_FILE
    cases = [c for c in calibration.load_cases(HERE / "predicted.toml") if c.in_fit]
    constants = calibration.fit(cases)
    shipped = tomllib.loads(CALIBRATION_FILE.read_text())
    for key, value in constants["matmul_efficiency"].items():
        assert shipped["matmul_efficiency"][key] == pytest.approx(value, abs=2e-6)
    assert shipped["shared"]["overlap"] == pytest.approx(constants["overlap"], abs=2e-6)
    assert shipped["shared"]["link_efficiency"] == pytest.approx(constants["link_efficiency"], abs=2e-6)


def test_library_never_names_a_case():
    source = "\n".join(p.read_text() for p in (HERE.parent / "analytic").rglob("*.py"))
    for case_id in IDS:
        if len(case_id) > 3:
            assert f'"{case_id}"' not in source and f"'{case_id}'" not in source, case_id
