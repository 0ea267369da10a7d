"""calibrate --gemm: the fit recovers known constants, runs on this CPU in seconds, and writes a
profile that Plan reads as data."""

import json
import math

import pytest

import analytic as an
from analytic.cli.main import main
from analytic.core.errors import InputError
from analytic.reference import gemm


def _synthetic(flops, bandwidth, sms, tile, e=2):
    """Seconds the catalogue's GEMM time gives for known constants (η = 1 of ``flops``, η_hbm = 1 of
    ``bandwidth``), over the CUDA grid."""
    out = {
        "element_bytes": e,
        "sms": sms,
        "gemms": [],
        "copy": {"bytes": 2e9, "seconds": 2e9 / bandwidth},
    }
    for m, n, k in gemm.GRID["cuda"]:
        t = an.formula("compute.gemm.math_time").evaluate(
            gemm_count=1, gemm_m=m, gemm_n=n, gemm_k=k, tile_m=tile[0], tile_n=tile[1], sms=sms,
            peak_flops=f"{flops} FLOP/s", matmul_efficiency=1,
        )
        t = t + an.formula("compute.gemm.memory_time").evaluate(
            gemm_count=1, gemm_m=m, gemm_n=n, gemm_k=k, element_bytes=f"{e} byte",
            hbm_bandwidth=f"{bandwidth} B/s", memory_efficiency=1,
        )
        out["gemms"].append({"m": m, "n": n, "k": k, "seconds": t.to("s").magnitude})
    return out


def test_the_fit_recovers_the_constants_the_times_were_made_with():
    samples = _synthetic(7.5e14, 3.0e12, 132, (128, 256))
    result = gemm.fit(samples, tile=(128, 256))
    assert result["achieved_flops"] == pytest.approx(7.5e14, rel=1e-9)
    assert result["operand_bandwidth"] == pytest.approx(3.0e12, rel=1e-9)
    assert (
        result["r2_log"] == pytest.approx(1, abs=1e-9) and result["held_out_mean_abs_error"] < 1e-9
    )
    assert result["copy_bandwidth"] == pytest.approx(3.0e12, rel=1e-12)
    unquantised = gemm.fit(samples)  # the same times read without wave quantisation fit worse
    assert unquantised["held_out_mean_abs_error"] > 1e-3


def test_a_profile_is_the_measured_shares_of_the_peaks(tmp_path):
    samples = _synthetic(7.5e14, 3.0e12, 132, (128, 256))
    table = gemm.profile(
        {**samples, "name": "x", "device": "cuda", "dtype": "bfloat16"},
        gemm.fit(samples, tile=(128, 256)),
        peak_flops=1e15,
        hbm_bandwidth=4e12,
    )
    assert table["constants"] == {
        "matmul_efficiency": pytest.approx(0.75),
        "memory_efficiency": pytest.approx(0.75),
    }
    path = tmp_path / "p.toml"
    path.write_text(gemm.to_toml(table))
    plan = an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(dp=8), seq_len=4096,
        global_batch=8, profile=path,
    )
    assert float(plan.inputs["matmul_efficiency"]) == pytest.approx(0.75)
    assert float(plan.inputs["memory_efficiency"]) == pytest.approx(0.75)
    given = an.Plan(
        an.model("llama3-8b"),
        an.hardware("h100-sxm"),
        an.Layout(dp=8),
        seq_len=4096,
        global_batch=8,
        profile=path,
        matmul_efficiency=0.5,
    )  # a keyword wins over the profile
    assert float(given.inputs["matmul_efficiency"]) == 0.5


@pytest.mark.parametrize(
    "text, what",
    [
        ("[constants]\nmatmul_efficiency = 1.5\n", "matmul_efficiency"),
        ("[constants]\nlink_efficiency = 0.5\n", "unknown constant"),
        ('[constants]\nmatmul_efficiency = "0.5"\n', "must be a number"),
        ('[profile]\ndevice = "x"\n', r"\[constants\]"),
        ("import os; os.system('true')\n", "not a TOML profile"),
    ],
)
def test_a_profile_is_data_checked_before_use(tmp_path, text, what):
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=what):
        an.Plan(
            an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(dp=8), seq_len=4096,
            global_batch=8, profile=path,
        )


def test_calibrate_gemm_runs_on_this_cpu(capsys):
    """A measurement of this CPU: a fit that describes it gives its FLOP/s; one that does not (a
    machine busy with other work times its GEMMs unevenly) says so on stderr and why, and still
    prints what it measured."""
    assert main(["calibrate", "--gemm", "--device", "cpu", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    fit = out["fit"]
    assert out["profile"]["torch_device"] == "cpu" and out["constants"] == {}
    assert fit["fitted_shapes"] + fit["held_out_shapes"] == len(gemm.GRID["cpu"])
    assert math.isfinite(fit["r2_log"]) and fit["copy_bandwidth"] > 0
    why = gemm.poor({"achieved_flops": fit.get("achieved_flops"), **fit})
    if why is None:
        assert 0 < fit["achieved_flops"] < 1e15 and "poorly" not in captured.err
    else:
        assert f"fits this device poorly ({why})" in captured.err


def test_calibrate_gemm_writes_only_with_the_peaks(tmp_path, capsys, monkeypatch):
    # whatever this CPU's fit: the peaks are the subject
    monkeypatch.setattr(gemm, "poor", lambda result: None)
    path = tmp_path / "cpu.toml"
    assert main(["calibrate", "--gemm", "--device", "cpu", "--write", str(path)]) == 2
    assert "--hardware" in capsys.readouterr().err and not path.exists()
    assert (
        main(
            [
                "calibrate",
                "--gemm",
                "--device",
                "cpu",
                "--peak-flops",
                "100 TFLOP/s",
                "--hbm-bandwidth",
                "1 TB/s",
                "--write",
                str(path),
            ]
        )
        == 0
    )
    constants = an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(dp=8), seq_len=4096,
        global_batch=8, profile=path,
    ).inputs
    assert (
        0 < float(constants["matmul_efficiency"]) <= 1
        and 0 < float(constants["memory_efficiency"]) <= 1
    )


def test_a_poor_fit_is_named_and_never_written(tmp_path, capsys, monkeypatch):
    """Times the GEMM model cannot explain (shuffled over the shapes: R² of log time below 0) are a
    poor fit: printed with a warning, refused with --write (exit 2, nothing written); exact times
    are not."""
    samples = _synthetic(7.5e14, 3.0e12, 132, (128, 256))
    assert gemm.poor(gemm.fit(samples, tile=(128, 256))) is None
    seconds = [g["seconds"] for g in samples["gemms"]]
    shuffled = {
        **samples,
        "gemms": [{**g, "seconds": t} for g, t in zip(samples["gemms"], reversed(seconds))],
    }
    bad = gemm.fit(shuffled, tile=(128, 256))
    assert bad["r2_log"] < 0 and gemm.poor(bad)
    assert "R²" in gemm.poor({**bad, "achieved_flops": 1e14}) and "held-out" in gemm.poor(
        {**bad, "achieved_flops": 1e14, "r2_log": 0.95}
    )
    monkeypatch.setattr(gemm, "fit", lambda samples, tile=None: bad)
    path = tmp_path / "cpu.toml"
    args = [
        "calibrate",
        "--gemm",
        "--device",
        "cpu",
        "--peak-flops",
        "100 TFLOP/s",
        "--hbm-bandwidth",
        "1 TB/s",
    ]
    assert main([*args, "--write", str(path)]) == 2
    assert "fits this device poorly" in capsys.readouterr().err and not path.exists()
    assert main([*args, "--json"]) == 0
    assert "fits this device poorly" in capsys.readouterr().err
