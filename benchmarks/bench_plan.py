"""Speed of one numeric plan at a time, and of the commands that print one, as ratios against
baselines measured in the same run.

Prints, each against its target:
- numeric plans per second, each built and asked its memory and step time, one at a time: for a
  structure never seen before (GPT-OSS 120B and Qwen3-30B-A3B from their config.json, the latter on
  TorchTitan), the first plan (which builds the structure's programs) apart from the later ones,
  each also as a ratio to ``python -c "import numpy"`` in the same run; and for a loop that calls
  ``an.model()`` and ``an.hardware()`` each time;
- ``analytic step`` wall time against ``python -c "import numpy"``, from a wheel install: this tree
  built as a wheel and installed with its dependencies into a fresh virtual environment (no system
  site-packages; pip byte-compiles it, as it does any wheel), both commands run there: the first run
  on an empty cache and later ones (the first builds its plans' programs, the others read them from
  the cache), and which of pint, numpy and sympy a run imports (none: it holds its quantities as
  data). Where no environment can be built (no package index), the same in this environment, said
  so;
- the wheel's size and the installed package's (targets: 2 MB and 10 MB).

Run: python benchmarks/bench_plan.py
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import analytic as an
from analytic.plan import programs

ROOT = Path(__file__).resolve().parent.parent
H100 = an.hardware("h100-sxm")
LAYOUTS = [an.Layout(tp=tp, dp=64 // tp, zero=1) for tp in (1, 2, 4, 8)]


def gpt_oss(i: int):
    return an.Plan(GPT_OSS, H100, LAYOUTS[i % 4], seq_len=4096, global_batch=256)


def qwen3_torchtitan(i: int):
    return an.Plan(
        QWEN3, H100, LAYOUTS[i % 4], seq_len=4096, global_batch=256, stack="torchtitan-2025"
    )


def presets_each_time(i: int):
    return an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), LAYOUTS[i % 4], seq_len=4096,
        global_batch=256,
    )


def rate(build, seconds: float = 2.0) -> tuple[float, float]:
    """(seconds of the first plan, plans per second after it): each built, then asked memory() and
    step_time(). The first plan of a structure builds its programs, which every plan then runs."""
    t0 = time.perf_counter()
    p = build(0)
    p.memory(), p.step_time()
    first = time.perf_counter() - t0
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        p = build(n + 1)
        p.memory(), p.step_time()
        n += 1
    return first, n / (time.perf_counter() - t0)


def wall(cmd, env=None, runs: int = 5) -> float:
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    global GPT_OSS, QWEN3
    # every structure unseen
    os.environ["ANALYTIC_CACHE"] = tempfile.mkdtemp(prefix="analytic-bench-")
    GPT_OSS = an.Model.from_hf(ROOT / "tests" / "data" / "hf" / "gpt-oss-120b.json")
    QWEN3 = an.Model.from_hf(ROOT / "tests" / "data" / "hf" / "qwen3-30b-a3b.json")
    numpy = wall([sys.executable, "-c", "import numpy"], dict(os.environ))
    print(f'`python -c "import numpy"`: {numpy * 1e3:.0f} ms')
    for name, build in (
        ("GPT-OSS 120B from config.json", gpt_oss),
        ("Qwen3-30B-A3B from config.json on torchtitan-2025", qwen3_torchtitan),
        ("an.model()/an.hardware() each time", presets_each_time),
    ):
        first, per_s = rate(build)
        print(
            f"{name}: the first plan {first * 1e3:.1f} ms ({first / numpy:.2f}x import numpy; its"
            f" structure's programs built), then {per_s:,.0f} plans/s, {1e3 / per_s:.3f} ms each"
            f" ({1 / per_s / numpy:.4f}x) (targets: 20 ms and 0.4 ms)"
        )
    programs._BUNDLES.clear()
    python, analytic, where, sizes = _wheel_install()
    if sizes:
        print(
            f"wheel {sizes[0] / 2**20:.2f} MB (target <= 2 MB), installed package"
            f" {sizes[1] / 2**20:.2f} MB (target <= 10 MB, its bytecode included)"
        )
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")
    }
    # as from a wheel: the modules byte-compiled (into a folder of this run) by a first run
    if analytic is None:
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="analytic-bench-pyc-")
        analytic = [python, "-m", "analytic.cli"]
        wall(
            [*analytic, "step"],
            {**env, "ANALYTIC_CACHE": tempfile.mkdtemp(prefix="analytic-bench-")},
            runs=1,
        )
    step = [*analytic, "step"]
    numpy = wall([python, "-c", "import numpy"], env)
    env["ANALYTIC_CACHE"] = tempfile.mkdtemp(prefix="analytic-bench-")
    first = wall(step, env, runs=1)
    warm = wall(step, env)
    print(
        f'`analytic step` against `python -c "import numpy"` {where} ({numpy:.3f} s; target <= 2x):'
        " first "
        f"run {first:.2f} s ({first / numpy:.1f}x; it builds its plans' programs), later runs"
        f" {warm:.2f} s "
        f"({warm / numpy:.1f}x; they read them from the cache)"
    )
    code = (
        "import sys, io, contextlib\nfrom analytic.cli.main import main\nwith"
        " contextlib.redirect_stdout(io.StringIO()): main(['step'])\nprint(',"
        " '.join(sorted({m.split('.')[0] for m in sys.modules} & {'pint', 'numpy', 'sympy'})) or"
        " 'none')"
    )
    heavy = subprocess.run(
        [python, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    print(f"of pint, numpy and sympy, a run of `analytic step` imports: {heavy}")


def _wheel_install() -> tuple[str, list | None, str, tuple | None]:
    """(python, the ``analytic`` command, where, (the wheel's bytes, the installed package's)): a
    fresh virtual environment with this tree's wheel and its dependencies installed, or this
    interpreter, None, where and None where one cannot be built."""
    tmp = Path(tempfile.mkdtemp(prefix="analytic-bench-wheel-"))
    shutil.copytree(
        ROOT,
        tmp / "src",
        ignore=shutil.ignore_patterns(
            ".git", "build", "dist", "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache",
            ".ruff_cache",
        ),
    )
    bin_ = tmp / "venv" / ("Scripts" if sys.platform == "win32" else "bin")
    for what, argv in (
        (
            "building the wheel",
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                str(tmp / "src"),
                "--no-deps",
                "--no-build-isolation",
                "-q",
                "-w",
                str(tmp / "dist"),
            ],
        ),
        ("making the environment", [sys.executable, "-m", "venv", str(tmp / "venv")]),
    ):
        if subprocess.run(argv, capture_output=True).returncode:
            return sys.executable, None, f"in this environment ({what} failed)", None
    wheel = next((tmp / "dist").glob("analytic-*.whl"))
    if subprocess.run(
        [
            str(bin_ / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            str(wheel),
        ],
        capture_output=True,
    ).returncode:
        return (
            sys.executable,
            None,
            "in this environment (installing the wheel's dependencies failed)",
            None,
        )
    package = next((tmp / "venv").glob("[Ll]ib*/**/site-packages/analytic"), None)
    installed = package and sum(f.stat().st_size for f in package.rglob("*") if f.is_file())
    return (
        str(bin_ / "python"),
        [str(bin_ / "analytic")],
        "from a wheel install in a fresh virtual environment",
        (wheel.stat().st_size, installed) if installed else None,
    )


if __name__ == "__main__":
    main()
