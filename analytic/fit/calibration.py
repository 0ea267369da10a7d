"""Fit the predictive model's constants once, on published measurements.

The constants are each stack family's efficiency (the share of the op-level ideal step, its kernels
at the devices' measured ceilings, that the framework realises) and one attention factor. The
collectives' per-step latencies and the overlap are not fitted (the step times cannot pin them):
they are fixed from their sources (presets/collectives.toml). Each measured case is a Plan whose
constants are left as symbols; its metric is compiled once with ``lambdify`` and
``scipy.optimize.least_squares`` fits log(predicted / published) over all cases, each source
weighted equally. Leave-one-out refits without each case and predicts it; leave-one-source-out
refits without every case of the case's source (its ``group``), so that rows of one table cannot
predict each other. A family whose every source is left out takes the efficiency pooled over the
others. The compute-only baseline (``Case(..., time="time.compute")``) predicts the step as its
compute alone, one efficiency per stack family: what the bubble and communication terms add is
measured against it.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import InputError, ValidationError
from ..core.files import read_text
from ..core.formula import Formula
from ..core.progress import steps
from ..core.symbols import sym
from ..core.units import Quantity
from ..core.values import as_quantity, choice
from ..formulas import formula
from ..plan import CONVENTIONS, Plan
from ..presets import stack
from .cases import plan_of

SHARED = ("attention_factor",)
FITTED = "stack_efficiency"
#: starting point and bounds of the constants
BOUNDS = {FITTED: (0.05, 1.0), "attention_factor": (0.05, 1.0)}
START = {FITTED: 0.8, "attention_factor": 0.7}
METRICS = (
    "achieved_flops",
    "tokens_per_second_per_gpu",
    "sequences_per_second_per_gpu",
    "gpu_hours_per_token",
    "step_time",
)
#: the probability the printed interval of a predicted step time is meant to hold
COVERAGE = 0.8
#: robust loss: residuals beyond ~10% in log count linearly, so one irreconcilable case cannot drag
#: every constant towards it
LOSS, F_SCALE = "soft_l1", 0.1


def build_plan(spec: dict, symbolic_constants: bool = False, **constants) -> Plan:
    """A Plan from a case's ``plan`` table (:func:`.cases.plan_of`), with the fitted constants
    given, or left as their symbols (``symbolic_constants``)."""
    if symbolic_constants:
        constants = {k: sym(k) for k in (FITTED, *SHARED)}
    return plan_of(spec, **constants)


def metric_formula(
    plan: Plan, metric: str, convention: str = "6nd", time: str = "step_time"
) -> Formula:
    """The measured quantity of a case as a Formula of the plan (``time``: the plan quantity taken
    as the step's time)."""
    flops = plan.expr(f"flops.{choice('convention', convention, CONVENTIONS)}")
    step = plan.expr(choice("time", time, ("step_time", "time.compute")))
    gpus = plan.deg.gpus
    if metric == "achieved_flops":
        return formula("compute.achieved_flops").bind(
            {"flops": flops, "step_time": step, "gpus": gpus}
        )
    per_gpu = plan.expr("tokens_per_step") / (step * gpus)  # tokens a second a GPU
    if metric == "tokens_per_second_per_gpu":
        return per_gpu
    if metric == "sequences_per_second_per_gpu":
        return per_gpu / Quantity(plan.seq_len, "token")
    if metric == "gpu_hours_per_token":
        return (step * gpus / plan.expr("tokens_per_step")).to("hour/token")
    if metric == "step_time":
        return step
    raise InputError(f"metric: expected one of {', '.join(METRICS)}, got {metric!r}")


@dataclass
class Case:
    """A measured number and the plan that should predict it."""

    id: str
    plan: dict
    metric: str
    convention: str
    published: object  # a Quantity
    key: str = ""
    in_fit: bool = True
    group: str = ""  # the source: cases of one group are left out together
    time: str = "step_time"  # "time.compute" for the compute-only baseline

    def __post_init__(self):
        built = build_plan(self.plan, symbolic_constants=True)
        self.key = stack(built.stack)["efficiency"]  # the stack family
        self.group = self.group or self.id
        f = metric_formula(built, self.metric, self.convention, self.time)
        self.unit = f.unit
        self.target = float(self.published.to(f.unit).magnitude)
        self._fn = f.lambdify()
        self.keywords = self._fn.keywords

    def predict(self, constants: dict) -> float:
        return float(self._fn(**{k: constants[k] for k in self.keywords}))


def _vector_names(cases) -> list[str]:
    keys = sorted({c.key for c in cases})
    return [f"{FITTED}:{k}" for k in keys] + [
        s for s in SHARED if any(s in c.keywords for c in cases)
    ]


def _constants(names, x) -> dict[str, dict | float]:
    eff = {n.split(":", 1)[1]: v for n, v in zip(names, x) if n.startswith(f"{FITTED}:")}
    shared = {n: v for n, v in zip(names, x) if not n.startswith(f"{FITTED}:")}
    return {FITTED: eff, **shared}


def _case_constants(constants, case, fallback=None):
    eff = constants[FITTED].get(case.key, fallback)
    return {FITTED: eff, **{k: constants[k] for k in SHARED if k in constants}}


def fit(cases: list[Case], start: dict | None = None) -> dict:
    """Least-squares fit of log(predicted/published); returns the constants. ``start``: constants to
    start from (a fit of more cases, whose optimum a refit without some of them lies near), else
    :data:`START`."""
    if not cases:
        raise ValidationError("calibration: no fitted case to fit the step-time constants on")
    return _fit(cases, start)[0]


def _predictable(case: Case, constants: dict, left_out: str) -> None:
    """Refuse, naming them, a case whose shared constants the fit without ``left_out`` did not
    determine (no case of the other sources reads them)."""
    missing = [k for k in SHARED if k in case.keywords and k not in constants]
    if missing:
        raise ValidationError(
            f"{case.id}: with {left_out} left out no fitted case determines {', '.join(missing)}; "
            "add cases of another source that read it"
        )


def _fit(cases: list[Case], start: dict | None = None):
    """The constants, the names of the fitted vector, and scipy's result."""
    from scipy.optimize import least_squares

    names = _vector_names(cases)
    kind = lambda n: n.split(":")[0]  # noqa: E731

    def first(n):  # the start's value of constant n, where it has one
        if start is None:
            return START[kind(n)]
        value = (
            start[FITTED].get(n.split(":", 1)[1]) if n.startswith(f"{FITTED}:") else start.get(n)
        )
        return START[kind(n)] if value is None else float(value)

    x0 = np.array([first(n) for n in names])
    lo = np.array([BOUNDS[kind(n)][0] for n in names])
    hi = np.array([BOUNDS[kind(n)][1] for n in names])

    weights = source_weights(cases)

    def log_errors(x):
        c = _constants(names, x)
        return np.array(
            [
                math.log(max(case.predict(_case_constants(c, case)), 1e-300) / case.target)
                for case in cases
            ]
        )

    res = least_squares(
        lambda x: weights * log_errors(x), x0, bounds=(lo, hi), method="trf", loss=LOSS,
        f_scale=F_SCALE,
    )
    constants = _constants(names, res.x)
    constants["rms_log_residual"] = float(np.sqrt(np.mean(log_errors(res.x) ** 2)))
    return constants, names, res


def source_weights(cases: list[Case]) -> np.ndarray:
    """1/√n for each case of a source with n cases: every source weighs the same in the sum of
    squares, so a table of many rows from one run does not outvote a paper with one."""
    sizes = {g: sum(c.group == g for c in cases) for g in {c.group for c in cases}}
    return np.array([1 / math.sqrt(sizes[c.group]) for c in cases])


def identifiability(cases: list[Case]) -> list[dict]:
    """For each fitted constant: its value, its standard error (from the Jacobian J of the weighted
    log residuals at the optimum: s²(JᵀJ)⁻¹ with s² = Σr²/(m − p), the residuals taken as
    they are, before the robust loss) and the cases that determine it: each case's share
    J²ᵢⱼ/Σᵢ J²ᵢⱼ of the constant's information, largest first."""
    _, names, res = _fit(cases)
    jac, r = res.jac, res.fun
    dof = max(len(r) - len(names), 1)
    cov = (r @ r) / dof * np.linalg.pinv(jac.T @ jac)
    out = []
    for j, name in enumerate(names):
        column = jac[:, j] ** 2
        shares = column / column.sum() if column.sum() > 0 else column
        # ties by id
        order = sorted(range(len(shares)), key=lambda i: (-round(float(shares[i]), 9), cases[i].id))
        out.append(
            {
                "name": name,
                "value": float(res.x[j]),
                "standard_error": float(np.sqrt(max(cov[j, j], 0.0))),
                "determined_by": [
                    (cases[i].id, float(shares[i])) for i in order if shares[i] >= 0.1
                ],
            }
        )
    return out


def pooled_efficiency(constants: dict, cases: list[Case]) -> float:
    """Geometric mean of the fitted families' efficiencies, each weighted by its number of sources:
    the efficiency of a stack no fitted source ran."""
    weights = {k: len({c.group for c in cases if c.key == k}) for k in constants[FITTED]}
    total = sum(weights.values())
    return math.exp(sum(w * math.log(constants[FITTED][k]) for k, w in weights.items()) / total)


def predict(case: Case, constants: dict, cases: list[Case]) -> float:
    return case.predict(_case_constants(constants, case, pooled_efficiency(constants, cases)))


def leave_one_out(cases: list[Case]) -> dict[str, float]:
    """case id → prediction with constants fitted on every other fitted case."""
    fitted = [c for c in cases if c.in_fit]
    full = fit(fitted)
    out = {}
    for case in steps(cases, desc="each case left out", unit="fits"):
        if not case.in_fit:  # never in the fit: its in-fit prediction is already out of sample
            out[case.id] = predict(case, full, fitted)
            continue
        rest = [c for c in fitted if c is not case]
        if not rest:
            raise ValidationError(f"{case.id}: leave-one-out needs a second fitted case")
        constants = fit(rest, start=full)
        _predictable(case, constants, case.id)
        out[case.id] = predict(case, constants, rest)
    return out


def leave_one_source_out(cases: list[Case]) -> dict[str, float]:
    """case id → prediction with constants fitted on the fitted cases of every other source."""
    fitted = [c for c in cases if c.in_fit]
    full, out = fit(fitted), {}
    for group in steps(sorted({c.group for c in cases}), desc="each source left out", unit="fits"):
        rest = [c for c in fitted if c.group != group]
        if not rest:
            raise ValidationError(
                f"leave-one-source-out needs fitted cases of a second source besides {group}"
            )
        constants = fit(rest, start=full)
        for c in cases:
            if c.group == group:
                _predictable(c, constants, group)
                out[c.id] = predict(c, constants, rest)
    return out


def time_ratio(case: Case, prediction: float) -> float:
    """Measured over predicted step time, from a prediction of ``case``'s metric (throughputs vary
    as 1/step time, GPU-hours per token and the step time itself as the step time)."""
    return (
        case.target / prediction
        if case.metric in ("gpu_hours_per_token", "step_time")
        else prediction / case.target
    )


def step_error(case: Case, prediction: float) -> float:
    """The one convention for every case's error: (predicted − measured)/measured step time, from
    a prediction of ``case``'s metric whatever quantity its source printed (positive: too slow)."""
    return 1 / time_ratio(case, prediction) - 1


def interval(
    cases: list[Case], predictions: dict, coverage: float = COVERAGE
) -> tuple[float, float]:
    """The (1 − coverage)/2 and (1 + coverage)/2 quantiles of measured/predicted step time over
    ``cases``: a predicted step time T has its measured value in [T·low, T·high] that often."""
    lo, hi = np.quantile(
        [time_ratio(c, predictions[c.id]) for c in cases], [(1 - coverage) / 2, (1 + coverage) / 2]
    )
    return float(lo), float(hi)


def memory_case_plan(case: dict, runs: dict) -> dict:
    """The plan table of a ``memory`` case: its own, or that of the predicted case (of ``runs``, by
    id) whose run it measured."""
    return case["plan"] if "plan" in case else runs[case["plan_of"]]["plan"]


def load_cases(path: Path) -> list[Case]:
    """The ``predicted`` cases of a validation TOML file that are checkable."""
    data = tomllib.loads(read_text(Path(path)))
    out = []
    for c in data.get("case", []):
        if c.get("kind") != "predicted" or "plan" not in c:
            continue
        out.append(
            Case(
                c["id"], c["plan"], c["metric"], c.get("convention", "6nd"),
                as_quantity("published", c["published"]), in_fit=c.get("in_fit", True),
                group=c.get("group", ""),
            )
        )
    return out


def render(
    constants: dict,
    cases: list[Case],
    source: str = "",
    ratios: tuple[float, float] | None = None,
    memory: dict | None = None,
    outside: dict | None = None,
    routing: dict | None = None,
) -> str:
    """The fitted constants as the calibration file the hardware presets read
    (presets/calibration.toml); ``ratios``: the interval of measured/predicted step time
    (:func:`interval`); ``memory``: the allocator's reserve fitted on measured peaks
    (:func:`analytic.fit.reserve.summary`); ``outside``: the memory outside it fitted on snapshots
    (:func:`analytic.fit.outside.summary`), of the same allocator; ``routing``: the imbalance of
    dropless MoE routing (:func:`analytic.fit.routing.summary`)."""
    lines = [
        (
            "# Constants of the predictive step-time model, the allocator's reserve over the memory"
            " count and the memory"
        ),
        "# a process holds outside its allocator.",
        "# Generated by",
        "# `analytic calibrate --published --write analytic/presets/calibration.toml`;",
        "# do not edit by hand: rerunning the command reproduces this file.",
        "",
        "[provenance]",
        (
            f'summary = "scipy.optimize.least_squares on log(predicted/published) over {len(cases)}'
            f' measured cases of {source}, each source weighted equally"'
        ),
        f"cases = [{', '.join(repr(c.id).replace(chr(39), chr(34)) for c in cases)}]",
        f"rms_log_residual = {constants['rms_log_residual']:.6f}",
        "",
        "[shared]",
        f"attention_factor = {constants['attention_factor']:.6f}",
        "",
        f"[{FITTED}]",
    ]
    for key, v in sorted(constants[FITTED].items()):
        lines.append(f'"{key}" = {v:.6f}')
    lines.append(
        f'"default" = {pooled_efficiency(constants, cases):.6f}  # pooled over the families, by'
        " their sources: a stack without fitted sources"
    )
    errors = {
        e["name"].split(":", 1)[1]: e["standard_error"]
        for e in identifiability(cases)
        if e["name"].startswith(f"{FITTED}:")
    }
    lines += ["", f"[{FITTED}_stderr]"] + [f'"{k}" = {v:.6f}' for k, v in sorted(errors.items())]
    lines += [] if ratios is None else _interval_lines(ratios, cases)
    lines += [] if memory is None else _memory_lines(memory, outside, source)
    return "\n".join(lines + _routing_lines(routing, source.split("/")[0])) + "\n"


def _interval_lines(ratios: tuple[float, float], cases: list[Case]) -> list[str]:
    """[interval]: the quantiles of measured/predicted step time, each case's source left out."""
    return [
        "",
        "[interval]",
        (
            f'basis = "measured/predicted step time of the {len(cases)} cases, each predicted'
            f" with its source left out of the fit ({len({c.group for c in cases})} sources):"
            f' quantiles {(1 - COVERAGE) / 2:g} and {(1 + COVERAGE) / 2:g}"'
        ),
        f"coverage = {COVERAGE}",
        f"low = {ratios[0]:.6f}",
        f"high = {ratios[1]:.6f}",
    ]


def _memory_lines(memory: dict, outside: dict | None, source: str) -> list[str]:
    """[memory]: the allocator's reserve over the count and, for the same allocator, the memory
    outside it."""
    lines = [
        "",
        "[memory]",
        f"basis = \"measured peak memory per GPU (the allocator's maximum reserved) over the"
        f" count of the "
        f'run\'s fullest stage, {memory["count"]} measured peaks (the memory cases of'
        f' {source.split("/")[0]}/) '
        f'({memory["sources"]} sources): reserve is its mean in log, each source weighted'
        " equally; low and "
        "high the smallest and largest measured/predicted peak, each predicted with its source"
        ' left out"',
        f'allocator = "{memory["allocator"]}"',
        (
            f"stacks = [{', '.join(chr(34) + name + chr(34) for name in memory['stacks'])}]  #"
            " the runs' stacks"
        ),
        f"reserve = {memory['reserve']:.6f}",
        f"reserve_log_stderr = {memory['reserve_log_stderr']:.6f}",
        f"low = {memory['low']:.6f}",
        f"high = {memory['high']:.6f}",
    ]
    if outside is not None and outside["allocator"] == memory["allocator"]:
        lines += [
            f"outside_basis = \"the device's memory less the allocator's reserved and the free"
            f" memory, "
            f'{outside["count"]} snapshots of training processes (the outside cases of'
            f' {source.split("/")[0]}/) '
            f'({outside["sources"]} sources): outside_bytes is their mean, each source weighted'
            " equally, "
            'with its standard error; low and high the smallest and largest snapshot"',
            f"outside_bytes = {outside['outside']:.0f}",
            f"outside_stderr_bytes = {outside['stderr']:.0f}",
            f"outside_low_bytes = {outside['low']:.0f}",
            f"outside_high_bytes = {outside['high']:.0f}",
        ]
    return lines


def _routing_lines(routing: dict | None, folder: str) -> list[str]:
    """The [routing] tables of the calibration file, a model each, where pairs were fitted."""
    if routing is None:
        return []
    lines = [
        "",
        "[routing]",
        (
            "basis = \"the busiest expert-parallel rank's routed tokens over its balanced share "
            "under dropless routing, by model: the mean over its published pairs of runs forced "
            f"balanced and dropless ({folder}/routing.toml), each the imbalance at which the plan "
            "of the run steps as much longer as the run measured; its standard error (the spread "
            "of the pairs over the root of their number) where it has several, low and high the "
            'least and largest pair"'
        ),
    ]
    for name, m in routing["models"].items():
        lines += ["", f'[routing.dropless."{name}"]', f"imbalance = {m['imbalance']:.6f}"]
        lines += [] if m["stderr"] is None else [f"stderr = {m['stderr']:.6f}"]
        lines += [f"low = {m['low']:.6f}", f"high = {m['high']:.6f}", f"pairs = {m['count']}"]
    return lines


def as_json(
    constants: dict,
    cases: list[Case],
    ratios: tuple[float, float] | None = None,
    memory: dict | None = None,
    outside: dict | None = None,
    routing: dict | None = None,
) -> dict:
    """The fitted constants as data."""
    return {
        "cases": [c.id for c in cases],
        "rms_log_residual": constants["rms_log_residual"],
        "shared": {k: constants[k] for k in SHARED},
        FITTED: dict(constants[FITTED]),
        f"default_{FITTED}": pooled_efficiency(constants, cases),
        **(
            {"interval": {"coverage": COVERAGE, "low": ratios[0], "high": ratios[1]}}
            if ratios
            else {}
        ),
        **({"memory": memory} if memory else {}),
        **({"outside": outside} if outside else {}),
        **({"routing": routing} if routing else {}),
    }
