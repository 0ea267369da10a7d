import numpy as np
import pytest

import analytic as an
from analytic.cli import plots
from analytic.search.sweeps import bubble as sweep_bubble


@pytest.fixture(scope="module")
def plan():
    return an.Plan(
        an.model("llama3-405b"),
        an.hardware("h100-sxm"),
        an.Layout(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True),
        seq_len=8192,
        global_batch=2048,
    )


def test_strong_scaling_sweep_equals_plans(plan):
    r = an.sweep(plan, gpus=[4096, 8192, 16384])
    for g, t in zip(r["gpus"], r["step_time [s]"]):
        p = an.Plan(
            plan.model, plan.hardware, plan.layout.replace(dp=int(g) // 128), seq_len=8192,
            global_batch=2048,
        )
        assert t == pytest.approx(p.step_time().magnitude, rel=1e-12)
    assert np.all(np.diff(r["step_time [s]"]) < 0)  # more GPUs, shorter steps at a fixed batch
    assert r.attrs["units"]["step_time"] == "s" and list(r["note"]) == ["", "", ""]


def test_weak_scaling_keeps_batch_per_replica(plan):
    r = an.sweep(plan, gpus=[4096, 8192], mode="weak")
    p = an.Plan(
        plan.model, plan.hardware, plan.layout.replace(dp=32), seq_len=8192, global_batch=1024
    )
    assert r["step_time [s]"][0] == pytest.approx(p.step_time().magnitude, rel=1e-12)


def test_scaling_sweep_refuses_points_plan_refuses(plan):
    """Each point is a plan Plan accepts: 2,048 sequences do not split over 96 replicas, nor over
    4,096 (past one sequence a replica), and those rows say so without a number while the others
    keep theirs; and one input is swept at a time."""
    r = an.sweep(plan, gpus=[8192, 12288, 32768, 524288])
    assert list(r["dp"]) == [64, 96, 256, 4096] and r["step_time [s]"].isna().tolist() == [
        False,
        True,
        False,
        True,
    ]
    assert "do not split" in r["note"][1] and "do not split" in r["note"][3] and r["note"][2] == ""
    with pytest.raises(an.InputError, match="no count"):
        an.sweep(plan, gpus=[12288])
    assert an.sweep(plan, gpus=[8192, 12288], mode="weak")["dp"].tolist() == [64, 96]
    with pytest.raises(an.InputError, match="one input"):
        an.sweep(plan, gpus=[8192], zero=[1])
    with pytest.raises(an.InputError, match="list of integers"):
        an.sweep(plan, gpus="8192")  # not the GPU counts 8, 1, 9 and 2
    for pp, m in ((0, [8]), (8, [0])):
        with pytest.raises(an.InputError, match="pp" if not pp else "microbatches"):
            sweep_bubble(pp, m)


def test_memory_sweep_over_zero_is_monotone_without_a_pipeline(plan):
    """Each ZeRO stage shards more; only a pipeline makes stage 3 hold its stage unsharded again
    (16-bit gradients at every stage, so the stages compare)."""
    plan = plan.replace(grad_dtype="bf16")
    flat = plan.replace(layout=plan.layout.replace(pp=1, dp=1024))
    totals = list(an.sweep(flat, zero=[0, 1, 2, 3])["total [GB]"])
    assert totals == sorted(totals, reverse=True) and len(set(totals)) == 4
    piped = list(an.sweep(plan, zero=[0, 1, 2, 3])["total [GB]"])
    assert piped[:3] == sorted(piped[:3], reverse=True) and piped[3] > piped[1]


def test_bubble_sweep_matches_formula():
    b = sweep_bubble(8, [8, 16, 32])
    assert b["1f1b"] == pytest.approx([7 / 8, 7 / 16, 7 / 32])
    assert b["zb-h1"] == pytest.approx(b["1f1b"] / 3)
    assert np.all(b["zb-h2"] == 0)


@pytest.mark.parametrize("kind", ["scaling", "memory", "bubble", "pareto"])
def test_plots_render(tmp_path, kind):
    pytest.importorskip("matplotlib")
    from PIL import Image

    out = tmp_path / f"{kind}.png"
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    if kind == "bubble":
        plots.bubble(8, out=out)
    elif kind == "scaling":
        plots.scaling(
            m, hw, gpus=[8, 16], seq_len=2048, global_batch=64, out=out, zero=(1,),
            recompute=("none",), schedules=("1f1b",),
        )
    else:
        res = an.search(
            m, hw, gpus=16, seq_len=2048, global_batch=64, zero=(1, 3), recompute=("none",),
            schedules=("1f1b",), progress=False,
        )
        if kind == "memory":
            plots.memory(res, m, hw, seq_len=2048, global_batch=64, out=out)
        else:
            plots.pareto(res, out=out)
    img = Image.open(out)
    assert img.size[0] > 100 and img.size[1] > 100
    assert len(np.unique(np.asarray(img.convert("L")))) > 10  # not a blank canvas


def test_plots_refuse_what_they_cannot_draw(tmp_path):
    pytest.importorskip("matplotlib")
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    with pytest.raises(an.InputError, match="out"):
        plots.bubble(8, out=tmp_path / "bubble.xyz")  # a format matplotlib does not write
    with pytest.raises(an.InputError, match="pp"):
        plots.bubble(0, out=tmp_path / "bubble.png")
    with pytest.raises(an.InputError, match="at least one"):
        plots.scaling(m, hw, gpus=[], seq_len=2048, global_batch=64, out=tmp_path / "scaling.png")
    assert not list(tmp_path.iterdir())


def test_plot_axes_are_labelled(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    seen = []
    monkeypatch.setattr(
        plt.Figure,
        "savefig",
        lambda self, *a, **k: seen.append([(ax.get_xlabel(), ax.get_ylabel()) for ax in self.axes]),
    )
    plots.bubble(4, out=tmp_path / "b.png")
    assert seen and all(x and y for x, y in seen[0])


def test_plots_do_not_mislead():
    """Figures as objects (out=None): fractions on axes from zero, a legend naming every line, the
    configuration in the title, the chosen layout annotated, log axes where values span decades."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    kw = dict(zero=(1, 3), recompute=("none", "full"), schedules=("1f1b",))
    fig = plots.scaling(m, hw, gpus=[8, 16, 32], seq_len=2048, global_batch=64, **kw)
    time_ax, mfu_ax = fig.axes
    assert mfu_ax.get_ylim()[0] == 0 and mfu_ax.get_ylim()[1] >= 0.6
    assert {t.get_text() for t in time_ax.get_legend().get_texts()} == {
        "step time (s)",
        "MFU (6·N·D)",
    }
    assert (
        "llama3-8b" in time_ax.get_title()
        and "h100-sxm" in time_ax.get_title()
        and "2,048" in time_ax.get_title()
    )
    assert time_ax.get_xscale() == "log"
    assert sum("TP" in t.get_text() for t in time_ax.texts) == 3  # each size's layout
    plt.close(fig)
    res = an.search(m, hw, gpus=16, seq_len=2048, global_batch=64, progress=False, **kw)
    spread = res.arrays["step_time"][res.arrays["fits"]]
    fig = plots.pareto(res)
    ax = fig.axes[0]
    assert ax.get_xscale() == ("log" if spread.max() > 10 * spread.min() else "linear")
    assert ax.get_ylim()[0] == 0 and ax.get_title()
    assert any("fastest" == t.get_text() for t in ax.get_legend().get_texts())
    best = res.best.layout
    assert any(f"TP{best.tp} CP{best.cp} PP{best.pp} DP{best.dp}" in t.get_text() for t in ax.texts)
    plt.close(fig)
    fig = plots.memory(res, m, hw, seq_len=2048, global_batch=64)
    ax = fig.axes[0]
    assert ax.get_ylim()[0] == 0 and "HBM" in {t.get_text() for t in ax.get_legend().get_texts()}
    assert "llama3-8b" in ax.get_title()
    plt.close(fig)
    fig = plots.bubble(8)
    ax = fig.axes[0]
    from analytic.search.sweeps import bubble as sweep_bubble

    schedules = set(sweep_bubble(8, [8])) - {"microbatches"}
    assert ax.get_ylim()[0] == 0 and ax.get_xscale() == "log"
    assert {t.get_text() for t in ax.get_legend().get_texts()} == schedules
    plt.close(fig)


def test_plot_scaling_takes_the_gpu_counts_given_and_says_which(tmp_path, capsys, monkeypatch):
    """`plot scaling --gpus 8,32,64` draws those counts; one count draws gpus/8 to 2·gpus, and the
    command says so."""
    from analytic.cli.main import main

    drawn = []
    monkeypatch.setattr(
        plots, "scaling", lambda model, hw, *, gpus, out, **kw: drawn.append(list(gpus))
    )
    common = [
        "--model",
        "llama3-8b",
        "--hardware",
        "h100-sxm",
        "--seq",
        "2048",
        "--global-batch",
        "64",
        "--out",
        str(tmp_path / "s.png"),
    ]
    assert main(["plot", "scaling", "--gpus", "8,32,64", *common]) == 0
    assert drawn[-1] == [8, 32, 64] and "GPU counts: 8, 32, 64" in capsys.readouterr().out
    assert main(["plot", "scaling", "--gpus", "64", *common]) == 0
    assert drawn[-1] == [8, 16, 32, 64, 128] and "gpus/8 to 2·gpus" in capsys.readouterr().out
    assert main(["plot", "memory", "--gpus", "8,16", *common]) == 2


def test_plot_scaling_takes_a_range_of_gpu_counts(tmp_path, capsys):
    """--gpus-range START:STOP draws START doubling up to STOP (STOP itself only where it is on the
    way), and says which; it is refused beside --gpus or for another plot."""
    from analytic.cli.main import main

    out = tmp_path / "s.png"
    flags = [
        "--model",
        "llama3-8b",
        "--hardware",
        "h100-sxm",
        "--seq",
        "2048",
        "--global-batch",
        "64",
        "--out",
        str(out),
    ]
    assert main(["plot", "scaling", "--gpus-range", "8:40", *flags]) == 0
    assert "GPU counts: 8, 16, 32" in capsys.readouterr().out and out.stat().st_size > 10_000
    assert main(["plot", "scaling", "--gpus-range", "8:64", "--gpus", "8", *flags]) == 2
    assert main(["plot", "memory", "--gpus-range", "8:64", *flags]) == 2
    assert main(["plot", "scaling", "--gpus-range", "64:8", *flags]) == 2
    assert plots.doubling("64:16384") == [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]


def test_plot_refuses_json(tmp_path, capsys):
    """A plot writes a figure: --json, which every data command reads, is refused here, not
    ignored."""
    from analytic.cli.main import main

    assert main(["plot", "bubble", "--out", str(tmp_path / "b.png"), "--json"]) == 2
    assert "--json is not read" in capsys.readouterr().err and not (tmp_path / "b.png").exists()
