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
    """The reason recorded for TorchTitan's 256K row, recomputed: a fixed per-token cost plus attention
    growing with the sequence fits the benchmark's 405B rows (8K to 256K, same model, tokens per
    step and per GPU per microbatch) with a larger attention share of the 32K step than the model's, and each
    share rounds to the percentage the reason states."""
    import numpy as np
    from scipy.optimize import least_squares

    from analytic.units import Q_

    cases = {c["id"]: c for c in tomllib.loads((HERE / "predicted.toml").read_text())["case"]}
    rows = [cases["G02-1f1b"]] + [cases[f"G04-{k}k"] for k in (32, 64, 128, 256)]
    per_gpu = {c["plan"]["microbatch_size"] * c["plan"]["seq_len"] / c["plan"]["layout"].get("cp", 1) for c in rows}
    per_step = {c["plan"]["global_batch"] * c["plan"]["seq_len"] for c in rows}
    assert len(per_gpu) == len(per_step) == 1 and all(c["plan"]["model"] == "llama3-405b" for c in rows)
    s = np.array([c["plan"]["seq_len"] for c in rows], float) / rows[1]["plan"]["seq_len"]  # 32K = 1
    tps = np.array([Q_(c["published"]).magnitude for c in rows])

    def per_token(p):
        return p[0] + p[1] * s

    fit = least_squares(lambda p: np.log(tps * per_token(p)), [1e-2, 1e-2], bounds=([0, 0], [1, 1]))
    residual = np.abs(1 / (tps * per_token(fit.x)) - 1).max()
    share_fit = fit.x[1] / (fit.x[0] + fit.x[1])

    # the model's share, from its own 8K and 32K predictions: time per token a + b/4 against a + b
    model = [float(calibration.metric_formula(calibration.build_plan(c["plan"]), "tokens_per_second_per_gpu")
                   .value().to("token/s").magnitude) for c in rows[:2]]
    share_model = (1 - model[1] / model[0]) / (1 - s[0])

    assert residual < 0.09
    assert share_model < share_fit
    assert [round(100 * x) for x in (share_fit, share_model)] == [45, 39]
    assert all(f"{x}%" in cases["G04-256k"]["reason"] for x in (9, 45, 39))


def test_readme_memory_paragraph():
    """The README's numbers on memory, recomputed: TorchTitan's published peaks (GiB, the memory
    column of each table of pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md) against
    the model's for the same runs, and the two published layouts the model puts above 80 GB."""
    cases = {c["id"]: c for c in tomllib.loads((HERE / "predicted.toml").read_text())["case"]}
    measured = {"G03-8b-8": 76.8, "G03-8b-128": 61.8, "G03-70b-2d": 71.9, "G03-70b-2d-async-tp": 67.6,
                "G02-1f1b": 82.5, "G02-interleaved": 72.7, "G04-32k": 75.3, "G04-64k": 75.9, "G04-128k": 77.1,
                "G04-256k": 84.9}
    model = {k: calibration.build_plan(cases[k]["plan"]).memory().total.to("GiB").magnitude for k in measured}
    ratios = [measured[k] / model[k] for k in measured]
    assert (round(min(model.values())), round(max(model.values()))) == (33, 88)
    assert (round(min(ratios), 1), round(max(ratios), 1)) == (0.8, 2.2)
    readme = (HERE.parent / "README.md").read_text()
    assert "(62–85 GiB) are 0.8–2.2× the model's (33–88 GiB)" in readme.replace("\n", " ")
    for case_id, gb in (("A01", 107), ("B02", 101)):
        total = calibration.build_plan(cases[case_id]["plan"]).memory().total.to("GB").magnitude
        assert round(total) == gb and f"({gb} GB;" in readme
