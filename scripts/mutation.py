"""Mutation testing of the formula catalogue.

Each catalogue formula is declared as a sympy expression, so its mutants are made on the
expression itself: every numeric constant c becomes c + 1, every exponent e becomes e + 1, every
sum a + b becomes a − b, and every product a·b becomes a/b (one change per mutant). A mutant is
installed in the catalogue and the tests that read the catalogue run in this process; the mutant is
killed when one fails. Mutants whose expression equals the original after simplification are
equivalent and are not run. Survivors are listed with their expression.

Usage: python scripts/mutation.py [--only PREFIX] [--from NAME] [--out mutation-report.md]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import sys
import time
from pathlib import Path

import pytest
import sympy

ROOT = Path(__file__).resolve().parent.parent
# every test file that reads the catalogue, directly or through plans, fastest first: the validation
# tests, which refit the calibration, take most of a run. Not here: the tests of the plans' programs
# and of search, which hold the programs to the catalogue's expressions
TESTS = [
    "tests/test_catalogue.py",
    "tests/test_formula.py",
    "tests/test_precisions.py",
    "tests/test_muon.py",
    "tests/test_presets.py",
    "tests/test_hybrid.py",
    "tests/test_moe_folding.py",
    "tests/test_seed_numbers.py",
    "tests/test_megatron_core_count.py",
    "tests/test_reserve.py",
    "tests/test_plan_sources.py",
    "tests/test_ops.py",
    "tests/test_reference_pipeline.py",
    "tests/test_reference_saved.py",
    "tests/test_quantized_saved.py",
    "tests/test_reference_counting.py",
    "tests/test_reference_checkpointing.py",
    "tests/test_outside.py",
    "tests/test_sweep_and_plots.py",
    "derivations/test_derivations.py",
    "tests/test_strategies.py",
    "tests/test_overlap.py",
    "tests/test_fuzz.py",
    "tests/test_reference_calibrate.py",
    "tests/test_plan.py",
    "tests/test_reference_context_parallel.py",
    "tests/test_symbolic.py",
    "tests/test_reference_loss.py",
    "tests/test_reference_collectives.py",
    "tests/test_reference_step_memory.py",
    "tests/test_reference_optimizer_traffic.py",
    "validation/test_validation.py",
]


def mutants(expr):
    """(description, mutated expression) for one change at a time."""
    out = []

    def walk(node, rebuild):
        if node.is_Number:
            out.append((f"constant {node} → {node + 1}", rebuild(node + 1)))
            return
        if not node.args or isinstance(node, sympy.Symbol):
            return
        if isinstance(node, sympy.Pow):
            base, exp = node.args
            out.append((f"exponent {exp} → {exp + 1} in {node}", rebuild(sympy.Pow(base, exp + 1))))
        if isinstance(node, sympy.Add) and len(node.args) > 1:
            first, rest = node.args[0], node.args[1:]
            out.append((f"'+' → '−' in {node}", rebuild(sympy.Add(-first, *rest))))
        if isinstance(node, sympy.Mul) and len(node.args) > 1:
            factors = [a for a in node.args if not a.is_Number]
            if factors:
                f = factors[-1]
                others = list(node.args)
                others.remove(f)
                out.append((f"'×' → '÷' in {node}", rebuild(sympy.Mul(*others) / f)))
        for i, arg in enumerate(node.args):

            def sub(new, node=node, i=i):
                args = list(node.args)
                args[i] = new
                return rebuild(node.func(*args))

            walk(arg, sub)

    walk(expr, lambda new: new)
    return out


def survives(name: str, checked_by: dict, killers: dict) -> bool:
    """Cheapest checks first: the derivations that check this formula, then every validation case,
    then the tests that killed an earlier mutant of it (``killers``), then the test files that read
    the catalogue. False as soon as one fails; the failing test is added to ``killers``."""
    from analytic.fit import derive, validation

    for d in checked_by.get(name, []):
        try:
            derive.load(d)
        except Exception:  # an assertion of the derivation, or the algebra breaking on the mutant
            return False
    try:
        if any(
            r.status != r.expected for r in validation.run(ROOT / "validation", predicted=False)
        ):
            return False
    except Exception:
        return False
    known = killers.setdefault(name, [])
    if known and not run_tests(known):
        return False
    failed = []
    if run_tests(TESTS, failed):
        return True
    known.extend(failed)
    return False


class _Failures:
    """A pytest plugin that records the node ids of the tests that fail."""

    def __init__(self, into: list):
        self.into = into

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.into.append(report.nodeid)


def run_tests(tests=TESTS, failed: list | None = None) -> bool:
    """True when every test of ``tests`` passes; the ids of those that fail are appended to
    ``failed``."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        code = pytest.main(
            ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests],
            plugins=[_Failures([] if failed is None else failed)],
        )
    return code == 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--only",
        default="",
        help="formula names starting with this (or any of these, comma-separated)",
    )
    ap.add_argument(
        "--from", dest="start", default="", help="formula names from this one on, in sorted order"
    )
    ap.add_argument("--out", default=str(ROOT / "mutation-report.md"))
    args = ap.parse_args()
    os.chdir(ROOT)
    os.environ.setdefault("HYPOTHESIS_PROFILE", "default")
    from analytic.fit import derive
    from analytic.plan import programs

    # the catalogue is mutated in this process, under the library's digest: programs lowered from it
    # once would answer every later mutant, so plans take the mutated expressions themselves
    # (tests/test_programs.py holds the programs to the expressions)
    programs.bundle = lambda inp, lower=None, build=None: None
    from analytic.formulas._catalogue import CATALOGUE

    if not run_tests():
        print("the unmutated suite fails; fix it first", file=sys.stderr)
        return 1
    checked_by = {}
    for d in derive.names():
        for formula_name, _ in derive.load(d).checks:
            checked_by.setdefault(formula_name, []).append(d)
    killed, survived, equivalent, killers = [], [], [], {}
    start = time.time()
    names = [
        n
        for n in sorted(CATALOGUE)
        if n.startswith(tuple(args.only.split(","))) and n >= args.start
    ]
    for name in names:
        original = CATALOGUE[name]
        for desc, new in mutants(original.expr):
            if sympy.simplify(new - original.expr) == 0:
                equivalent.append((name, desc))
                continue
            CATALOGUE[name] = dataclasses.replace(original, expr=new)
            try:
                ok = survives(name, checked_by, killers)
            finally:
                CATALOGUE[name] = original
            (survived if ok else killed).append((name, desc, new))
            print(f"{'SURVIVED' if ok else 'killed  '} {name}: {desc}", flush=True)
    total = len(killed) + len(survived)
    score = 100.0 * len(killed) / total if total else 100.0
    lines = [
        "# Mutation testing of the formula catalogue",
        "",
        (
            f"{len(names)} formulas, {total} non-equivalent mutants, {len(killed)} killed:"
            f" **{score:.1f}%** ({len(equivalent)} equivalent mutants skipped;"
            f" {time.time() - start:.0f} s)."
        ),
        "",
        "## Survivors",
        "",
    ]
    lines += [f"- `{n}`: {d} → `{e}`" for n, d, e in survived] or ["none"]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"score {score:.1f}% ({len(killed)}/{total}); report in {args.out}")
    return 0 if not survived else 1


if __name__ == "__main__":
    sys.exit(main())
