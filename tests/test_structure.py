"""Dependencies point down: no module of the package imports, at any depth, one that imports it
back."""

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "analytic"


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = p.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(name: str, path: Path, modules: dict) -> set[str]:
    """Modules of the package that ``name`` imports anywhere (function-level imports too)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found, text = set(), path.read_text()
    # no import statement, __import__ or importlib (the generated plan modules): nothing to walk
    if "import" not in text:
        return found
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(
                    package[: len(package) - node.level + 1]
                    + ([node.module] if node.module else [])
                )
            else:
                base = node.module or ""
            named = [f"{base}.{a.name}" for a in node.names]
            # `from . import x`: the submodule x
            for cand in named if node.module is None else [base] + named:
                if cand in modules and cand != name:
                    found.add(cand)
    return found


def test_the_import_graph_has_no_cycle():
    modules = _modules()
    # the package's own re-exports
    graph = {m: _imports(m, p, modules) - {"analytic"} for m, p in modules.items()}
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(m, path):
        state[m] = 1
        for n in sorted(graph[m]):
            assert state.get(n) != 1, "import cycle: " + " → ".join(path + [n])
            if n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    # the walk sees the package's imports
    assert "analytic.plan" in graph["analytic.search.layouts"]


#: the package's layers, lowest first: a module imports only from its own layer and those before it
LAYERS = [
    {"core"},
    {"formulas"},
    {"presets"},
    {"plan", "symbolic"},
    {"search", "strategies", "_hypothesis"},
    {"fit"},
    {"cli", "reference"},
    {"(root)"},
]


def _layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "(root)"
    return next(i for i, names in enumerate(LAYERS) if top in names)


def test_imports_point_down_the_layers():
    """core → formulas → presets → plan → search → fit → cli: no module imports from a later layer
    (the package itself imports only its errors; its public names are looked up by name when first
    used)."""
    modules = _modules()
    upward = [
        (m, n) for m, p in modules.items() for n in _imports(m, p, modules) if _layer(n) > _layer(m)
    ]
    assert upward == []
    assert {_layer(m) for m in modules} == set(range(len(LAYERS)))  # every layer has its modules


def test_no_function_of_the_library_is_over_80_lines():
    """A function fits on a screen: a long one is split into steps a reader can name."""
    import ast

    long = {}
    for p in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.end_lineno - node.lineno >= 80
            ):
                long[f"{p.relative_to(ROOT.parent)}:{node.name}"] = (
                    node.end_lineno - node.lineno + 1
                )
    assert long == {}


def test_plan_all_is_what_it_exports():
    import types

    import analytic.plan as plan

    public = {
        n
        for n in dir(plan)
        if not n.startswith("_") and not isinstance(getattr(plan, n), types.ModuleType)
    }
    assert set(plan.__all__) == public
    assert all(getattr(plan, n) is not None for n in plan.__all__)


def test_every_package_of_the_library_is_in_the_wheel():
    """pyproject.toml lists the packages (validation/ and derivations/ are mapped into the wheel),
    so a new subpackage must be listed too or installed users would lose it."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    listed = set(
        tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(p.parent.relative_to(root).parts) for p in (root / "analytic").rglob("__init__.py")
    }
    assert found <= listed, found - listed
    assert {"analytic.cases", "analytic.derivations"} <= listed


def _fresh(code: str, env=None) -> list[str]:
    """The lines a new interpreter prints running ``code`` (nothing imported before it)."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.splitlines()


def test_presets_layouts_and_their_check_need_neither_sympy_nor_the_catalogue():
    """A model and hardware read from the presets, a layout built and checked against them: plain
    numbers, exact where they are read (a share as a Fraction), with sympy and the catalogue never
    imported (a new interpreter); a mistake is still said (a layout the model's heads refuse)."""
    code = (
        "import sys, analytic as an\nfrom analytic.plan import check_layout\nm, h ="
        " an.model('llama3-405b'), an.hardware('h100-sxm')\nlay = an.Layout(tp=8, pp=16, dp=64,"
        " zero=2, sequence_parallel=True, offload_optimizer='0.25')\ncheck_layout(m, lay,"
        " seq_len=8192, global_batch=2048, microbatch_size=1,"
        " scale_up_domain=h.scale_up_domain)\ntry:\n    check_layout(m, lay.replace(tp=3),"
        " seq_len=8192, global_batch=2048, microbatch_size=1, scale_up_domain=8)\nexcept"
        " an.LayoutError as e:\n    print(e)\nprint(m.layers, m.head_dim,"
        " f\"{h.hbm.to('GB').magnitude:.2f}\", repr(lay.offload_optimizer))\nprint([k for k in"
        " sys.modules if k == 'sympy' or k.startswith('analytic.core.formula')])"
    )
    out = _fresh(code)
    assert out == [
        "tp: 3 does not divide the 128 attention heads",
        "126 128 85.52 Fraction(1, 4)",
        "[]",
    ]


def test_a_plans_numbers_and_the_commands_need_no_sympy(tmp_path):
    """A plan's step time (predicted and at an MFU), MFU, memory with every stage and the
    allocator's peak, communication and placement, and the step and memory commands' output, all
    without sympy imported: in a first interpreter, which builds its structure's programs from
    terms, and in a second that reads them from the cache; the inputs it reports are exact Python
    numbers."""
    code = (
        "import sys, io, contextlib, analytic as an\nfrom analytic.cli.main import main\np ="
        " an.Plan(an.model('llama3-405b'), an.hardware('h100-sxm'), an.Layout(tp=8, pp=16, dp=64,"
        " zero=1, sequence_parallel=True), seq_len=8192, global_batch=2048,"
        " training_tokens='15.6e12 token')\np.step_time(), p.step_time(mfu=0.4), p.mfu(),"
        " p.mfu(step_time='20 s'), p.memory_peak(), p.memory_by_stage()\np.communication_time(),"
        " p.placement(), p.time_breakdown(ops=True), p.sources('memory.total')\nwith"
        " contextlib.redirect_stdout(io.StringIO()):\n    codes = [main(['step']), main(['memory',"
        " '--stages']), main(['step', '--json'])]\nprint(codes, p.inputs['hbm'],"
        " repr(p.inputs['scale_up_latency']), [k for k in sys.modules if k == 'sympy'])"
    )
    env = {**os.environ, "ANALYTIC_CACHE": str(tmp_path)}
    assert not list(tmp_path.iterdir())
    assert _fresh(code, env) == ["[0, 0, 0] 85520809984 Fraction(17, 5000000) []"]
    assert list(tmp_path.iterdir())  # the programs built
    assert _fresh(code, env) == ["[0, 0, 0] 85520809984 Fraction(17, 5000000) []"]


def test_importing_the_package_and_its_command_imports_neither_sympy_pint_nor_numpy():
    """The package's names are imported when first used: ``import analytic`` and the command's
    module pay for none of the heavy libraries; a public name whose submodule of the same name was
    imported first still resolves to the API (analytic.search is the function, not the package)."""
    code = (
        "import sys, analytic, analytic.cli.main\nprint([m for m in ('sympy', 'pint', 'numpy') if m"
        " in sys.modules])\nimport"
        " analytic.search.layouts\nprint(analytic.model('llama3-8b').layers,"
        " analytic.hardware('h100-sxm').sms, analytic.search.__name__)\nprint(sorted(n for n in"
        " analytic.__all__ if n not in dir(analytic) or getattr(analytic, n) is None))"
    )
    out = _fresh(code)
    assert out == ["[]", "32 132 search", "[]"]
