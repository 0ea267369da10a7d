"""Sweeps: the questions users ask of one plan, answered over a range of one input.

Each sweep leaves that input free in the plan's expressions and evaluates the compiled expression
over all the values at once (one code path with Plan and search). :func:`sweep` answers as a pandas
DataFrame, one row a value, each column's unit in its name (``step_time [s]``) and in
``attrs["units"]``."""

from __future__ import annotations

import numpy as np

from ..core.errors import InputError, LayoutError
from ..core.symbols import sym
from ..core.values import count, exact
from ..plan import Plan
from ..plan.schedules import BUBBLE_FORMULAS, bubble_time


def _counts(name: str, values) -> list[int]:
    """A list of integers ≥ 1 (a string is not a list of them)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise InputError(f"{name}: expected a list of integers, got {values!r}")
    return [count(name, v, allow_symbol=False) for v in values]


def frame_with_units(columns: dict, units: dict, **attrs):
    """A DataFrame of ``columns`` (name → values), each with a unit named (``name [unit]``; "" for
    a number without one), the units also in ``attrs["units"]``."""
    import pandas as pd

    frame = pd.DataFrame(
        {f"{k} [{units[k]}]" if units.get(k) else k: v for k, v in columns.items()}
    )
    frame.attrs.update(units={k: units.get(k, "") for k in columns}, **attrs)
    return frame


def scaling(plan: Plan, gpus, *, mode: str = "strong"):
    """Step time and MFU against the GPU count, scaling dp (tp, cp, pp fixed). ``strong``: the
    global batch stays; ``weak``: it grows with dp (the batch per replica stays). A count at which
    the plan cannot exist (its batch does not split over the replicas, ep does not divide dp) is a
    row with no step time and the reason in ``note``; ``attrs["expression"]`` is the step time in
    N_d."""
    if mode not in ("strong", "weak"):
        raise InputError(f"mode: expected 'strong' or 'weak', got {mode!r}")
    lay = plan.layout
    per = lay.tp * lay.cp * lay.pp
    gpus = np.asarray(_counts("gpus", gpus), dtype=float)
    if np.any(gpus % per) or np.any(gpus < per):
        raise InputError(f"gpus: every value must be a multiple of tp·cp·pp = {per}")
    d = gpus / per

    def at(dp):  # the plan at dp replicas (a number, or the symbol)
        return plan.replace(
            layout=lay.replace(dp=dp),
            global_batch=(
                plan.global_batch if mode == "strong" else exact(plan.global_batch) / lay.dp * dp
            ),
        )

    notes = []
    for n in d:  # each point must be a plan Plan accepts (batch split, ep dividing dp, ...)
        try:
            at(int(n))
            notes.append("")
        except (InputError, LayoutError) as exc:
            notes.append(str(exc))
    ok = np.array([not n for n in notes])
    if not ok.any():
        raise InputError(f"gpus: no count gives a plan: {notes[0]}")
    free = at(sym("dp"))
    step, mfu = np.full(d.shape, np.nan), np.full(d.shape, np.nan)
    step[ok] = free.expr("step_time").lambdify()(dp=d[ok])
    mfu[ok] = free.expr("mfu").lambdify()(dp=d[ok])
    return frame_with_units(
        {
            "gpus": gpus.astype(int),
            "dp": d.astype(int),
            "step_time": step,
            "mfu": mfu,
            "note": notes,
        },
        {"step_time": "s"},
        expression=free.expr("step_time"),
        mode=mode,
    )


def memory(plan: Plan, *, zero=None, recompute=None, seq_len=None):
    """The memory breakdown (GB per GPU, of the fullest stage) for each value of one discrete or
    numeric input."""
    given = [
        (k, v)
        for k, v in (("zero", zero), ("recompute", recompute), ("seq_len", seq_len))
        if v is not None
    ]
    if len(given) != 1:
        raise InputError("memory sweep: give exactly one of zero=, recompute=, seq_len=")
    key, values = given[0]
    rows = []
    for v in values:
        p = (
            plan.replace(seq_len=v)
            if key == "seq_len"
            else plan.replace(layout=plan.layout.replace(**{key: v}))
        )
        m = p.memory()
        rows.append(
            {
                key: v,
                **{k: float(q.to("GB").magnitude) for k, q in m.as_dict().items() if k != "stage"},
                "stage": m.stage,
                "fits": m.fits,
                "verdict": p.memory_verdict(),
            }
        )
    parts = [k for k in rows[0] if k not in (key, "stage", "fits", "verdict")] if rows else []
    return frame_with_units(
        {k: [r[k] for r in rows] for k in (key, *parts, "stage", "fits", "verdict")},
        {k: "GB" for k in parts} | ({"seq_len": "token"} if key == "seq_len" else {}),
    )


def bubble(
    pp: int, microbatches, schedules=("gpipe", "1f1b", "zb-h1", "zb-h2", "dualpipe")
) -> dict:
    """Bubble over ideal time against the microbatch count (T_F = T_B = T_W; DualPipe's F&B pair
    = T_F + T_B + T_W), as Plan counts it (never below the critical path)."""
    pp = count("pp", pp, allow_symbol=False)
    m = np.asarray(_counts("microbatches", microbatches), dtype=float)
    out = {"microbatches": m}
    third = exact(1) / 3
    for s in schedules:
        if s not in BUBBLE_FORMULAS or s == "interleaved":
            raise InputError(
                "schedule: expected one of"
                f" {', '.join(k for k in BUBBLE_FORMULAS if k != 'interleaved')}, got {s!r}"
            )
        t = bubble_time(
            s,
            {
                "pp": pp,
                "vpp": 1,
                "microbatches": sym("microbatches"),
                "t_f": f"{float(third)} s",
                "t_b": f"{float(third)} s",
                "t_w": f"{float(third)} s",
                "t_fb": "1 s",
            },
        )
        out[s] = np.broadcast_to(t.to("s").lambdify()(microbatches=m), m.shape) / m
    return out


def sweep(plan: Plan, *, gpus=None, mode: str = "strong", zero=None, recompute=None, seq_len=None):
    """``sweep(plan, gpus=[...])`` (scaling), or ``zero=``, ``recompute=``, ``seq_len=`` (memory): a
    pandas DataFrame, a row a value, each column's unit in its name and in ``attrs["units"]``."""
    if gpus is not None:
        if any(v is not None for v in (zero, recompute, seq_len)):
            raise InputError(
                "sweep: give one of gpus=, zero=, recompute=, seq_len= (one input at a time)"
            )
        return scaling(plan, gpus, mode=mode)
    return memory(plan, zero=zero, recompute=recompute, seq_len=seq_len)
