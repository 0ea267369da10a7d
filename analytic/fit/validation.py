"""Run the published validation cases (TOML files of a ``validation/`` folder) and write the report.

Case kinds: ``identity`` (a formula reproduces a published closed form or value), ``derived`` (a
published number follows from published inputs), ``predicted`` (a measurement the calibrated model
must predict, its source left out), ``memory`` (a measured peak per GPU), ``oom`` (a published run
that ran out of memory), ``outside`` (a snapshot of the memory a process holds outside its
allocator), ``claim`` (the source text's claims). Nothing here knows a case by name: the cases are
data."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import sympy

from ..core.choices import MEMORY_VERDICTS
from ..core.errors import AnalyticError, ValidationError
from ..core.expressions import evaluate, symbolic
from ..core.progress import steps
from ..core.units import DimensionalityError, Quantity, as_data, data, is_quantity, shown
from ..core.values import as_quantity
from . import calibration
from .readings import readings

CLAIM_EXACT = 0.005  # a claim within 0.5% "holds"; within its stated rounding "holds-rounded"

from .cases import (
    KINDS,
    find_folder,
    load,
)  # noqa: F401 (validation.load, .find_folder: the folder and its cases)


@dataclass
class Result:
    id: str
    kind: str
    quantity: str
    published: str
    ours: str
    error: float | None
    status: str
    expected: str
    source: str
    reason: str = ""
    tolerance: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The computed status is the one the case records."""
        return self.status == self.expected


#: what a case's ``compute`` may read of the objects it gets (nothing else, and nothing starting
#: with _)
ATTRIBUTES = frozenset(
    {
        "Layout",
        "simplify",
        "expand",
        "log",  # of the namespaces an and sympy below
        "activations",
        "active_params",
        "calibration",
        "communication",
        "expr",
        "gpus",
        "hbm",
        "link_efficiency",
        "magnitude",
        "memory",
        "microbatches",
        "optimizer",
        "peak_flops",
        "scale_out_bandwidth",
        "scale_up_bandwidth",
        "step_time",
        "subs",
        "to",
        "tokens_per_step",
        "total_params",
        "value",
        "vocab",
        "weights",
    }
)


def namespace(plans: dict) -> dict:
    """The names a case's ``compute`` may use."""
    import analytic as an

    from ..formulas import formula

    built = {}

    def plan(name: str):
        if name not in plans:
            raise AnalyticError(
                f"plan {name!r} is not among the [plans] tables ({', '.join(sorted(plans))})"
            )
        if name not in built:
            built[name] = calibration.build_plan(plans[name])
        return built[name]

    from ..presets import nccl_efficiency, nccl_latency

    return {
        "an": SimpleNamespace(Layout=an.Layout),
        "nccl_efficiency": nccl_efficiency,
        "nccl_latency": lambda link: shown(nccl_latency(link)),
        "Q": lambda text: shown(as_quantity("Q", text)),
        "f": lambda name, **kw: formula(name).evaluate(**kw),
        "expr": lambda name: formula(name).expr,
        "S": symbolic,
        "model": an.model,
        "hw": an.hardware,
        "plan": plan,
        "sympy": SimpleNamespace(simplify=sympy.simplify, expand=sympy.expand, log=sympy.log),
        "sum": sum,
        "int": int,
        "float": float,
    }


def _within(error: float, tol: float) -> bool:
    """Whether a relative error is within a tolerance, its edge included (up to rounding, 1e-12)."""
    return abs(error) <= tol + 1e-12


def _evaluate(case: dict, ns: dict) -> Result:
    kind = case["kind"]
    expected = case.get("expect", {"claim": "holds"}.get(kind, "within"))
    base = dict(
        id=case["id"],
        kind=kind,
        quantity=case.get("quantity", ""),
        published=str(case.get("published", "—")),
        source=case.get("source", ""),
        reason=case.get("reason", ""),
        expected=expected,
        tolerance=case.get("tolerance"),
    )
    if "compute" not in case:
        return Result(ours="—", error=None, status=expected, **base)
    ours = evaluate(case["compute"], ns, ATTRIBUTES, what=f"case {case['id']}")
    if isinstance(ours, sympy.Basic) and not ours.is_number:
        published = symbolic(case["published"], what=f"case {case['id']}")
        same = sympy.simplify(ours - published) == 0
        status = (
            ("holds" if kind == "claim" else "within")
            if same
            else ("disagrees" if kind == "claim" else "outside")
        )
        if kind != "claim" and not same and expected == "disagrees":
            status = "disagrees"
        return Result(ours=str(ours), error=0.0 if same else None, status=status, **base)
    pub = (
        as_quantity("published", case["published"])
        if isinstance(case["published"], str)
        else Quantity(case["published"])
    )
    ours_q = data(ours) if is_quantity(ours) else Quantity(float(ours))
    try:
        ours_v = float(ours_q.to(pub.units).magnitude)
    except DimensionalityError:
        raise AnalyticError(
            f"{case['id']}: computed {ours_q:~P} cannot be compared with {pub:~P}"
        ) from None
    pub_v = float(pub.magnitude)
    error = (ours_v / pub_v - 1) if pub_v else ours_v
    tol = float(case.get("tolerance", 0.0))
    if kind == "claim":
        status = (
            "holds"
            if _within(error, min(CLAIM_EXACT, tol))
            else "holds-rounded" if _within(error, tol) else "disagrees"
        )
    else:
        status = (
            "within"
            if _within(error, tol)
            else ("disagrees" if expected == "disagrees" else "outside")
        )
    return Result(
        ours=(
            format(Quantity(ours_v, pub.units), ".4g~P")
            if not pub.dimensionless
            else f"{ours_v:.4g}"
        ),
        error=error,
        status=status,
        **base,
    )


def _guarded(evaluate, case: dict, ns: dict) -> Result:
    """``evaluate(case, ns)``, whatever goes wrong in it (a division by zero, an overflow, a
    recursion, a unit mismatch, a library error) one ValidationError naming the case."""
    try:
        with as_data():  # unit text read by the library's bounded grammar, as on the command line
            return evaluate(case, ns)
    except ValidationError:
        raise
    except (
        ArithmeticError,
        RecursionError,
        ValueError,
        TypeError,
        KeyError,
        AttributeError,
        IndexError,
        MemoryError,
        AnalyticError,
    ) as exc:  # the units' errors are among these
        name = f"case {case['id'][:80]}: "
        raise ValidationError(
            f"{name}{type(exc).__name__}: {str(exc).removeprefix(name)[:120]}"
        ) from None


def _predicted(cases: list[dict]) -> list[Result]:
    """Each case predicted with its whole source left out of the fit (the headline and the status),
    and also in-fit, leave-one-case-out, and by the compute-only baseline with its source left
    out."""
    objs, baseline, specs = [], [], {}
    if not cases:
        return []

    # the case and its compute-only twin, whatever goes wrong one ValidationError (_guarded)
    def build(c, ns):
        kw = dict(in_fit=c.get("in_fit", True), group=c["group"])
        args = (
            c["id"],
            c["plan"],
            c["metric"],
            c.get("convention", "6nd"),
            as_quantity("published", c["published"]),
        )
        objs.append(calibration.Case(*args, **kw))
        baseline.append(calibration.Case(*args, **kw, time="time.compute"))

    for c in cases:
        _guarded(build, c, {})
        specs[c["id"]] = c
    fitted = [o for o in objs if o.in_fit]
    constants = calibration.fit(fitted)
    loo, loso = calibration.leave_one_out(objs), calibration.leave_one_source_out(objs)
    base = calibration.leave_one_source_out(baseline)
    low, high = calibration.interval(fitted, loso)  # the shipped [interval], from these predictions
    out = []
    for o in steps(objs, desc="predicted cases", unit="cases"):
        c, plan = specs[o.id], calibration.build_plan(specs[o.id]["plan"])
        err = {
            k: calibration.step_error(o, v)
            for k, v in (
                ("in_fit", calibration.predict(o, constants, fitted)),
                ("loo", loo[o.id]),
                ("loso", loso[o.id]),
                ("baseline", base[o.id]),
            )
        }
        tol = float(c.get("tolerance", 0.20))
        status = "within" if _within(err["loso"], tol) else "outside"
        reason = c.get("reason", "") or (
            "" if o.in_fit else f"not in the fit: {c.get('why_not_in_fit', '')}"
        )
        out.append(
            Result(
                id=o.id,
                kind="predicted",
                quantity=c.get("quantity", ""),
                published=c["published"],
                ours=format(
                    Quantity(loso[o.id], o.unit).to(as_quantity("published", c["published"]).units),
                    ".4g~P",
                ),
                error=err["loso"],
                status=status,
                expected=c.get("expect", "within"),
                source=c.get("source", ""),
                reason=reason,
                tolerance=tol,
                extra={
                    "in_fit_error": err["in_fit"],
                    "leave_one_out_error": err["loo"],
                    "baseline_error": err["baseline"],
                    "in_fit": o.in_fit,
                    "group": o.group,
                    "family": o.key,
                    "published_unit_error": loso[o.id] / o.target - 1,
                    "in_interval": low <= calibration.time_ratio(o, loso[o.id]) <= high,
                    "fits": bool(plan.memory().fits),
                    "verdict": plan.memory_verdict(),
                    "count_share": _count_share(plan),
                    "readings": readings(c, constants, fitted),
                    "assumptions": c.get("assumptions", []),
                },
            )
        )
    return out


def _count_share(plan) -> float:
    """The fullest stage's count over the HBM."""
    mem = plan.memory()
    return float((mem.total / mem.hbm).to("").magnitude)


def _memory(folder: Path, cases: dict) -> list[Result]:
    """Each measured peak (``cases``: id → memory case) against its run's fullest stage times the
    allocator's reserve fitted with the peak's source left out (:mod:`analytic.fit.reserve`), or the
    count alone for a peak of allocated memory; the count alone and the reserve fitted on every peak
    are kept beside it."""
    from . import reserve

    rows = reserve.peaks(folder)
    if not rows:
        return []
    fitted = reserve.reserved(rows)
    loso = reserve.leave_one_source_out(fitted) if fitted else {}
    factor = reserve.fit(fitted)[0] if fitted else 1.0
    out = []
    for r in rows:
        case = cases[r["id"]]
        # a peak of allocated memory is the live tensors: the count is its prediction, in and out of
        # the fit
        left_out, in_fit = (1.0, 1.0) if r["measure"] == "allocated" else (loso[r["id"]], factor)
        unit = as_quantity("published", case["published"]).units
        ours = (r["counted"] * left_out).to(unit)
        err = {
            "loso": left_out / r["ratio"] - 1,
            "in_fit": in_fit / r["ratio"] - 1,
            "count": 1 / r["ratio"] - 1,
        }
        tol = float(case.get("tolerance", 0.10))
        out.append(
            Result(
                id=r["id"],
                kind="memory",
                quantity=case.get("quantity", ""),
                published=case["published"],
                ours=format(ours, ".4g~P"),
                error=err["loso"],
                status="within" if _within(err["loso"], tol) else "outside",
                expected=case.get("expect", "within"),
                source=case.get("source", ""),
                reason=case.get("reason", ""),
                tolerance=tol,
                extra={
                    "group": r["group"],
                    "measure": r["measure"],
                    "in_fit_error": err["in_fit"],
                    "count": format(r["counted"].to(unit), ".4g~P"),
                    "count_error": err["count"],
                },
            )
        )
    return out


def _oom(cases: list[dict]) -> list[Result]:
    """Each reported out-of-memory run against its fullest stage (:meth:`Plan.memory_verdict`): the
    case holds ("within") when the model puts its count above the HBM too."""
    out = []
    for c in cases:
        plan = calibration.build_plan(copy.deepcopy(c["plan"]))
        mem, verdict = plan.memory(), plan.memory_verdict()
        out.append(
            Result(
                id=c["id"],
                kind="oom",
                quantity=c.get("quantity", ""),
                published=c["published"],
                ours=f"count {mem.total.to('GB'):.4g~P} of {mem.hbm.to('GB'):.4g~P}: {verdict}",
                error=None,
                status="within" if verdict == MEMORY_VERDICTS[2] else "outside",
                expected=c.get("expect", "within"),
                source=c.get("source", ""),
                reason=c.get("reason", ""),
                extra={"group": c["group"], "count_share": _count_share(plan)},
            )
        )
    return out


def _outside(folder: Path, cases: dict) -> list[Result]:
    """Each snapshot's memory outside the allocator (:mod:`analytic.fit.outside`) against the mean
    of every other source's."""
    from . import outside

    rows = outside.snapshots(folder)
    if len({r["group"] for r in rows}) < 2:
        return []
    loso, out = outside.leave_one_source_out(rows), []
    for r in rows:
        c, measured = cases[r["id"]], r["outside"].to("GiB")
        err, tol = float((loso[r["id"]] / measured).to("").magnitude) - 1, float(
            c.get("tolerance", 0.5)
        )
        out.append(
            Result(
                id=r["id"],
                kind="outside",
                quantity=c.get("quantity", ""),
                published=f"{measured:.4g~P} ({c['hardware']} less reserved and free)",
                ours=format(loso[r["id"]].to("GiB"), ".4g~P"),
                error=err,
                status="within" if _within(err, tol) else "outside",
                expected=c.get("expect", "within"),
                source=c["source"],
                reason=c.get("reason", ""),
                tolerance=tol,
                extra={"group": r["group"]},
            )
        )
    return out


def run(folder: Path | None = None, *, predicted: bool = True) -> list[Result]:
    """Every case (``predicted=False``: all but the predicted ones, which need the calibration
    fit)."""
    folder = folder or find_folder()
    cases, plans = load(folder)
    ns = namespace(plans)
    results = [
        _guarded(_evaluate, c, ns)
        for c in steps(
            [c for c in cases if c["kind"] not in ("predicted", "memory", "oom", "outside")],
            desc="cases",
            unit="cases",
        )
    ]
    results += _memory(folder, {c["id"]: c for c in cases if c["kind"] == "memory"})
    results += _oom([c for c in cases if c["kind"] == "oom"])
    results += _outside(folder, {c["id"]: c for c in cases if c["kind"] == "outside"})
    if predicted:
        results += _predicted([c for c in cases if c["kind"] == "predicted"])
    order = {kind: i for i, kind in enumerate(KINDS)}
    return sorted(results, key=lambda r: order[r.kind])


def failed(results: list[Result]) -> list[Result]:
    """Non-claim cases whose status is not the one they record (as a strict xfail): a new miss, or a
    known miss (``expect = "outside"``, with its reason) that now falls within its tolerance."""
    return [r for r in results if r.kind != "claim" and r.status != r.expected]


def known_misses(results: list[Result]) -> list[Result]:
    """Non-claim cases outside their tolerance as they record, each with its reason."""
    return [r for r in results if r.kind != "claim" and r.status == r.expected == "outside"]


def _mean_max(errors: list[float]) -> tuple[float, float]:
    errors = [abs(e) for e in errors]
    return sum(errors) / len(errors), max(errors)


def statistics(results: list[Result]) -> dict:
    """Cases by kind and status, and for the predicted cases (the fitted ones, and all) the mean and
    max absolute relative error in-fit, leave-one-out, leave-one-source-out and for the compute-only
    baseline (leave-one-source-out), and the same by source; for memory, the measured peaks' errors,
    the published runs (the predicted cases) whose count the model puts above their HBM and those at
    the allocator's limit, the runs that ran out of memory that it would fit, and the largest count
    over HBM of a run that ran and the smallest of one that ran out."""
    out = {"cases": {}, "predicted": {}}
    for kind in KINDS:
        counts = {}
        for r in results:
            if r.kind == kind:
                counts[r.status] = counts.get(r.status, 0) + 1
        out["cases"][kind] = dict(sorted(counts.items()))
    pred = [r for r in results if r.kind == "predicted"]
    columns = (
        ("in_fit", lambda r: r.extra["in_fit_error"]),
        ("leave_one_out", lambda r: r.extra["leave_one_out_error"]),
        ("leave_one_source_out", lambda r: r.error),
        ("baseline_leave_one_source_out", lambda r: r.extra["baseline_error"]),
    )

    def stats(subset):
        s = {"count": len(subset), "in_interval": sum(r.extra["in_interval"] for r in subset)}
        for name, get in columns:
            s[f"{name}_mean"], s[f"{name}_max"] = _mean_max([get(r) for r in subset])
        return s

    mem = [r for r in results if r.kind == "memory"]

    def memory_stats(subset):
        out = {"count": len(subset), "within": sum(r.status == "within" for r in subset)}
        out["mean"], out["max"] = _mean_max([r.error for r in subset])
        for name in ("in_fit", "count"):
            out[f"{name}_mean"], out[f"{name}_max"] = _mean_max(
                [r.extra[f"{name}_error"] for r in subset]
            )
        return out

    if mem:
        out["memory"] = {
            **memory_stats(mem),
            "sources": {
                g: memory_stats([r for r in mem if r.extra["group"] == g])
                for g in sorted({r.extra["group"] for r in mem})
            },
        }
    if pred:  # every predicted case is a published run that ran: its layout should fit
        out.setdefault("memory", {})["runs_not_fitting"] = [
            r.id for r in pred if not r.extra["fits"]
        ]
        out["memory"]["runs_at_allocator_limit"] = [
            r.id for r in pred if r.extra["verdict"] == MEMORY_VERDICTS[1]
        ]
        out["memory"]["runs"] = len(pred)
        out["memory"]["runs_count_share_max"] = max(r.extra["count_share"] for r in pred)
    oom = [r for r in results if r.kind == "oom"]
    if oom:  # published runs that ran out of memory: each should not fit
        out.setdefault("memory", {})["reported_oom"] = len(oom)
        out["memory"]["oom_predicted_to_fit"] = [r.id for r in oom if r.status != "within"]
        out["memory"]["oom_count_share_min"] = min(r.extra["count_share"] for r in oom)
    beyond = [r for r in results if r.kind == "outside"]
    # snapshots of the memory outside the allocator, each against the other sources' mean
    if beyond:
        out["outside"] = {
            "count": len(beyond),
            "sources": len({r.extra["group"] for r in beyond}),
            "within": sum(r.status == "within" for r in beyond),
        }
        out["outside"]["mean"], out["outside"]["max"] = _mean_max([r.error for r in beyond])
    for label, subset in (("fitted", [r for r in pred if r.extra["in_fit"]]), ("all", pred)):
        if subset:
            out["predicted"][label] = stats(subset)
            out["predicted"][label]["sources"] = {
                g: stats([r for r in subset if r.extra["group"] == g])
                for g in sorted({r.extra["group"] for r in subset})
            }
            out["predicted"][label] |= _by_family(subset, stats)
    return out


def _by_family(subset: list, stats) -> dict:
    """The errors of the cases whose stack family rests on one fitted source (left out, that family
    takes the pooled value) and of those whose family has several, and the largest error in each
    case's published unit (a throughput's, a time's) beside the step time's."""
    sources = {}
    for r in subset:
        if r.extra["in_fit"]:
            sources.setdefault(r.extra["family"], set()).add(r.extra["group"])
    single = [r for r in subset if len(sources.get(r.extra["family"], ())) <= 1]
    several = [r for r in subset if len(sources.get(r.extra["family"], ())) > 1]
    out = {
        f"{name}_families": {**stats(part), "families": sorted({r.extra["family"] for r in part})}
        for name, part in (("single_source", single), ("multi_source", several))
        if part
    }
    worst = max(subset, key=lambda r: abs(r.extra["published_unit_error"]))
    return out | {
        "published_unit_max": abs(worst.extra["published_unit_error"]),
        "published_unit_max_case": worst.id,
    }
