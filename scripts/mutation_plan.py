"""Mutation testing of analytic/plan/ (or one module of analytic/ given with --module): does the
suite notice a changed operator, comparison or constant?

Each mutant changes one site of one module of the package analytic/plan/ (its syntax tree): + ↔ −,
× ↔ ÷, < ↔ ≤, > ↔ ≥, == ↔ !=, and each numeric constant c → c + 1. Sites inside f-strings and
raise statements (messages) are left alone. The mutated package is written to a temporary copy of
the checkout and the tests that read plans run there (``-x``: the first failure kills the mutant; a
mutant that runs past the time limit counts as killed). Survivors are listed with their place.

Usage: python scripts/mutation_plan.py [--only NAME | --module PATH] [--tests FILE ...] [--lines
SPANS]
                                      [--sample N] [--out mutation-plan-report.md]
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "analytic" / "plan"
TESTS = [
    "tests/test_golden_plans.py",
    "tests/test_programs.py",
    "tests/test_ops.py",
    "tests/test_plan.py",
    "tests/test_plan_sources.py",
    "tests/test_symbolic.py",
    "tests/test_trust_inputs.py",
    "tests/test_cli.py",
    "tests/test_search.py",
    "tests/test_reference_loss.py",
    "tests/test_reference_checkpointing.py",
    "tests/test_reference_saved.py",
]
SWAP_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
SWAP_CMP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}
TIMEOUT = 300


def _skipped(tree: ast.AST) -> set[int]:
    """ids of nodes inside f-strings, raise statements and docstrings."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.JoinedStr, ast.Raise)):
            out.update(id(n) for n in ast.walk(node))
    return out


def sites(path: Path) -> list[tuple[int, int, str]]:
    """(index, line, description) of every mutation site of a module, in walk order."""
    tree = ast.parse(path.read_text())
    skip = _skipped(tree)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.BinOp) and type(node.op) in SWAP_BIN:
            out.append(
                (node.lineno, f"{type(node.op).__name__} → {SWAP_BIN[type(node.op)].__name__}")
            )
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in SWAP_CMP:
            out.append(
                (
                    node.lineno,
                    f"{type(node.ops[0]).__name__} → {SWAP_CMP[type(node.ops[0])].__name__}",
                )
            )
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            out.append((node.lineno, f"constant {node.value} → {node.value + 1}"))
    return [(i, line, f"line {line}: {what}") for i, (line, what) in enumerate(out)]


def mutate(path: Path, index: int) -> str:
    """The module's source with site ``index`` changed."""
    tree = ast.parse(path.read_text())
    skip = _skipped(tree)
    k = 0
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.BinOp) and type(node.op) in SWAP_BIN:
            if k == index:
                node.op = SWAP_BIN[type(node.op)]()
            k += 1
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in SWAP_CMP:
            if k == index:
                node.ops = [SWAP_CMP[type(node.ops[0])]()]
            k += 1
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            if k == index:
                node.value = node.value + 1
            k += 1
    return ast.unparse(tree)


def run_tests(root: Path, module: str = "", tests: list[str] = TESTS) -> str:
    """ "killed", "survived" or "timeout" for the checkout at ``root`` (``tests``: the test files
    run)."""
    env = dict(
        os.environ, PYTHONPATH=str(root), ANALYTIC_CACHE=str(root / ".cache"),
        HYPOTHESIS_PROFILE="default",
    )
    try:
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    return "survived" if r.returncode == 0 else "killed"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="module name (e.g. timing)")
    ap.add_argument(
        "--module", default="", help="one module of analytic/ instead (e.g. analytic/reserve.py)"
    )
    ap.add_argument("--tests", nargs="+", default=TESTS, help="the test files run on each mutant")
    ap.add_argument(
        "--sample", type=int, default=0, help="run this many mutants drawn at random (seed 0)"
    )
    ap.add_argument("--lines", default="", help="only the sites on these lines (e.g. 126-136,210)")
    ap.add_argument("--out", default=str(ROOT / "mutation-plan-report.md"))
    args = ap.parse_args()
    if args.module:
        module = (ROOT / args.module).resolve()
        if (
            module.suffix != ".py"
            or not module.is_file()
            or (ROOT / "analytic") not in module.parents
        ):
            ap.error(f"--module: expected a Python module under analytic/, got {args.module!r}")
        modules = [module]
    else:
        modules = sorted(
            p for p in PLAN.glob("*.py") if p.name != "__init__.py" and args.only in p.stem
        )
    todo = [(p, i, line, d) for p in modules for i, line, d in sites(p)]
    if args.lines:
        try:  # each span "a-b", or one line "a"
            spans = [
                (int(span.split("-")[0]), int(span.split("-")[-1]))
                for span in args.lines.split(",")
                if span.count("-") <= 1
            ]
        except ValueError:
            spans = []
        if len(spans) != len(args.lines.split(",")):
            ap.error(f"--lines: expected lines and spans such as 126-136,210, got {args.lines!r}")
        todo = [t for t in todo if any(a <= t[2] <= b for a, b in spans)]
    if args.sample:
        todo = random.Random(0).sample(todo, min(args.sample, len(todo)))
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "checkout"
        shutil.copytree(
            ROOT, root, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".cache")
        )
        if run_tests(root, tests=args.tests) != "survived":
            print("the unmutated tests fail; fix them first", file=sys.stderr)
            return 1
        results = []
        for path, index, _, desc in todo:
            target = root / path.relative_to(ROOT)
            original = target.read_text()
            target.write_text(mutate(path, index))
            outcome = run_tests(root, path.name, args.tests)
            target.write_text(original)
            results.append((path.name, desc, outcome))
            print(f"{outcome:<9} {path.name} {desc}", flush=True)
    killed = sum(r[2] != "survived" for r in results)
    score = 100 * killed / len(results) if results else 100.0
    lines = [
        f"# Mutation testing of {args.module or 'analytic/plan/'}",
        "",
        (
            f"{len(results)} mutants{' (a random sample)' if args.sample else ''}, {killed} killed:"
            f" **{score:.1f}%** ({time.time() - start:.0f} s). Tests: {', '.join(args.tests)}."
        ),
        "",
        "## Survivors",
        "",
    ]
    lines += [f"- `{m}` {d}" for m, d, o in results if o == "survived"] or ["none"]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"score {score:.1f}% ({killed}/{len(results)}); report in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
