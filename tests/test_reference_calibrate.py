import pytest

import analytic as an
from analytic.core.errors import PresetError
from analytic.reference.calibrate import fit, profile_overrides

torch = pytest.importorskip("torch", reason="the numeric reference needs the 'torch' extra")


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_fit_recovers_alpha_and_bandwidth_from_the_ring_formula(ranks):
    sizes = [2**k for k in range(10, 24)]
    data = {}
    for name in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all"):
        f = an.formula(f"collectives.{name}.time")
        data[name] = [
            [
                s,
                f.evaluate(
                    message=f"{s} byte", ranks=ranks, bandwidth="12 GB/s", latency="35 us"
                ).magnitude,
            ]
            for s in sizes
        ]
    for name, r in fit(data, ranks).items():
        assert r["alpha_us"] == pytest.approx(35, rel=1e-6), name
        assert r["bandwidth_GBps"] == pytest.approx(12, rel=1e-6), name
        assert r["held_out_error"] < 1e-9 and r["r2"] == pytest.approx(1)


def test_backend_calibration_prints_a_fit_with_held_out_error(tmp_path, capsys):
    from analytic.cli.main import main

    out = tmp_path / "gloo.toml"
    assert main(["calibrate", "--backend", "gloo", "--ranks", "2", "--write", str(out)]) == 0
    text = capsys.readouterr().out
    assert "held-out error" in text and "all_reduce" in text
    try:
        over = profile_overrides(out)
    except PresetError as exc:  # timings drowned in the noise of a loaded machine: said, not used
        assert "found no bandwidth" in str(exc)
        return
    plan = an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(tp=2), seq_len=1024,
        global_batch=4, **over,
    )
    assert plan.step_time().magnitude > 0


@pytest.mark.parametrize(
    "argv, what",
    [
        (["--backend", "gloo", "--ranks", "1"], "--ranks"),
        (["--backend", "gloo", "--ranks", "4096"], "--ranks"),
        (["--backend", "nccl", "--ranks", "64"], "--backend nccl"),
    ],
)
def test_impossible_measurements_are_refused_before_spawning(capsys, monkeypatch, argv, what):
    from analytic.cli.main import main

    monkeypatch.delenv("RANK", raising=False)
    assert main(["calibrate", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and what in err


def test_a_profile_without_a_bandwidth_is_refused(tmp_path):
    """A fit whose times did not grow with the message size has no bandwidth (inf): the profile says
    so instead of handing an infinite link to a plan."""
    bad = tmp_path / "flat.toml"
    bad.write_text("[all_reduce]\nalpha_us = 12.0\nbandwidth_GBps = inf\n")
    with pytest.raises(PresetError, match="found no bandwidth"):
        profile_overrides(bad)
