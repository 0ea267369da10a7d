"""Speed of layout search, as ratios against baselines measured in the same run.

Prints, each against its target: layouts evaluated per second by the search program; the complete
search for Llama 3 405B on 16,384 H100s, cold (its structures' programs built from terms: the first
search of a new model) and warm (the program from the cache); and the speed-up over evaluating the
same layouts one by one through Plan.

Run: python benchmarks/bench_search.py
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

import analytic as an
from analytic.search.layouts import enumerate_layouts, search
from analytic.search.programs import INPUTS, _compiled

MODEL, HW = an.model("llama3-405b"), an.hardware("h100-sxm")
KW = dict(gpus=16384, seq_len=8192, global_batch=2048)


def main():
    os.environ["ANALYTIC_CACHE"] = tempfile.mkdtemp()
    t0 = time.perf_counter()
    cold = search(MODEL, HW, **KW, progress=False)
    t_cold = time.perf_counter() - t0
    warm_times = []
    for _ in range(3):
        t0 = time.perf_counter()
        warm = search(MODEL, HW, **KW, progress=False)
        warm_times.append(time.perf_counter() - t0)
    t_warm = min(warm_times)
    print(
        f"full search, {cold.evaluated:,} layouts ({cold.fitting:,} fit): cold {t_cold:.2f} s (the"
        f" first search of a new model; target < 1 s), warm {t_warm:.3f} s"
    )
    assert warm.best.step_time == cold.best.step_time

    # throughput of the search program on a million layouts (the search's own, tiled)
    base = enumerate_layouts(MODEL, HW, **KW)
    fn, _ = _compiled(MODEL, HW, KW["seq_len"], KW["global_batch"], "bf16", True)
    n = len(base["tp"])
    reps = int(np.ceil(1_000_000 / n))
    args = [np.tile(base[k], reps)[:1_000_000] for k in INPUTS]
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        with np.errstate(all="ignore"):  # as search runs it: a layout without a case is NaN
            fn(*args)
        best = min(best, time.perf_counter() - t0)
    rate = 1_000_000 / best
    print(
        f"search program: {rate:,.0f} layouts/s (memory, step time and FLOPs of 1,000,000 layouts"
        f" in {best:.3f} s; target >= 1,000,000)"
    )

    # the same layouts one by one through Plan
    sample = 100
    # the layouts search kept
    rows = np.random.default_rng(0).choice(cold.evaluated, size=sample, replace=False)
    t0 = time.perf_counter()
    for j in rows:
        p = cold.row(j).plan(MODEL, HW, seq_len=KW["seq_len"], global_batch=KW["global_batch"])
        p.memory()
        p.step_time()
    per_plan = (time.perf_counter() - t0) / sample
    print(
        f"one by one through Plan: {1 / per_plan:,.0f} layouts/s; the program is"
        f" {rate * per_plan:,.0f}x faster"
    )


if __name__ == "__main__":
    main()
