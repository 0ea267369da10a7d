"""Speed of a co-design sweep on Dask against the same sweep in-process, as layouts evaluated per second
per core, in one run.

The sweep: 200 hardware points (10 scale-out bandwidths × 20 HBM sizes of an H100) × 3 models (Llama 3 8B,
70B and 405B) over the full layout space of 1,024 GPUs. In-process: Dask's synchronous scheduler, one core.
On Dask: a local cluster of two worker processes, one thread each (``codesign.local_cluster``, as a
sweep without a scheduler starts), started before the clock (its start is printed apart). The structures' programs are built before either is timed (a sweep builds them once).
Target: Dask's layouts/s per core ≥ 80 % of in-process.

Run: python benchmarks/bench_codesign.py
"""

from __future__ import annotations

import os
import tempfile
import time

import analytic as an

MODELS = ["llama3-8b", "llama3-70b", "llama3-405b"]
VARY = {"scale_out_bandwidth": "10:100:10 GB/s", "hbm": "60:160:20 GB"}
KW = dict(seq_len=8192, global_batch=512)


def main():
    os.environ.setdefault("ANALYTIC_CACHE", tempfile.mkdtemp(prefix="analytic-bench-"))  # workers inherit it
    from analytic.search.codesign import local_cluster
    an.codesign(MODELS, "h100-sxm", 1024, vary={"hbm": ["80 GB"]}, scheduler="synchronous", **KW)  # programs built
    t0 = time.perf_counter()
    local = an.codesign(MODELS, "h100-sxm", 1024, vary=VARY, scheduler="synchronous", **KW)
    t_local = time.perf_counter() - t0
    t0 = time.perf_counter()
    with local_cluster(2) as cluster:
        started = time.perf_counter() - t0
        t0 = time.perf_counter()
        on_dask = an.codesign(MODELS, "h100-sxm", 1024, vary=VARY, scheduler=cluster.scheduler_address, **KW)
        t_dask = time.perf_counter() - t0
    assert local.equals(on_dask)
    n = local.attrs["layouts_evaluated"]
    per_core_local, per_core_dask = n / t_local, n / t_dask / 2
    print(f"{local['point'].nunique()} hardware points × {len(MODELS)} models, {n:,} layouts")
    print(f"in-process: {t_local:.1f} s, {per_core_local:,.0f} layouts/s on one core")
    print(f"2-worker local cluster (started in {started:.1f} s): {t_dask:.1f} s, {per_core_dask:,.0f} layouts/s per core "
          f"= {per_core_dask / per_core_local:.0%} of in-process (target >= 80%)")


if __name__ == "__main__":
    main()
