"""What a Dask user ships: plans (numeric and symbolic), layouts, models, hardware, memory, search
results and formulas pickle, load in a new process that only imported the library, and give the same
numbers."""

import ast
import pickle
import subprocess
import sys

import sympy

import analytic as an

KW = dict(seq_len=2048, global_batch=64)


def _objects() -> dict:
    plan = an.Plan("llama3-8b", "h100-sxm", an.Layout(tp=2, dp=4), overlap=0.5, **KW)
    tp = sympy.Symbol("tp", positive=True, integer=True)
    return {
        "plan": plan,
        "symbolic plan": an.Plan("llama3-8b", "h100-sxm", an.Layout(tp=tp, dp=4), **KW),
        "layout": plan.layout,
        "model": plan.model,
        "hardware": plan.hardware,
        "memory": plan.memory(),
        "search": an.search("llama3-8b", "h100-sxm", gpus=8, progress=False, **KW),
        "formula": an.formula("memory.model_states.zero1"),
    }


def _readings(objs: dict) -> tuple[list[float], list[str]]:
    """What each object says of itself: the plans' and the search's step times in seconds (the
    symbolic plan's at tp = 4), and the others' reprs."""
    plan, sym, best = objs["plan"], objs["symbolic plan"], objs["search"].best
    times = [
        plan.step_time().to("s").magnitude,
        sym.subs(tp=4).step_time().to("s").magnitude,
        best.step_time,
    ]
    return times, [repr(best.layout)] + [
        repr(objs[k]) for k in ("layout", "model", "hardware", "memory", "formula")
    ]


_READ = """
import pickle, sys
import analytic
from tests.test_pickle import _readings
print(_readings(pickle.loads(sys.stdin.buffer.read())))
"""


def test_every_object_a_user_ships_loads_in_a_new_process_and_reads_the_same():
    """The same text, and the same step times to the last bit (every process runs a structure's
    plans from the same programs)."""
    objs = _objects()
    times, texts = _readings(objs)
    assert _readings(pickle.loads(pickle.dumps(objs))) == (times, texts)
    out = subprocess.run(
        [sys.executable, "-c", _READ], input=pickle.dumps(objs), capture_output=True, check=True,
        cwd=_root(),
    ).stdout
    their_times, their_texts = ast.literal_eval(out.decode().strip())
    assert their_texts == texts and their_times == times


def test_a_plan_rebuilt_from_its_pickle_keeps_its_overrides_and_batch():
    plan = an.Plan(
        "llama3-70b", "h200", an.Layout(tp=8, pp=4, dp=8, zero=1), seq_len=8192,
        batch_tokens="16Mi", stack="torchtitan-2025", overlap=0.25,
    )
    back = pickle.loads(pickle.dumps(plan))
    assert (back.global_batch, back.stack, back.overrides) == (
        2048,
        "torchtitan-2025",
        plan.overrides,
    )
    assert back.step_time() == plan.step_time() and back.memory().total == plan.memory().total


def _root() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parent.parent)
