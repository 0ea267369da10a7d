"""Co-design sweeps (an.codesign): rows that are search's and Plan's, the same frame in-process, in
any chunks and on a Dask cluster, one-line errors for bad grids, nothing written by an interrupted
sweep, and the symbolic sensitivity the sweep shows numerically."""

import json

import numpy as np
import pandas as pd
import pytest

import analytic as an
from analytic.cli.main import main
from analytic.search import codesign as cd

KW = dict(seq_len=4096, global_batch=64)
VARY = {"scale_out_bandwidth": "25:100:2 GB/s", "hbm": ["40 GB", "80 GB"]}


@pytest.fixture(scope="module")
def frame():
    return an.codesign(
        ["llama3-8b"], "h100-sxm", 64, vary=VARY, keep=2, scheduler="synchronous", **KW
    )


def test_each_row_is_the_search_at_its_point_and_plans_number(frame):
    """Four points (two bandwidths × two HBM sizes), two kept layouts each: the first is search's
    best at that hardware, and its step time, memory and MFU are Plan's for that layout."""
    assert list(frame["point"]) == [0, 0, 1, 1, 2, 2, 3, 3] and list(frame["rank"]) == [1, 2] * 4
    assert list(frame["scale_out_bandwidth [GB/s]"].unique()) == [25.0, 100.0]
    for _, row in frame[frame["rank"] == 1].iterrows():
        hw = an.hardware("h100-sxm").replace(
            scale_out_bandwidth=f"{row['scale_out_bandwidth [GB/s]']} GB/s",
            hbm=f"{row['hbm [GB]']} GB",
        )
        best = an.search(an.model("llama3-8b"), hw, gpus=64, progress=False, **KW).best
        assert best.step_time == pytest.approx(row["step_time [s]"], rel=1e-12)
        lay = an.Layout(
            tp=int(row["tp"]), cp=int(row["cp"]), pp=int(row["pp"]), dp=int(row["dp"]),
            zero=int(row["zero"]), recompute=row["recompute"], schedule=row["schedule"],
            vpp=int(row["vpp"]), sequence_parallel=int(row["tp"]) > 1,
        )
        plan = an.Plan("llama3-8b", hw, lay, microbatch_size=int(row["microbatch_size"]), **KW)
        assert plan.step_time().to("s").magnitude == pytest.approx(row["step_time [s]"], rel=1e-9)
        assert plan.memory().total.to("GB").magnitude == pytest.approx(row["memory [GB]"], rel=1e-9)
        assert plan.mfu() == pytest.approx(row["mfu"], rel=1e-9)
    assert frame.attrs["units"]["step_time"] == "s" and frame.attrs["layouts_evaluated"] > 1000


def test_the_same_frame_in_process_in_any_chunks_and_on_a_local_cluster(frame):
    """Results do not depend on how the points are cut into tasks nor where the tasks run: a
    LocalCluster of two worker processes started here gives the frame the synchronous scheduler
    does, and a plan shipped to a worker comes back whole."""
    import os
    from copy import copy
    from operator import methodcaller

    from distributed import Client, LocalCluster

    one = an.codesign(
        ["llama3-8b"], "h100-sxm", 64, vary=VARY, keep=2, scheduler="synchronous", chunk=1, **KW
    )
    pd.testing.assert_frame_equal(one, frame)
    # Dask's nanny writes its workers' variables (malloc, OpenMP) into this process's environment
    saved = dict(os.environ)
    try:
        cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
    finally:
        os.environ.clear()
        os.environ.update(saved)
    plan = an.Plan("llama3-8b", "h100-sxm", an.Layout(tp=2, dp=32), **KW)
    with cluster, Client(cluster) as client:
        on_dask = an.codesign(
            ["llama3-8b"], "h100-sxm", 64, vary=VARY, keep=2, scheduler=cluster.scheduler_address,
            chunk=3, **KW,
        )
        # a plan shipped to a worker, and the plan and quantity it sends back; a layout, model,
        # hardware and search result there and back
        shipped = client.submit(methodcaller("replace", overlap=0.5), plan).result()
        step = client.submit(methodcaller("step_time"), shipped).result()
        result = an.search("llama3-8b", "h100-sxm", gpus=64, progress=False, **KW)
        objects = (plan.layout, plan.model, plan.hardware, plan.memory(), result.best)
        back = client.gather(client.map(copy, objects, pure=False))
        # the caller's Client, as Dask's own functions take it: used as it is and left open
        with_client = an.codesign(
            ["llama3-8b"], "h100-sxm", 64, vary=VARY, keep=2, scheduler=client, **KW
        )
        assert client.status == "running"
    pd.testing.assert_frame_equal(on_dask, frame)
    pd.testing.assert_frame_equal(with_client, frame)
    assert step == plan.replace(overlap=0.5).step_time() and shipped.overrides == {"overlap": 0.5}
    assert [repr(b) for b in back] == [repr(o) for o in objects]


@pytest.mark.parametrize(
    "vary, match",
    [
        ({"host_memory": ["1 TB"]}, "not a hardware field a formula reads"),
        ({"hbm": ["80 GB/s"]}, "hbm"),
        ({"hbm": "80:40:0 GB"}, "an empty grid"),
        ({"hbm": []}, "an empty grid"),
        ({"scale_up_domain": "8:72:4"}, "whole numbers"),
        ({"hbm": "a:b:3 GB"}, "numbers"),
        ({}, "at least one hardware field"),
        ({"hbm": [None]}, "hbm: expected a quantity in byte"),
        ({"price": [None]}, "price: expected a rate in USD/hour"),
        ({"hbm": an.Q_(80, "GB")}, "expected a list of values .* got the single value"),
        ({"hbm": "1:2:100000000 GB"}, "100,000,000 hardware points"),
        ({"scale_up_domain": "1:2:" + "1" + "0" * 30}, "hardware points × 1 models is more than"),
        ({"hbm": "1:2:\u0661\u0660 GB"}, "num a whole number"),
        ({"hbm": "nan:2:3 GB"}, "start and stop must be numbers"),
        ({"hbm": ["80 GB", "inf GB"]}, "cannot read 'inf GB'"),
        ({"hbm": "1:2:3 GB/s"}, "hbm: expected a quantity in byte, got 1 GB/s"),
    ],
)
def test_a_bad_grid_is_one_error_naming_it(vary, match, monkeypatch):
    """Checked from its description, before a point is built (building one fails this test)."""
    monkeypatch.setattr(cd, "points", None)
    with pytest.raises(an.AnalyticError, match=match):
        an.codesign("llama3-8b", "h100-sxm", 64, vary=vary, scheduler="synchronous", **KW)


@pytest.mark.parametrize(
    "scheduler, want",
    [
        (" Synchronous", "synchronous"),
        ("tcp://10.0.0.1:8786", "tcp://10.0.0.1:8786"),
        ("node7:8786", "tcp://node7:8786"),
        ("tls://[::1]:8786", "tls://[::1]:8786"),
        ("threads", None),
        ("garbage", None),
        ("inproc://x", None),
        ("ucx://a:1", None),
        ("tcp://a:0", None),
        ("tcp://a:70000", None),
        (5, None),
    ],
)
def test_a_scheduler_is_synchronous_or_an_address_dask_reaches(scheduler, want):
    if want is None:
        with pytest.raises(an.InputError, match="scheduler: expected"):
            cd.scheduler_of(scheduler)
    else:
        assert cd.scheduler_of(scheduler) == want


def test_a_scheduler_that_does_not_answer_is_one_error_before_anything_is_built(monkeypatch):
    """Nothing listening, or an HTTP server where a scheduler should be (whose reply Dask would read
    as a frame of exabytes): one InputError within the timeout, before a program is built."""
    import http.server
    import threading

    monkeypatch.setattr(cd, "SCHEDULER_TIMEOUT", 1)
    monkeypatch.setattr(cd, "_prepare", None)
    with pytest.raises(
        an.InputError, match="no Dask scheduler answered at tcp://127.0.0.1:1 within 1 s"
    ):
        an.codesign(
            "llama3-8b", "h100-sxm", 64, vary={"hbm": ["80 GB"]}, scheduler="127.0.0.1:1", **KW
        )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(an.InputError, match="no Dask scheduler answered at tcp://127.0.0.1:"):
            an.codesign(
                "llama3-8b",
                "h100-sxm",
                64,
                vary={"hbm": ["80 GB"]},
                scheduler=f"tcp://127.0.0.1:{server.server_address[1]}",
                **KW,
            )
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    "out, match",
    [
        (5, "expected the path of a .parquet file"),
        ("/nonexistent-folder/x.parquet", "no folder this process can write"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_the_sweep(out, match, monkeypatch):
    monkeypatch.setattr(cd, "points", None)
    with pytest.raises(an.InputError, match=match):
        an.codesign(
            "llama3-8b", "h100-sxm", 64, vary={"hbm": ["80 GB"]}, scheduler="synchronous", out=out,
            **KW,
        )


def test_ctrl_c_on_the_command_line_is_one_line(monkeypatch, capsys):
    def interrupted(tasks, client):
        raise KeyboardInterrupt

    monkeypatch.setattr(cd, "_run", interrupted)
    code = main(
        (
            "codesign --model llama3-8b --hardware h100-sxm --gpus 64 --seq 4096 --global-batch 64"
            " --vary hbm=40GB,80GB --scheduler synchronous"
        ).split()
    )
    assert code == 130 and capsys.readouterr().err == "analytic: interrupted\n"


def test_a_grid_past_a_million_points_needs_force(monkeypatch):
    """10¹² points are refused before anything runs, unless forced (checked here with a lower
    bound)."""
    with pytest.raises(an.InputError, match="force"):
        an.codesign(
            "llama3-8b",
            "h100-sxm",
            64,
            vary={"hbm": "1:1000000:1000000 GB", "sms": "1:1000000:1000000"},
            scheduler="synchronous",
            **KW,
        )
    monkeypatch.setattr(cd, "MAX_POINTS", 1)
    with pytest.raises(an.InputError, match="force"):
        an.codesign(
            "llama3-8b", "h100-sxm", 64, vary={"hbm": ["40 GB", "80 GB"]}, scheduler="synchronous",
            **KW,
        )
    forced = an.codesign(
        "llama3-8b", "h100-sxm", 64, vary={"hbm": ["40 GB", "80 GB"]}, scheduler="synchronous",
        force=True, **KW,
    )
    assert len(forced) == 2


def test_the_default_scheduler_is_a_local_cluster_with_the_same_frame(frame):
    """Without a scheduler the sweep starts a local dask.distributed cluster sized to this
    machine, runs on it and closes it: the frame is the in-process one (two models: each model's
    first points, timed on the workers, come back in their places), and this process's environment
    is as it was."""
    import os

    saved = dict(os.environ)
    models = ["llama3-8b", "gpt-oss-20b"]
    on_cluster = an.codesign(models, "h100-sxm", 64, vary=VARY, keep=2, **KW)
    in_process = an.codesign(
        models, "h100-sxm", 64, vary=VARY, keep=2, scheduler="synchronous", **KW
    )
    pd.testing.assert_frame_equal(on_cluster, in_process)
    first = on_cluster[on_cluster["model"] == "llama3-8b"].reset_index(drop=True)
    pd.testing.assert_frame_equal(first, frame)
    assert dict(os.environ) == saved


def test_a_local_cluster_leaves_this_processs_environment_as_it_was():
    """Processes started after a sweep (a test's gloo ranks, a user's jobs) do not inherit Dask's
    worker variables (malloc's trimming, one OpenMP thread)."""
    import os

    saved = dict(os.environ)
    cd.local_cluster(1).close()
    assert dict(os.environ) == saved


def test_parquet_is_written_whole_and_an_interrupted_sweep_writes_nothing(
    tmp_path, monkeypatch, frame
):
    out = tmp_path / "sweep.parquet"
    written = an.codesign(
        ["llama3-8b"], "h100-sxm", 64, vary=VARY, keep=2, scheduler="synchronous", out=out, **KW
    )
    back = pd.read_parquet(out)
    assert back["step_time [s]"].tolist() == written["step_time [s]"].tolist() and list(
        back.columns
    ) == list(frame.columns)
    late = tmp_path / "late.parquet"

    def interrupted(tasks, scheduler):
        raise KeyboardInterrupt

    monkeypatch.setattr(cd, "_run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        an.codesign(
            ["llama3-8b"], "h100-sxm", 64, vary=VARY, scheduler="synchronous", out=late, **KW
        )
    assert not late.exists() and [p.name for p in tmp_path.iterdir()] == ["sweep.parquet"]


def test_the_sweeps_slope_is_the_symbolic_derivative():
    """For one fixed layout (every degree pinned), the step time's slope against the scale-out
    bandwidth between close points of the sweep is ∂T/∂B_out of the plan's expression at their
    middle."""
    pins = dict(
        tp=1, pp=1, cp=1, dp=64, zero=(1,), recompute=("none",), microbatch_sizes=(1,),
        schedules=("1f1b",),
    )
    bw = [2.0, 2.0002, 5.0, 5.0005]  # GB/s: DP exposed, the step falling as the bandwidth grows
    sweep = an.codesign(
        "llama3-8b",
        "h100-sxm",
        64,
        vary={"scale_out_bandwidth": [f"{b} GB/s" for b in bw]},
        scheduler="synchronous",
        **KW,
        **pins,
    )
    t = sweep["step_time [s]"].to_numpy()
    plan = an.Plan(
        "llama3-8b",
        "h100-sxm",
        an.Layout(dp=64, zero=1),
        **KW,
        scale_out_bandwidth=an.sym("scale_out_bandwidth"),
    )
    slope = plan.expr("step_time").to("s").diff("scale_out_bandwidth")
    for i in (0, 2):
        mid = an.Q_((bw[i] + bw[i + 1]) / 2, "GB/s")
        numeric = (t[i + 1] - t[i]) / ((bw[i + 1] - bw[i]) * 1e9)  # s per byte/s
        want = slope.subs(scale_out_bandwidth=mid).value().to("s / (byte/s)").magnitude
        assert numeric < 0 and numeric == pytest.approx(want, rel=1e-3)


def test_the_command_line_sweeps_and_plots(tmp_path, capsys):
    out, png = tmp_path / "s.parquet", tmp_path / "s.png"
    code = main(
        [
            "codesign",
            "--model",
            "llama3-8b",
            "--hardware",
            "h100-sxm",
            "--gpus",
            "64",
            "--seq",
            "4096",
            "--global-batch",
            "64",
            "--vary",
            "scale_out_bandwidth=25:100:2GB/s",
            "--vary",
            "hbm=40GB,80GB",
            "--scheduler",
            "synchronous",
            "--out",
            str(out),
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert (
        code == 0
        and len(data["rows"]) == 4
        and data["attrs"]["units"]["hbm"] == "GB"
        and out.is_file()
    )
    assert (
        main(["plot", "codesign", "--from", str(out), "--out", str(png)]) == 0
        and png.stat().st_size > 10_000
    )
    code = main(
        (
            "codesign --model llama3-8b --hardware h100-sxm --gpus 64 --seq 4096 --global-batch 64"
            " --vary nvlink=1,2 --scheduler synchronous"
        ).split()
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "'nvlink' is not a hardware field" in err
    assert main(["plot", "codesign", "--out", str(png)]) == 2  # no --from


def test_a_point_where_nothing_fits_keeps_a_row_without_a_layout():
    f = an.codesign(
        "llama3-70b", "h100-sxm", 8, vary={"hbm": ["10 GB", "80 GB"]}, scheduler="synchronous", **KW
    )
    assert f["rank"].isna().tolist() == [True, True] and np.isnan(f["step_time [s]"]).all()


def test_a_price_turns_gpu_hours_into_dollars():
    """USD per million tokens = GPU-hours per million tokens × USD per GPU-hour (a bare price in
    USD/hour); a price that is no rate in money is refused."""
    f = an.codesign(
        "llama3-8b", "h100-sxm", 64, vary={"price": ["2 USD/hour", 3.5]}, scheduler="synchronous",
        **KW,
    )
    assert f["usd [USD/Mtoken]"].tolist() == pytest.approx(
        (f["cost [GPU-hour/Mtoken]"] * [2.0, 3.5]).tolist()
    )
    assert f["cost [GPU-hour/Mtoken]"][0] == f["cost [GPU-hour/Mtoken]"][1]
    with pytest.raises(an.InputError, match="USD/hour"):
        an.codesign(
            "llama3-8b", "h100-sxm", 64, vary={"price": ["2 GB"]}, scheduler="synchronous", **KW
        )


def test_progress_on_a_narrow_terminal_fits_its_width():
    """Standard error a terminal of 20 columns: every progress line drawn there is at most 20
    columns (Dask's own bar is 40 columns and its text), and standard output holds the table."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 20, 0, 0))
    argv = [
        sys.executable,
        *(
            "-m analytic.cli codesign --model llama3-8b --hardware h100-sxm --gpus 64 --seq 4096"
            " --global-batch 64 --vary hbm=40GB,60GB,80GB --scheduler synchronous"
        ).split(),
    ]
    done = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=follower, env={**os.environ, "COLUMNS": "20"}
    )
    os.close(follower)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the follower closed: the command has ended
            break
        if not chunk:
            break
        drawn += chunk
    out = done.communicate()[0].decode()
    os.close(leader)
    lines = [
        line
        for part in drawn.decode().replace("\x1b[A", "").split("\n")
        for line in part.split("\r")
    ]
    assert done.returncode == 0 and "3 hardware points" in out
    assert (
        any("co-design" in line for line in lines)
        and max(len(line.strip()) for line in lines) <= 20
    ), lines


# 1.4 s of work: 3 tasks of 0.5 s, rounded up to 4 for 2 workers
@pytest.mark.parametrize(
    "points, size, workers, cost, want",
    [
        (21, None, 2, 0.065, [0, 5, 10, 15, 21]),
        (21, None, 1, 0.065, [0, 21]),  # in process: one task
        (3, None, 8, 1.0, [0, 1, 2, 3]),  # fewer points than workers: a point a task
        (200, None, 2, 0.001, [0, 100, 200]),  # cheap points: one task a worker
        (10, 3, 2, 9.9, [0, 3, 6, 9, 10]),  # a chunk given: every 3 points, unmeasured
    ],
)
def test_tasks_are_cut_by_measured_cost_into_a_multiple_of_the_workers(
    points, size, workers, cost, want
):
    assert cd._bounds(points, size, workers, cost) == want


def test_the_command_line_takes_searchs_flags_and_gives_the_apis_rows(capsys):
    """codesign reads the plan flags search reads (the stack's options, the layout choices, a
    hardware override of the base every point changes), and its rows are the API's with the same
    arguments; its first line names the stack and its fitted efficiency; a flag search does not read
    is refused."""
    flags = [
        "--model",
        "llama3-8b",
        "--hardware",
        "h100-sxm",
        "--gpus",
        "64",
        "--seq",
        "4096",
        "--global-batch",
        "64",
        "--vary",
        "hbm=40GB,80GB",
        "--scheduler",
        "synchronous",
        "--async-tp",
        "--comm-sms",
        "8",
        "--scale-out-bandwidth",
        "100 GB/s",
        "--zero",
        "3",
        "--zero3-gather",
        "per-tensor",
        "--recompute",
        "full",
    ]
    code = main(["codesign", *flags, "--json"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    hw = an.hardware("h100-sxm").replace(scale_out_bandwidth="100 GB/s")
    api = an.codesign(
        "llama3-8b", hw, 64, vary={"hbm": ["40 GB", "80 GB"]}, scheduler="synchronous",
        async_tp=True, comm_sms=8, zero=(3,), zero3_gather="per-tensor", recompute=("full",), **KW,
    )
    assert code == 0 and [r["step_time [s]"] for r in rows] == api["step_time [s]"].tolist()
    assert [r["tp"] for r in rows] == api["tp"].tolist() and set(api["zero"]) == {3}
    assert main(["codesign", *flags]) == 0
    assert capsys.readouterr().out.startswith("stack megatron-core (Megatron-Core")
    for extra, message in (
        (["--sp"], "--sp/--no-sp not read here"),
        (["--hbm", "80 GB"], "--hbm: also varied"),
    ):
        assert main(["codesign", *flags, *extra]) == 2 and message in capsys.readouterr().err
