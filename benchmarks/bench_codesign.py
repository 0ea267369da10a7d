"""Speed of co-design sweeps on Dask against the same sweeps in-process, as layouts evaluated per
second per core, in one run.

Two sweeps: the README's (Llama 3 70B on 16,384 H100s at 21 scale-out bandwidths) and a large one
(200 hardware points, 10 scale-out bandwidths × 20 HBM sizes of an H100, × 3 models, Llama 3 8B, 70B
and 405B, over the full layout space of 1,024 GPUs). In-process: Dask's synchronous scheduler, one
core. On Dask: a local cluster of two worker processes, one thread each (``codesign.local_cluster``,
as a sweep without a scheduler starts), and a Client on it held across the sweeps, as a Dask user
holds one, both started before the clock (their start is printed apart). Before either is timed,
each runs the sweep's first point once (a sweep's structures are built once, and a long-lived
cluster's workers have read them). Each sweep is timed REPEATS times each way, in turn (in-process,
then on Dask, and again), so that a drift of the machine's speed reaches both alike, and the medians
compared (a sweep of a second varies by a third from run to run on a shared machine). Target: Dask's
layouts/s per core ≥ 80 % of in-process for both.

Run: python benchmarks/bench_codesign.py
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import analytic as an

SWEEPS = {
    "README's": (
        ["llama3-70b"],
        16384,
        dict(seq_len=8192, global_batch=2048),
        {"scale_out_bandwidth": [f"{b} GB/s" for b in (*range(5, 105, 5), 1000)]},
    ),
    "large": (
        ["llama3-8b", "llama3-70b", "llama3-405b"],
        1024,
        dict(seq_len=8192, global_batch=512),
        {"scale_out_bandwidth": "10:100:10 GB/s", "hbm": "60:160:20 GB"},
    ),
}


#: timings of each sweep each way, of which the median is reported
REPEATS = 3


def _timed(models, gpus, kw, vary, scheduler):
    """The sweep's frame and the seconds it took."""
    t0 = time.perf_counter()
    frame = an.codesign(models, "h100-sxm", gpus, vary=vary, scheduler=scheduler, **kw)
    return frame, time.perf_counter() - t0


def main():
    # workers inherit it
    os.environ.setdefault("ANALYTIC_CACHE", tempfile.mkdtemp(prefix="analytic-bench-"))
    from distributed import Client

    from analytic.search.codesign import grid, local_cluster

    for name, (models, gpus, kw, vary) in SWEEPS.items():
        first = {k: grid(k, v)[:1] for k, v in vary.items()}
        # programs built
        an.codesign(models, "h100-sxm", gpus, vary=first, scheduler="synchronous", **kw)
        t0 = time.perf_counter()
        with local_cluster(2) as cluster, Client(cluster) as client:
            started = time.perf_counter() - t0
            _timed(models, gpus, kw, first, client)  # the workers warmed as this process was
            local_times, dask_times = [], []
            for _ in range(REPEATS):
                local, seconds = _timed(models, gpus, kw, vary, "synchronous")
                local_times.append(seconds)
                on_dask, seconds = _timed(models, gpus, kw, vary, client)
                dask_times.append(seconds)
        assert local.equals(on_dask)
        t_local, t_dask = statistics.median(local_times), statistics.median(dask_times)
        n = local.attrs["layouts_evaluated"]
        per_core_local, per_core_dask = n / t_local, n / t_dask / 2
        print(
            f"{name} sweep: {local['point'].nunique()} hardware points × {len(models)} models, "
            f"{n:,} layouts"
        )
        print(
            f"  in-process: {t_local:.2f} s (median of {REPEATS}), "
            f"{per_core_local:,.0f} layouts/s on one core"
        )
        print(
            f"  2-worker local cluster (started in {started:.1f} s): {t_dask:.2f} s (median of "
            f"{REPEATS}, each after an in-process run), "
            f"{per_core_dask:,.0f} layouts/s per core = {per_core_dask / per_core_local:.0%} of "
            "in-process (target >= 80%)"
        )


if __name__ == "__main__":
    main()
