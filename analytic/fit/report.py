"""The validation report: the summary lines, the terminal table and REPORT.md's Markdown of a run
of :func:`analytic.fit.validation.run`."""

from __future__ import annotations

import math
from pathlib import Path

from . import calibration
from .validation import Result, statistics


def summary(results: list[Result]) -> list[str]:
    """The summary lines: cases by kind and status, the predicted errors, and the same by source
    with the cases inside the printed interval."""
    stats = statistics(results)
    lines = [
        f"{kind}: {sum(counts.values())} cases — "
        + ", ".join(f"{v} {k}" for k, v in counts.items())
        for kind, counts in stats["cases"].items()
    ]
    for label, s in stats["predicted"].items():
        name = "fitted cases" if label == "fitted" else "all predicted cases"
        lines.append(
            f"predicted, {name} ({s['count']} from {len(s['sources'])} sources):"
            f" leave-one-source-out mean {_pct(s['leave_one_source_out_mean'])}, max"
            f" {_pct(s['leave_one_source_out_max'])} (compute-only baseline: mean"
            f" {_pct(s['baseline_leave_one_source_out_mean'])}, max"
            f" {_pct(s['baseline_leave_one_source_out_max'])}); leave-one-case-out mean"
            f" {_pct(s['leave_one_out_mean'])}, max {_pct(s['leave_one_out_max'])}; in-fit mean"
            f" {_pct(s['in_fit_mean'])}, max {_pct(s['in_fit_max'])}"
        )
    if "count" in stats.get("memory", {}):  # measured peaks (the runs' fit check may stand alone)
        s = stats["memory"]
        lines.append(
            f"memory: {s['count']} measured peaks from {len(s['sources'])} sources, the fullest"
            " stage's count times the allocator's reserve fitted with the peak's source left out"
            f" (a peak of allocated memory: the count alone): mean error {_pct(s['mean'])}, max"
            f" {_pct(s['max'])}; {s['within']} within their tolerance (the count alone: mean"
            f" {_pct(s['count_mean'])}, max {_pct(s['count_max'])}; the reserve fitted on every"
            f" peak: mean {_pct(s['in_fit_mean'])}, max {_pct(s['in_fit_max'])})"
        )
    if "runs" in stats.get("memory", {}):
        s = stats["memory"]
        lines.append(
            f"memory: {len(s['runs_not_fitting'])} of the {s['runs']} published runs predicted not"
            f" to fit by the count, though they ran: {', '.join(s['runs_not_fitting']) or 'none'};"
            " at the allocator's limit (the count fits, the count times the allocator's reserve"
            f" does not): {', '.join(s['runs_at_allocator_limit']) or 'none'}; the largest count of"
            f" a run that ran: {s['runs_count_share_max']:.3f} of its HBM"
        )
    if "reported_oom" in stats.get("memory", {}):
        s = stats["memory"]
        lines.append(
            f"memory: {len(s['oom_predicted_to_fit'])} of the {s['reported_oom']} published runs"
            " that ran out of memory predicted to fit:"
            f" {', '.join(s['oom_predicted_to_fit']) or 'none'}; the smallest count of one:"
            f" {s['oom_count_share_min']:.3f} of its HBM"
        )
    if "outside" in stats:
        s = stats["outside"]
        lines.append(
            f"outside: {s['count']} snapshots from {s['sources']} sources of the memory a process"
            " holds outside its allocator, each against the mean of the other sources: mean error"
            f" {_pct(s['mean'])}, max {_pct(s['max'])}; {s['within']} within their tolerance"
        )
    if "all" in stats["predicted"]:
        for g, s in stats["predicted"]["all"]["sources"].items():
            lines.append(
                f"  {g}: {s['count']} cases, leave-one-source-out mean"
                f" {_pct(s['leave_one_source_out_mean'])}, max"
                f" {_pct(s['leave_one_source_out_max'])}; {s['in_interval']} inside the"
                f" {calibration.COVERAGE:.0%} interval"
            )
    return lines


def _pct(x: float | None) -> str:
    return "—" if x is None or math.isnan(x) else f"{100 * x:.1f}%"


def table(results: list[Result]) -> str:
    rows = [
        f"{'id':<16} {'kind':<9} {'published':>16} {'ours':>16} {'error':>8}  {'status':<13} source"
    ]
    for r in results:
        rows.append(
            f"{r.id:<16} {r.kind:<9} {r.published[:16]:>16} {r.ours[:16]:>16} "
            f"{_pct(r.error):>8}  {r.status:<13} {r.source[:60]}"
        )
    return "\n".join(rows)


def constants_table(folder: Path) -> list[str]:
    """The fitted constants with their standard errors and the cases that determine them
    (Markdown)."""
    cases = [c for c in calibration.load_cases(folder / "predicted.toml") if c.in_fit]
    rows = [
        (
            "| constant | value | standard error | relative | determined by (share of its"
            " information ≥ 10%) |"
        ),
        "|---|---|---|---|---|",
    ]
    for c in calibration.identifiability(cases):
        rel = c["standard_error"] / c["value"] if c["value"] else float("nan")
        rows.append(
            f"| {c['name']} | {c['value']:.4g} | {c['standard_error']:.2g} | {_pct(rel)} | "
            + ", ".join(f"{i} ({s:.0%})" for i, s in c["determined_by"])
            + " |"
        )
    return rows


def _esc(s) -> str:
    """A table cell: pipes escaped, on one line."""
    return str(s).replace("|", "\\|").replace("\n", " ")


#: the report's sections, by kind of case
TITLES = {
    "identity": "Identities (published closed forms and values)",
    "derived": "Derived (published numbers from published inputs)",
    "predicted": "Predicted (measured; leave-one-source-out)",
    "memory": (
        "Memory (measured peaks per GPU against the fullest stage times the allocator's"
        " reserve, its source left out)"
    ),
    "oom": (
        "Out of memory (published runs that did not fit: the model must put their count above"
        " the HBM)"
    ),
    "outside": (
        "Outside the allocator (the device's memory less the allocator's reserved and the free"
        " memory; ours: the mean of the other sources)"
    ),
    "claim": "Claims of the source text",
}


def markdown(results: list[Result], folder: Path | None = None) -> str:
    """The report; with ``folder`` (the cases' folder), also the constants' identifiability."""
    out = [
        "# Validation report",
        "",
        (
            "Generated by `analytic validate`; do not edit. Every number in the *ours* column is"
            " computed through the library's public API from the case files in this folder."
        ),
        "",
        "## Summary",
        "",
    ]
    out += [f"- {line}" for line in summary(results)]
    sections = {"predicted": lambda rs: _predicted(rs, folder), "memory": _memory}
    for kind, title in TITLES.items():
        rs = [r for r in results if r.kind == kind]
        out += ["", f"## {title}", ""]
        out += sections.get(kind, _plain)(rs)
    return "\n".join(out) + "\n"


def _predicted(rs: list[Result], folder) -> list[str]:
    """The predicted cases: by source, one row a case, the readings a source does not state and
    (with the cases' ``folder``) the fitted constants."""
    out = []
    out += [
        (
            "Ours is the leave-one-source-out prediction (LOSO): the constants are fitted"
            " on the fitted cases of every other source (group), so rows of one table never"
            " predict each other. Every error is that of the predicted step time,"
            " (predicted − measured)/measured, whatever quantity the source printed (a"
            " throughput varies as 1/step time): positive is too slow. The status is its"
            " error against the case's tolerance. Beside it: leave-one-case-out (LOO),"
            " in-fit (the constants fitted on every fitted case, which are the shipped"
            " ones) and the compute-only baseline (the step as its compute alone, one"
            " efficiency per stack family, its source left out too)."
        ),
        "",
        (
            "*Inside* counts the cases whose measured step time falls in the"
            f" {calibration.COVERAGE:.0%} interval every printed prediction carries"
            " (calibration.toml's [interval], from the fitted cases' leave-one-source-out"
            " predictions)."
        ),
        "",
        (
            "| source | cases | inside | LOSO mean | LOSO max | baseline mean | baseline"
            " max | LOO mean | in-fit mean |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for g, s in statistics(rs)["predicted"]["all"]["sources"].items():
        out.append(
            f"| {g} | {s['count']} | {s['in_interval']} |"
            f" {_pct(s['leave_one_source_out_mean'])} |"
            f" {_pct(s['leave_one_source_out_max'])} |"
            f" {_pct(s['baseline_leave_one_source_out_mean'])} |"
            f" {_pct(s['baseline_leave_one_source_out_max'])} |"
            f" {_pct(s['leave_one_out_mean'])} | {_pct(s['in_fit_mean'])} |"
        )
    out += [
        "",
        (
            "| id | source group | quantity | published | ours (LOSO) | LOSO error | LOO"
            " error | in-fit error | baseline error | status | source | assumptions |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        notes = "; ".join(r.extra["assumptions"]) + (f" — {r.reason}" if r.reason else "")
        out.append(
            f"| {r.id} | {r.extra['group']} | {_esc(r.quantity)} | {_esc(r.published)} |"
            f" {_esc(r.ours)} | {_pct(r.error)} | {_pct(r.extra['leave_one_out_error'])} |"
            f" {_pct(r.extra['in_fit_error'])} | {_pct(r.extra['baseline_error'])} |"
            f" {r.status} | {_esc(r.source)} | {_esc(notes)} |"
        )
    out += _readings(rs)
    if folder is not None:
        out += [
            "",
            "### Fitted constants",
            "",
            (
                "Each constant's standard error comes from the Jacobian of the log"
                " residuals at the optimum; a relative error near or above 100% means the"
                " cases do not pin the constant down."
            ),
            "",
        ]
        out += constants_table(folder)
    return out


def _readings(rs: list[Result]) -> list[str]:
    """Each case's other plausible readings beside the one it keeps."""
    out = []
    alternatives = [r for r in rs if r.extra["readings"]]
    if alternatives:
        out += [
            "",
            "### Readings a source does not state",
            "",
            (
                "A case keeps the reading its assumptions give (first row, marked *as"
                " assumed*); each other plausible reading is predicted beside it with the"
                " shipped constants (in-fit), so the sensitivity shows and no reading is"
                " chosen by its error."
            ),
            "",
            "| id | reading | in-fit error |",
            "|---|---|---|",
        ]
        for r in alternatives:
            out.append(f"| {r.id} | as assumed | {_pct(r.extra['in_fit_error'])} |")
            out += [
                f"| {r.id} | {_esc(a['reading'])} | {_pct(a['error'])} |"
                for a in r.extra["readings"]
            ]
    return out


def _memory(rs: list[Result]) -> list[str]:
    """The memory cases by source, like the predicted ones, the count alone beside the
    prediction."""
    out = []
    out += [
        (
            "Mean and max are the absolute errors of the prediction, the reserve fitted"
            " with the peak's source left out; beside them the count alone's and the in-fit"
            " prediction's (the reserve fitted on every peak, the shipped one)."
        ),
        "",
        (
            "| source | peaks | within | mean | max | count alone: mean | count alone: max"
            " | in-fit mean |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for g, s in statistics(rs)["memory"]["sources"].items():
        out.append(
            f"| {g} | {s['count']} | {s['within']} | {_pct(s['mean'])} | {_pct(s['max'])} |"
            f" {_pct(s['count_mean'])} | {_pct(s['count_max'])} |"
            f" {_pct(s['in_fit_mean'])} |"
        )
    out += [
        "",
        (
            "| id | quantity | published | ours | error | count alone | its error | status"
            " | source | reason |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    out += [
        f"| {r.id} | {_esc(r.quantity)} | {_esc(r.published)} | {_esc(r.ours)} |"
        f" {_pct(r.error)} | {_esc(r.extra['count'])} | {_pct(r.extra['count_error'])} |"
        f" {r.status} | {_esc(r.source)} | {_esc(r.reason)} |"
        for r in rs
    ]
    return out


def _plain(rs: list[Result]) -> list[str]:
    """A row a case."""
    out = []
    out += [
        "| id | quantity | published | ours | error | status | source | reason |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        out.append(
            f"| {r.id} | {_esc(r.quantity)} | {_esc(r.published)} | {_esc(r.ours)} |"
            f" {_pct(r.error)} | {r.status} | {_esc(r.source)} | {_esc(r.reason)} |"
        )
    return out
