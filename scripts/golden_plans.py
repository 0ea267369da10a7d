"""Write tests/golden/plans.json: the value, unit and sources of every quantity of six varied plans.

tests/test_golden_plans.py holds the library to it (values to 1e-12), so a restructuring of Plan
that changes any number, unit or provenance is caught. Rerun this script only for a change of the
model that is meant, and say so in the commit.

Usage: python scripts/golden_plans.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import analytic as an

OUT = Path(__file__).resolve().parent.parent / "tests" / "golden" / "plans.json"
#: the point at which the symbolic plan's quantities are evaluated (its free inputs)
POINT = {
    "tp": 2,
    "pp": 4,
    "dp": 16,
    "cp": 1,
    "vpp": 1,
    "zero": 1,
    "recompute": 0,
    "schedule": 0,
    "microbatch_size": 1,
}


#: what the symbolic plan leaves free
FREE = ("tp", "pp", "dp", "cp", "vpp", "zero", "recompute", "schedule")


def plans() -> dict:
    h100 = an.hardware("h100-sxm")
    return {
        "essay": an.Plan(
            an.model("llama3-405b"),
            h100,
            an.Layout(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True),
            seq_len=8192,
            global_batch=2048,
            training_tokens="15.6e12 token",
        ),
        "deepseek-v3": an.Plan(
            an.model("deepseek-v3"),
            an.hardware("h800"),
            an.Layout(pp=16, dp=128, ep=64, zero=1, schedule="dualpipe", comm_sms=20),
            seq_len=4096,
            global_batch=15360,
            dtype="fp8",
            training_tokens="14.8e12 token",
            stack="hai-llm",  # the stack that runs DualPipe
        ),
        "zero3-per-tensor": an.Plan(
            an.model("llama3-70b"),
            h100,
            an.Layout(
                tp=8, cp=2, dp=32, zero=3, sequence_parallel=True, async_tp=True, recompute="full",
                zero3_gather="per-tensor",
            ),
            seq_len=8192,
            global_batch=256,
            training_tokens="1e12 token",
        ),
        "interleaved": an.Plan(
            an.model("llama3-405b"),
            h100,
            an.Layout(
                tp=8, pp=16, dp=128, vpp=4, schedule="interleaved", zero=1, sequence_parallel=True,
                ends_as_layers=True,
            ),
            seq_len=8192,
            global_batch=2048,
            training_tokens="1e12 token",
        ),
        "gpt3-no-flash": an.Plan(
            an.model("gpt3-175b"),
            an.hardware("a100-80g"),
            an.Layout(tp=8, pp=8, dp=16, zero=1, recompute="selective"),
            seq_len=2048,
            global_batch=1536,
            flash_attention=False,
            training_tokens="3e11 token",
        ),
        "symbolic": an.Plan(
            an.model("llama3-8b"),
            h100,
            an.Layout(**{k: an.sym(k) for k in FREE}, sequence_parallel=True),
            seq_len=8192,
            global_batch=1024,
            microbatch_size=an.sym("microbatch_size"),
        ),
    }


def record(plan, quantity: str) -> dict:
    """{"value", "unit", "sources"} of one quantity, or {"error": message}."""
    try:
        f = plan.expr(quantity)
        values = {k: v for k, v in POINT.items() if k in f.symbols}
        q = f.evaluate(**values) if values else f.value()
    except an.AnalyticError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    value = float(q.magnitude)
    return {
        "value": value if math.isfinite(value) else repr(value),
        "unit": f"{q.units:~P}",
        "sources": sorted(f.sources),
    }


def golden() -> dict:
    return {name: {q: record(p, q) for q in p.quantities()} for name, p in plans().items()}


if __name__ == "__main__":
    OUT.write_text(json.dumps(golden(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")
