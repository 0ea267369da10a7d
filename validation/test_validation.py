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


def test_torchtitan_attention_share_reason():
    """The reason recorded for TorchTitan's 256K row, recomputed: the CP series and the 8K-vs-32K
    pair of the same benchmark imply different attention shares of the 32K step, the model's lies
    between, and each share rounds to the percentage the reason states."""
    import numpy as np
    from scipy.optimize import least_squares

    from analytic.units import Q_

    cases = {c["id"]: c for c in tomllib.loads((HERE / "predicted.toml").read_text())["case"]}
    series = [cases[f"G04-{k}k"] for k in (32, 64, 128, 256)]
    s = np.array([c["plan"]["seq_len"] for c in series], float) / series[0]["plan"]["seq_len"]
    tps = np.array([Q_(c["published"]).magnitude for c in series])

    def per_token(p):  # a fixed per-token cost plus attention growing with the sequence
        return p[0] + p[1] * s

    fit = least_squares(lambda p: np.log(tps * per_token(p)), [1e-2, 1e-2], bounds=([0, 0], [1, 1]))
    residual = np.abs(1 / (tps * per_token(fit.x)) - 1).max()
    share_series = fit.x[1] / (fit.x[0] + fit.x[1])

    # Table 5's 1F1B row: the same tokens per microbatch as four sequences a quarter as long, so its
    # time per token is a + b/4 where the 32K row's is a + b
    short, long_ = cases["G02-1f1b"], series[0]
    quarter = short["plan"]["seq_len"] / long_["plan"]["seq_len"]
    assert quarter == 0.25 and (short["plan"]["microbatch_size"] * short["plan"]["seq_len"]
                                == long_["plan"]["microbatch_size"] * long_["plan"]["seq_len"])

    def share(tps_short, tps_long):
        return (1 - tps_long / tps_short) / (1 - quarter)

    share_pair = share(Q_(short["published"]).magnitude, Q_(long_["published"]).magnitude)
    model = [calibration.metric_formula(calibration.build_plan(c["plan"]), "tokens_per_second_per_gpu").value()
             for c in (short, long_)]
    share_model = share(*(float(m.to("token/s").magnitude) for m in model))

    assert residual < 0.06
    assert share_pair < share_model < share_series
    assert [round(100 * x) for x in (share_series, share_pair, share_model)] == [51, 32, 39]
    assert "51%" in cases["G04-256k"]["reason"] and "32%" in cases["G04-256k"]["reason"]
