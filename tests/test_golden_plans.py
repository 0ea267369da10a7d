"""Every quantity of six varied plans (values, units, provenance) as recorded in
tests/golden/plans.json by scripts/golden_plans.py: a restructuring of Plan changes none of them."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("golden_plans", ROOT / "scripts" / "golden_plans.py")
GOLDEN = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(GOLDEN)
RECORDED = json.loads((ROOT / "tests" / "golden" / "plans.json").read_text())


@pytest.fixture(scope="module")
def current():
    return GOLDEN.golden()


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_every_quantity_is_as_recorded(current, name):
    want, got = RECORDED[name], current[name]
    assert sorted(got) == sorted(want)
    for quantity, rec in want.items():
        now = got[quantity]
        if "error" in rec:
            assert now == rec, quantity
            continue
        assert now["unit"] == rec["unit"] and now["sources"] == rec["sources"], quantity
        assert now["value"] == pytest.approx(rec["value"], rel=1e-12, abs=1e-300), quantity
