"""Questions asked of symbolic plans: the smallest degree that fits, the degree that minimises step
time, the largest model that fits, limits at scale, and closed-form break-even points.

Each helper returns a dict with the answer (a number with units where it has one) and the
expression it came from, so a notebook can show both.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import sympy

from .core.choices import MEMORY_PARTS as PARTS
from .core.choices import MEMORY_VERDICTS, OBJECTIVES
from .core.counts import MAX_COUNT
from .core.errors import AnalyticError, ApproximationWarning, InputError, LayoutError
from .core.expressions import to_float
from .core.formula import Formula, magnitude
from .core.symbols import sym
from .core.units import Q, Quantity
from .core.values import as_float, choice, count, flag, fraction
from .formulas import formula
from .plan.schedules import BUBBLE_FORMULAS, bubble_time


def _one_free(f: Formula, keyword: str) -> Formula:
    extra = set(f.symbols) - {keyword}
    if keyword not in f.symbols:
        raise InputError(
            f"{keyword}: not a free input of {f.name} (free: {', '.join(f.symbols) or 'none'}); "
            f"build the plan with {keyword}=an.sym('{keyword}')"
        )
    if extra:
        raise InputError(
            f"{f.name}: other free inputs remain ({', '.join(sorted(extra))}); give them numbers"
        )
    return f


def _invalid(plan, keyword: str, value: int) -> str:
    """Why ``keyword`` = ``value`` is not a valid layout of ``plan`` ("" when it is)."""
    try:
        plan.subs(**{keyword: value})
        return ""
    except (LayoutError, InputError) as exc:
        return str(exc)


def _valid(plan, keyword: str, value: int) -> bool:
    return not _invalid(plan, keyword, value)


def _unshrinking(plan, keyword: str, limit: int) -> str:
    """The memory parts that do not fall as ``keyword`` grows to ``limit``, with their sum there:
    those of the stage that is the worst at ``limit`` (of the worst stage, whichever, where pp is
    free)."""

    def at(f, v):
        return (f.subs(**{keyword: v}) if keyword in f.symbols else f).value().to("GB").magnitude

    if plan.deg.pp.is_number:
        stages = [plan._stage(k) for k in range(int(plan.deg.pp))]
        worst = max(stages, key=lambda s: at(s["total"], limit))
        parts = {part: [at(worst[part], v) for v in (1, limit)] for part in PARTS}
    else:
        parts = {part: [at(plan.expr(f"memory.{part}"), v) for v in (1, limit)] for part in PARTS}
    stuck = {k: hi for k, (lo, hi) in parts.items() if hi > 0 and hi >= 0.999 * lo}
    if not stuck:
        return ""
    hbm = as_float(plan.inputs["hbm"]) / 1e9
    return (
        f"{' + '.join(stuck)} do not shrink with {keyword} ({sum(stuck.values()):.4g} GB at"
        f" {keyword} = {limit:,}, of {hbm:.4g} GB HBM)"
    )


#: the most values of a free input evaluated at once (a grid of float64: 32 MiB)
MAX_GRID = 1 << 22


def _grid(fn, keyword: str, limit: int) -> tuple[np.ndarray, np.ndarray]:
    xs = np.arange(1, limit + 1, dtype=float)
    with np.errstate(all="ignore"):
        ys = np.broadcast_to(np.asarray(fn(**{keyword: xs}), dtype=float), xs.shape)
    return xs, ys


def smallest_fitting(plan, keyword: str, *, limit: int = 1 << 20, at_limit: bool = False) -> int:
    """Smallest integer value of ``keyword`` (free in ``plan``) whose layout is valid and fits: at
    its predicted peak (:meth:`Plan.memory_verdict` "fits"), or with ``at_limit`` at the allocator's
    limit too."""
    return smallest_fitting_detail(plan, keyword, limit=limit, at_limit=at_limit)["value"]


def _verdicts(plan, keyword: str, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Values 1..``limit`` of ``keyword`` and each one's memory verdict, as
    :meth:`Plan.memory_verdict` decides it (indices of ``MEMORY_VERDICTS``; whether each is a valid
    layout is not asked)."""
    from .plan.verdict import verdicts

    xs, room = _grid(_one_free(plan.expr("memory.headroom"), keyword).lambdify(), keyword, limit)
    _, counted = _grid(_one_free(plan.expr("memory.total"), keyword).lambdify(), keyword, limit)
    outside = plan.overrides.get("outside_bytes")
    return xs, verdicts(
        counted,
        room >= 0,
        as_float(plan.inputs["hbm"]),
        plan._in.stack_properties["allocator"],
        None if outside is None else Q(float(outside), "byte"),
    )


def smallest_fitting_detail(
    plan, keyword: str, *, limit: int = 1 << 20, at_limit: bool = False
) -> dict:
    """:func:`smallest_fitting` with its reasons: ``value``, its ``verdict``, the ``memory`` counted
    there and its ``expression``; ``fits_from``, the smallest value that fits, and ``skipped``, why
    the values between it and ``value`` are not valid layouts (the first's reason);
    ``at_limit_from``, the smallest valid value that fits only at the allocator's limit, where one
    is smaller than ``value`` (else None). When none fits the AnalyticError says which memory parts
    do not shrink with ``keyword``."""
    limit = count("limit", limit, allow_symbol=False)
    xs, verdict = _verdicts(plan, keyword, min(limit, MAX_GRID))
    counted = [int(x) for x in xs[verdict <= 1]]
    fitting = [int(x) for x in xs[verdict <= (1 if flag("at_limit", at_limit) else 0)]]
    fits, first_reason, limited = set(fitting), "", None
    for v in counted:
        # at the limit, and a valid one of those already found
        if v not in fits and limited is not None:
            continue
        reason = _invalid(plan, keyword, v)
        if reason or v not in fits:
            first_reason = first_reason or (reason if v in fits else "")
            limited = limited or (None if reason else v)
            continue
        total = plan.expr("memory.total").subs(**{keyword: v}).value()
        return {
            "value": v,
            "verdict": MEMORY_VERDICTS[int(verdict[v - 1])],
            "memory": total.to("GB"),
            "expression": plan.expr("memory.total"),
            "fits_from": fitting[0],
            "skipped": first_reason,
            "at_limit_from": limited,
        }
    if fitting:
        raise AnalyticError(
            f"{keyword}: from {fitting[0]:,} the memory fits in HBM, but no value up to {limit:,}"
            f" is a valid layout (at {fitting[0]:,}: {first_reason or 'no valid layout'})"
        )
    if limited:
        raise AnalyticError(
            f"{keyword}: no value up to {limit:,} fits at its predicted peak; from {limited:,} it"
            " fits at the allocator's limit (at_limit=True takes it)"
        )
    stuck = _unshrinking(plan, keyword, limit)
    raise AnalyticError(
        f"{keyword}: no value up to {limit:,} fits in HBM" + (f": {stuck}" if stuck else "")
    )


def _objective(plan, objective: str) -> Formula:
    """The quantity :func:`optimise` minimises (MFU negated: maximised)."""
    choice("objective", objective, OBJECTIVES)
    if objective == "step_time":
        return plan.expr("step_time")
    if objective == "cost":
        return plan.expr("step_time") * plan.expr("gpus") / plan.expr("tokens_per_step")
    return plan.expr("mfu") * -1


def optimise(
    plan, keyword: str, objective: str = "step_time", *, fits: bool = True, limit: int = 1 << 16
) -> dict:
    """The valid integer ``keyword`` ≥ 1 that optimises ``objective`` (``choices.OBJECTIVES``):
    step time, cost in GPU-seconds per token, or MFU; with ``fits`` only among the values that fit
    at their predicted peak (:meth:`Plan.memory_verdict` "fits"). ``continuous`` is the real-valued
    optimum (memory not considered), ``value`` the objective at ``best``."""
    from scipy.optimize import minimize_scalar

    limit = count("limit", limit, allow_symbol=False)
    if limit > MAX_GRID:
        raise InputError(
            f"limit: every value up to it is evaluated, so at most {MAX_GRID:,} (2^22), got"
            f" {limit:,}"
        )
    f = _one_free(_objective(plan, objective), keyword)
    fn = f.lambdify()
    res = minimize_scalar(
        lambda lx: float(fn(**{keyword: math.exp(lx)})),
        bounds=(0.0, math.log(limit)),
        method="bounded",
    )
    xs, ys = _grid(fn, keyword, limit)
    if flag("fits", fits):  # fits at its predicted peak, as Plan.memory_verdict has it
        ys = np.where(_verdicts(plan, keyword, limit)[1] == 0, ys, np.nan)
    best = None
    for i in np.argsort(ys):
        if np.isfinite(ys[i]) and _valid(plan, keyword, int(xs[i])):
            best = int(xs[i])
            break
    if best is None:
        raise AnalyticError(
            f"{keyword}: no valid value up to {limit:,}" + (" fits in HBM" if fits else "")
        )
    sign = -1 if objective == "mfu" else 1
    return {
        "continuous": math.exp(res.x),
        "continuous_value": Q(float(res.fun) * sign, f.unit),
        "best": best,
        "value": f.subs(**{keyword: best}).value() * sign,
        "step_time": plan.expr("step_time").subs(**{keyword: best}).value(),
        "objective": objective,
        "expression": f * sign,
    }


def largest_fitting_model(plan_factory, keyword: str = "layers", *, limit: int = 1 << 12) -> dict:
    """Largest integer ``keyword`` (e.g. layers) for which ``plan_factory(value)`` fits in HBM."""
    best = None
    lo, hi = 1, count("limit", limit, allow_symbol=False)
    while lo <= hi:
        mid = (lo + hi) // 2
        try:
            fits = plan_factory(mid).memory().fits
        except (LayoutError, InputError):
            fits = False
        if fits:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    if best is None:
        raise AnalyticError(f"{keyword}: even 1 does not fit")
    return {"value": best, "params": plan_factory(best).model.total_params}


def strong_scaling(plan, keyword: str = "dp") -> dict:
    """Step time and MFU as the free degree grows at a fixed global batch: the expression and its
    limit as the degree reaches the batch (one microbatch per replica)."""
    step = _one_free(plan.expr("step_time"), keyword)
    mfu = plan.expr("mfu")
    gb = sympy.sympify(plan.global_batch) / plan.microbatch_size
    at_limit = step.subs(**{keyword: gb}).value()
    return {
        "step_time": step,
        "mfu": mfu,
        "largest": int(gb),
        "step_time_at_largest": at_limit,
        "mfu_at_largest": float(mfu.subs(**{keyword: gb}).value().magnitude),
    }


def mfu_threshold(plan, keyword: str, threshold: float, *, limit: int | None = None) -> int:
    """Smallest valid integer ``keyword`` at which the predicted MFU falls below ``threshold``."""
    threshold = float(fraction("threshold", threshold))
    f = _one_free(plan.expr("mfu"), keyword)
    limit = int(plan.global_batch) if limit is None else count("limit", limit, allow_symbol=False)
    xs, ys = _grid(f.lambdify(), keyword, limit)
    for x in xs[ys < threshold]:
        if _valid(plan, keyword, int(x)):
            return int(x)
    raise AnalyticError(f"mfu stays above {threshold} up to {keyword} = {limit}")


def failure_optimal_gpus(checkpoint_time, interruption_rate=None, restart_time=None) -> dict:
    """The accelerator count that maximises useful throughput n × goodput(n) under failures.

    ``value``: from Daly's exact goodput at his optimal interval (``reliability.daly.*``), found
    numerically (no closed form exists); ``first_order``: Young's N* = 2/(9δλ)
    (``reliability.optimal_gpus``, restarts neglected), which the exact model puts several times
    lower. The interruption rate defaults to Llama 3's, the restart time to a synchronous job's
    (presets/reliability.toml)."""
    from scipy.optimize import minimize_scalar

    from .presets import llama3_interruption_rate, synchronous_restart_time

    lam = interruption_rate if interruption_rate is not None else llama3_interruption_rate()
    first = formula("reliability.optimal_gpus")
    # its caveat (first order, outside its range) is this function's answer
    with (warnings.catch_warnings()):
        warnings.simplefilter("ignore", ApproximationWarning)
        n_first = float(
            first.evaluate(checkpoint_time=checkpoint_time, interruption_rate=lam).magnitude
        )
    delta, rate, restart = (
        float(magnitude(k, v))
        for k, v in (
            ("checkpoint_time", checkpoint_time),
            ("interruption_rate", lam),
            ("restart_time", synchronous_restart_time() if restart_time is None else restart_time),
        )
    )
    mtbf, interval, goodput = (
        formula(f"reliability.{k}").lambdify()
        for k in ("mtbf", "daly.optimal_interval", "daly.goodput")
    )

    def throughput(
        n: float,
    ) -> float:  # useful accelerator-seconds per second (magnitudes in the symbols' units)
        m = float(mtbf(interruption_rate=rate, gpus=n))
        tau = float(interval(checkpoint_time=delta, mtbf=m))
        return n * float(
            goodput(checkpoint_time=delta, mtbf=m, checkpoint_interval=tau, restart_time=restart)
        )

    res = minimize_scalar(lambda x: -throughput(math.exp(x)), bounds=(0.0, math.log(100 * n_first)),
                          method="bounded", options={"xatol": 1e-6})
    n = math.exp(res.x)
    return {
        "value": n,
        "goodput": throughput(n) / n,
        "first_order": n_first,
        "expression": first,
        "method": (
            "numerical maximum of n × reliability.daly.goodput at"
            " reliability.daly.optimal_interval"
        ),
    }


def tp_break_even(model, hardware, *, seq_len, bandwidth, microbatch_size: int = 1,
                  efficiency: float = 1.0, dtype: str = "bf16", threshold: float = 1.0) -> dict:
    """The TP degree at which one layer's TP all-reduce time reaches ``threshold`` times its compute
    time (1: equals it; 0.1: a tenth of it), in closed form in t: 4 all-reduces of s·b·h·e bytes
    each, 2(t−1)/t of them sent, against the layer's training FLOPs split t ways. Latency
    neglected."""
    t = sym("tp")
    s_ = count("seq_len", seq_len, allow_symbol=False)
    b_ = count("microbatch_size", microbatch_size, allow_symbol=False)
    efficiency = fraction("efficiency", efficiency)
    threshold = fraction("threshold", threshold, upper=None)
    inputs = {
        **model.inputs(),
        "seq_len": s_,
        "microbatch_size": b_,
        "element_bytes": Quantity(2, "byte"),
    }
    msg = formula("parallelism.tp.allreduce_bytes").bind(inputs)
    comm = (
        formula("collectives.all_reduce.time").bind(
            {"message": msg, "ranks": t, "bandwidth": bandwidth, "latency": Quantity(0, "s")}
        )
        * 4
    )
    per_token = formula(f"compute.attention_forward_flops_per_token{model.attention_suffix}").bind(
        inputs
    ) + formula(f"compute.mlp_forward_flops_per_token.{model.mlp_formulas}").bind(inputs)
    flops = per_token * 3 * Formula("tokens", s_ * b_, "token", "")
    peak = magnitude("peak_flops", hardware.peak_flops(dtype)) * sympy.nsimplify(efficiency)
    compute = flops / Formula("tF", t * peak, "FLOP/s", "")
    ratio = comm / compute
    sol = [
        r
        for r in sympy.solve(sympy.Eq(ratio.expr, sympy.nsimplify(threshold)), t)
        if r.is_real and r > 0
    ]
    return {"ratio": ratio.to(""), "break_even": float(sol[0]) if sol else math.inf}


def microbatches_for_bubble(
    schedule: str, pp: int, target: float, *, vpp: int | None = None
) -> dict:
    """Fewest microbatches m for which the bubble is at most ``target`` of the ideal time
    (T_F = T_B = T_W, the overlapped F&B pair = T_F + T_B + T_W). The interleaved schedule needs
    ``vpp`` (model chunks per rank) and, as Plan does, a multiple of pp microbatches; DualPipe an
    even number."""
    schedule = choice("schedule", schedule, tuple(BUBBLE_FORMULAS))
    pp = count("pp", pp, allow_symbol=False)
    target = fraction("target", target, upper=None)
    if schedule == "interleaved":
        if vpp is None:
            raise InputError(
                "vpp: the interleaved schedule's bubble depends on the model chunks per rank;"
                " give vpp"
            )
        vpp = count("vpp", vpp, minimum=2, allow_symbol=False)
    elif vpp not in (None, 1):
        raise InputError(
            f"vpp: only the interleaved schedule has model chunks, got vpp={vpp!r} for {schedule}"
        )
    m = sym("microbatches")
    # a chunk's forward, input-gradient and weight-gradient times, as Plan's
    unit = Fraction(
        1, 3 * (vpp or 1)
    )
    bubble = bubble_time(
        schedule,
        {
            "pp": pp,
            "vpp": vpp or 1,
            "microbatches": m,
            "t_f": Quantity(unit, "s"),
            "t_b": Quantity(unit, "s"),
            "t_w": Quantity(unit, "s"),
            "t_fb": Quantity(3 * unit, "s"),
        },
    ).expr

    # the schedule's own bubble and the critical path no schedule beats; both fall with m
    # the arguments of nested Max, the floor at zero left out (it never binds a share)
    def parts(e):
        return (
            [q for a in e.args for q in parts(a)]
            if isinstance(e, sympy.Max)
            else ([] if e == 0 else [e])
        )

    value = 1
    for part in parts(bubble):
        share = part / m  # ideal time: m × (T_F + T_B + T_W) = m seconds
        if share.free_symbols:
            exact = sympy.Rational(Fraction(target).numerator, Fraction(target).denominator)
            solved = sympy.solve(sympy.Eq(share, exact), m)
            if not solved:
                raise InputError(
                    f"target: no count of microbatches brings a {schedule} bubble to {target}"
                )
            value = max(value, math.ceil(to_float(solved[0]) - 1e-12))
        elif share > target:
            raise InputError(f"target: a {schedule} bubble of at most {target} is out of reach")
    if schedule == "dualpipe" and value % 2:
        value += 1
    if schedule == "interleaved":
        value = -(-value // pp) * pp  # Plan's rule: a multiple of pp (check_layout)
    if value > MAX_COUNT:
        raise InputError(
            f"target: a {schedule} bubble of at most {float(target):g} needs {value:.3g}"
            " microbatches, more than a count can hold (2^53)"
        )
    return {"value": value, "fraction": bubble / m}
