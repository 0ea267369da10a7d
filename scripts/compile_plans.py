"""Write analytic/compiled/: one module per plan structure the library ships compiled.

The structures are those of every preset model on every preset hardware (each training dtype,
sequence parallelism on and off, each stack; ZeRO-3 gathering per block and, with the default stack,
per tensor), of the validation cases' plans and of the golden plans; a plan of another structure
takes the symbolic path. Rerun after any change to the sources
named by ``analytic.compiled.SOURCES`` (tests/test_compiled.py says when it is due).

Usage: python scripts/compile_plans.py [--check] [--jobs N]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import analytic as an
from analytic import compiled
from analytic.calibration import build_plan
from analytic.errors import AnalyticError
from analytic.plan.structure import structure
from analytic.plan.template import module_source
from analytic.validation import find_folder, load

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "analytic" / "compiled"


def plans():
    """Every plan whose structure is shipped compiled."""
    for model, hardware in itertools.product(an.models(), an.hardwares()):
        for dtype, sp, stack, gather in itertools.product(("bf16", "fp8"), (True, False), an.stacks(),
                                                          ("per-block", "per-tensor")):
            if gather == "per-tensor" and stack != "megatron-core":
                continue
            try:
                yield an.Plan(an.model(model), an.hardware(hardware),
                              an.Layout(tp=2, sequence_parallel=sp, zero3_gather=gather), seq_len=2048, global_batch=64,
                              dtype=dtype, stack=stack)
            except AnalyticError:  # a dtype the hardware does not train in, a stack without the model's attention
                continue
    cases, tables = load(find_folder())
    specs = list(tables.values()) + [c["plan"] for c in cases if "plan" in c]
    for spec in specs:
        try:
            yield build_plan(spec)
        except AnalyticError:
            continue
    sys.path.insert(0, str(ROOT / "scripts"))
    from golden_plans import plans as golden
    yield from golden().values()


def structures() -> dict:
    """structure → a plan of it."""
    out = {}
    for plan in plans():
        key = structure(plan._in)
        if key is not None:
            out.setdefault(key, plan)
    return dict(sorted(out.items()))


def _source(item) -> tuple[str, str]:
    key, plan = item
    return compiled.module_name(key), module_source(plan, key)


def index_source(keys) -> str:
    lines = ['"""The plan structures shipped compiled, and the digest of the sources they were compiled from.',
             "", 'Written by scripts/compile_plans.py; do not edit."""', "",
             f"DIGEST = {compiled.source_digest()!r}", "STRUCTURES = frozenset({"]
    lines += [f"    {k!r}," for k in keys] + ["})", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    found = structures()
    with ProcessPoolExecutor(args.jobs) as pool:
        sources = {name: text for name, text in pool.map(_source, found.items()) if text is not None}
    found = {k: v for k, v in found.items() if compiled.module_name(k) in sources}
    sources["_index"] = index_source(found)
    wanted = {f"{name}.py" for name in sources} | {"__init__.py"}
    if args.check:
        stale = [n for n, text in sources.items() if not (OUT / f"{n}.py").exists()
                 or (OUT / f"{n}.py").read_text() != text]
        extra = sorted(p.name for p in OUT.glob("*.py") if p.name not in wanted)
        for name in stale + extra:
            print(f"{name}: not current")
        return 1 if stale or extra else 0
    for path in OUT.glob("p_*.py"):
        if path.name not in wanted:
            path.unlink()
    for name, text in sources.items():
        (OUT / f"{name}.py").write_text(text)
    print(f"{len(found)} structures compiled into {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
