"""Run the published validation cases (TOML files of a ``validation/`` folder) and write the report.

Case kinds: ``identity`` (a formula reproduces a published closed form or value), ``derived`` (a
published number follows from published inputs), ``predicted`` (a measurement the calibrated model
must predict; reported in-fit and leave-one-out), ``claim`` (the source text's claims).
Nothing here knows a case by name: the cases are data.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pint
import sympy

from . import calibration
from .errors import AnalyticError
from .expressions import evaluate, symbolic
from .units import Q_
from .values import as_quantity

CLAIM_EXACT = 0.005  # a claim within 0.5% "holds"; within its stated rounding "holds-rounded"


KINDS = ("identity", "derived", "predicted", "claim")


def find_folder(folder: Path | str | None = None) -> Path:
    """The cases' folder: ``folder`` when given, else the ``validation/`` folder of the source checkout
    this package is installed from. Never the working directory or its parents: cases run code
    paths of the library, and a folder planted there would steer them."""
    if folder is not None:
        folder = Path(folder)
        if not folder.is_dir():
            raise AnalyticError(f"cases: {folder} is not a folder")
        return folder
    own = Path(__file__).resolve().parent.parent / "validation"
    if (own / "claims.toml").exists():
        return own
    raise AnalyticError("validation/ is not beside this installation (a source checkout has it); "
                        "give the cases' folder (--cases DIR)")


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


def load(folder: Path) -> tuple[list[dict], dict]:
    """Every case of the folder's TOML files, and their [plans] tables."""
    cases, plans = [], {}
    for path in sorted(folder.glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise AnalyticError(f"{path}: not valid TOML ({exc})") from None
        plans.update(data.get("plans", {}))
        for i, c in enumerate(data.get("case", [])):
            if not isinstance(c, dict) or not isinstance(c.get("id"), str) or c.get("kind") not in KINDS:
                raise AnalyticError(f"{path.name}: case {i + 1} needs an id and a kind ({', '.join(KINDS)})")
            if c["kind"] == "predicted" and not all(k in c for k in ("plan", "metric", "published")):
                raise AnalyticError(f"{path.name}: predicted case {c['id']} needs plan, metric and published")
            cases.append(dict(c, file=path.name))
    if not cases:
        raise AnalyticError(f"{folder}: no cases (a case is a [[case]] table of a *.toml file)")
    ids = [c["id"] for c in cases]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise AnalyticError(f"duplicate case ids: {', '.join(sorted(dupes))}")
    return cases, plans


#: what a case's ``compute`` may read of the objects it gets (nothing else, and nothing starting with _)
ATTRIBUTES = frozenset({
    "Layout", "simplify", "expand", "log",  # of the namespaces an and sympy below
    "activations", "active_params", "calibration", "communication", "expr", "gpus", "hbm", "link_efficiency",
    "magnitude", "memory",
    "microbatches", "optimizer", "peak_flops", "scale_out_bandwidth", "scale_up_bandwidth", "step_time", "subs",
    "to", "tokens_per_step", "total_params", "value", "vocab", "weights"})


def namespace(plans: dict) -> dict:
    """The names a case's ``compute`` may use."""
    import analytic as an

    from .formulas import formula

    built = {}

    def plan(name: str):
        if name not in plans:
            raise AnalyticError(f"plan {name!r} is not among the [plans] tables ({', '.join(sorted(plans))})")
        if name not in built:
            built[name] = calibration.build_plan(plans[name])
        return built[name]

    return {"an": SimpleNamespace(Layout=an.Layout), "Q": lambda text: as_quantity("Q", text), "f": lambda name, **kw: formula(name).evaluate(**kw),
            "expr": lambda name: formula(name).expr, "S": symbolic, "model": an.model, "hw": an.hardware,
            "plan": plan, "sympy": SimpleNamespace(simplify=sympy.simplify, expand=sympy.expand, log=sympy.log),
            "sum": sum, "int": int, "float": float}


def _evaluate(case: dict, ns: dict) -> Result:
    kind = case["kind"]
    expected = case.get("expect", {"claim": "holds"}.get(kind, "within"))
    base = dict(id=case["id"], kind=kind, quantity=case.get("quantity", ""), published=str(case.get("published", "—")),
                source=case.get("source", ""), reason=case.get("reason", ""), expected=expected,
                tolerance=case.get("tolerance"))
    if "compute" not in case:
        return Result(ours="—", error=None, status=expected, **base)
    ours = evaluate(case["compute"], ns, ATTRIBUTES, what=f"case {case['id']}")
    if isinstance(ours, sympy.Basic) and not ours.is_number:
        published = symbolic(case["published"], what=f"case {case['id']}")
        same = sympy.simplify(ours - published) == 0
        status = ("holds" if kind == "claim" else "within") if same else ("disagrees" if kind == "claim" else "outside")
        if kind != "claim" and not same and expected == "disagrees":
            status = "disagrees"
        return Result(ours=str(ours), error=0.0 if same else None, status=status, **base)
    pub = as_quantity("published", case["published"]) if isinstance(case["published"], str) else Q_(case["published"], "")
    ours_q = ours if isinstance(ours, pint.Quantity) else Q_(float(ours), "")
    try:
        ours_v = float(ours_q.to(pub.units).magnitude)
    except pint.DimensionalityError:
        raise AnalyticError(f"{case['id']}: computed {ours_q:~P} cannot be compared with {pub:~P}") from None
    pub_v = float(pub.magnitude)
    error = (ours_v / pub_v - 1) if pub_v else ours_v
    tol = float(case.get("tolerance", 0.0))
    if kind == "claim":
        status = ("holds" if abs(error) <= min(CLAIM_EXACT, tol) + 1e-12
                  else "holds-rounded" if abs(error) <= tol else "disagrees")
    else:
        status = "within" if abs(error) <= tol + 1e-12 else ("disagrees" if expected == "disagrees" else "outside")
    return Result(ours=format(Q_(ours_v, pub.units), ".4g~P") if not pub.dimensionless else f"{ours_v:.4g}", error=error,
                  status=status, **base)


def _predicted(cases: list[dict]) -> list[Result]:
    objs, specs = [], {}
    for c in cases:
        objs.append(calibration.Case(c["id"], c["plan"], c["metric"], c.get("convention", "6nd"),
                                     as_quantity("published", c["published"]), in_fit=c.get("in_fit", True)))
        specs[c["id"]] = c
    fitted = [o for o in objs if o.in_fit]
    constants = calibration.fit(fitted)
    loo = calibration.leave_one_out(objs)
    out = []
    for o in objs:
        c = specs[o.id]
        pred = calibration.predict(o, constants, fitted)
        err_fit, err_loo = pred / o.target - 1, loo[o.id] / o.target - 1
        tol = float(c.get("tolerance", 0.12))
        status = "within" if abs(err_loo) <= tol else "outside"
        reason = c.get("reason", "") or ("" if o.in_fit else f"not in the fit: {c.get('why_not_in_fit', '')}")
        out.append(Result(id=o.id, kind="predicted", quantity=c.get("quantity", ""), published=c["published"],
                          ours=format(Q_(loo[o.id], o.unit).to(as_quantity("published", c["published"]).units), ".4g~P"), error=err_loo,
                          status=status,
                          expected=c.get("expect", "within"), source=c.get("source", ""), reason=reason,
                          tolerance=tol, extra={"in_fit_error": err_fit, "in_fit": o.in_fit,
                                                "assumptions": c.get("assumptions", [])}))
    return out


def run(folder: Path | None = None, *, predicted: bool = True) -> list[Result]:
    """Every case (``predicted=False``: all but the predicted ones, which need the calibration fit)."""
    folder = folder or find_folder()
    cases, plans = load(folder)
    ns = namespace(plans)
    results = [_evaluate(c, ns) for c in cases if c["kind"] != "predicted"]
    if predicted:
        results += _predicted([c for c in cases if c["kind"] == "predicted"])
    order = {"identity": 0, "derived": 1, "predicted": 2, "claim": 3}
    return sorted(results, key=lambda r: order[r.kind])


def failed(results: list[Result]) -> list[Result]:
    """Non-claim cases outside their tolerance (the expected disagreements excepted)."""
    return [r for r in results if r.kind != "claim" and r.status not in ("within", "disagrees")]


def statistics(results: list[Result]) -> dict:
    """Cases by kind and status, and for the predicted cases (the fitted ones, and all) the mean and
    max absolute relative error, in-fit and leave-one-out."""
    out = {"cases": {}, "predicted": {}}
    for kind in ("identity", "derived", "predicted", "claim"):
        counts = {}
        for r in results:
            if r.kind == kind:
                counts[r.status] = counts.get(r.status, 0) + 1
        out["cases"][kind] = dict(sorted(counts.items()))
    pred = [r for r in results if r.kind == "predicted"]
    for label, subset in (("fitted", [r for r in pred if r.extra["in_fit"]]), ("all", pred)):
        if subset:
            fit_errs = [abs(r.extra["in_fit_error"]) for r in subset]
            loo_errs = [abs(r.error) for r in subset]
            out["predicted"][label] = {"count": len(subset), "in_fit_mean": sum(fit_errs) / len(fit_errs),
                                       "in_fit_max": max(fit_errs), "leave_one_out_mean": sum(loo_errs) / len(loo_errs),
                                       "leave_one_out_max": max(loo_errs)}
    return out


def summary(results: list[Result]) -> list[str]:
    stats = statistics(results)
    lines = [f"{kind}: {sum(counts.values())} cases — " + ", ".join(f"{v} {k}" for k, v in counts.items())
             for kind, counts in stats["cases"].items()]
    for label, s in stats["predicted"].items():
        name = "fitted cases" if label == "fitted" else "all predicted cases"
        lines.append(f"predicted, {name} ({s['count']}): in-fit mean {_pct(s['in_fit_mean'])}, "
                     f"max {_pct(s['in_fit_max'])}; leave-one-out mean {_pct(s['leave_one_out_mean'])}, "
                     f"max {_pct(s['leave_one_out_max'])}")
    return lines


def _pct(x: float | None) -> str:
    return "—" if x is None or math.isnan(x) else f"{100 * x:.1f}%"


def table(results: list[Result]) -> str:
    rows = [f"{'id':<16} {'kind':<9} {'published':>16} {'ours':>16} {'error':>8}  {'status':<13} source"]
    for r in results:
        rows.append(f"{r.id:<16} {r.kind:<9} {r.published[:16]:>16} {r.ours[:16]:>16} "
                    f"{_pct(r.error):>8}  {r.status:<13} {r.source[:60]}")
    return "\n".join(rows)


def markdown(results: list[Result]) -> str:
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    out = ["# Validation report", "",
           "Generated by `analytic validate`; do not edit. Every number in the *ours* column is computed "
           "through the library's public API from the case files in this folder.", "", "## Summary", ""]
    out += [f"- {line}" for line in summary(results)]
    titles = {"identity": "Identities (published closed forms and values)",
              "derived": "Derived (published numbers from published inputs)",
              "predicted": "Predicted (measured; leave-one-out)", "claim": "Claims of the source text"}
    for kind, title in titles.items():
        rs = [r for r in results if r.kind == kind]
        out += ["", f"## {title}", ""]
        if kind == "predicted":
            out += ["Ours is the leave-one-out prediction: the constants are fitted on every other fitted case. "
                    "The in-fit error uses the shipped constants.", "",
                    "| id | quantity | published | ours (LOO) | LOO error | in-fit error | status | source | assumptions |",
                    "|---|---|---|---|---|---|---|---|---|"]
            for r in rs:
                notes = "; ".join(r.extra["assumptions"]) + (f" — {r.reason}" if r.reason else "")
                out.append(f"| {r.id} | {esc(r.quantity)} | {esc(r.published)} | {esc(r.ours)} | {_pct(r.error)} | "
                           f"{_pct(r.extra['in_fit_error'])} | {r.status} | {esc(r.source)} | {esc(notes)} |")
            continue
        out += ["| id | quantity | published | ours | error | status | source | reason |", "|---|---|---|---|---|---|---|---|"]
        for r in rs:
            out.append(f"| {r.id} | {esc(r.quantity)} | {esc(r.published)} | {esc(r.ours)} | {_pct(r.error)} | "
                       f"{r.status} | {esc(r.source)} | {esc(r.reason)} |")
    return "\n".join(out) + "\n"
