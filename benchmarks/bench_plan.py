"""Speed of one numeric plan at a time, and of the commands that print one, as ratios against
baselines measured in the same run.

Prints: numeric plans per second, each built (the presets loaded once) and asked its memory and step time, through the
module compiled for its structure (analytic.compiled) and through its expressions (as a plan of a
structure the library does not ship compiled); and `analytic step` / `analytic memory` /
`analytic --help` wall time against `python -c "import numpy"`.

Run: python benchmarks/bench_plan.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import analytic as an
from analytic import compiled

LLAMA, H100, DEEPSEEK, H800 = an.model("llama3-405b"), an.hardware("h100-sxm"), an.model("deepseek-v3"), an.hardware("h800")
PLANS = {  # the presets loaded once, as a loop over layouts would
    "llama3-405b TP8 PP16": lambda: an.Plan(LLAMA, H100, an.Layout(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True),
                                            seq_len=8192, global_batch=2048),
    "deepseek-v3 fp8 DualPipe": lambda: an.Plan(DEEPSEEK, H800, an.Layout(pp=16, dp=128, ep=64, zero=1,
                                                                         schedule="dualpipe", comm_sms=20),
                                                seq_len=4096, global_batch=15360, dtype="fp8"),
}


def rate(build, seconds: float = 2.0) -> float:
    """Plans per second: built, then asked memory() and step_time(), one at a time."""
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        p = build()
        p.memory()
        p.step_time()
        n += 1
    return n / (time.perf_counter() - t0)


def wall(cmd) -> float:
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    for name, build in PLANS.items():
        fast = rate(build)
        shipped = compiled.module
        compiled.module = lambda structure: None  # as a structure not shipped compiled
        try:
            slow = rate(build, seconds=4.0)
        finally:
            compiled.module = shipped
        print(f"{name}: {fast:,.0f} plans/s compiled, {slow:,.1f} plans/s through expressions ({fast / slow:,.0f}x)")
    numpy = wall([sys.executable, "-c", "import numpy"])
    for command in ("step", "memory", "--help"):
        t = wall([sys.executable, "-m", "analytic.cli", command])
        print(f"`analytic {command}`: {t:.2f} s wall, {t / numpy:.1f}x `python -c \"import numpy\"` ({numpy:.3f} s)")


if __name__ == "__main__":
    main()
