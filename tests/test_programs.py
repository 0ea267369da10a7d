"""A plan structure's programs (analytic.plan.programs): built on first use, kept as data, equal to
the expressions for any structure, used only where they answer, and the same for search."""

import dataclasses
import importlib
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import analytic as an
from analytic.core import cache
from analytic.core.errors import InputError
from analytic.core.numeric import ARITY, SCALAR, numpy_ops
from analytic.plan import programs, template
from analytic.plan.structure import structure
from analytic.strategies import plans

PROGRAMS = importlib.import_module("analytic.search.programs")


def essay(**kw):
    return an.Plan(
        an.model("llama3-405b"),
        an.hardware("h100-sxm"),
        an.Layout(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True),
        seq_len=8192,
        global_batch=2048,
        **kw,
    )


def deepseek():
    return an.Plan(
        an.model("deepseek-v3"),
        an.hardware("h800"),
        an.Layout(pp=16, dp=128, ep=64, zero=1, schedule="dualpipe", comm_sms=20),
        seq_len=4096,
        global_batch=15360,
        dtype="fp8",
        training_tokens="14.8e12 token",
        stack="hai-llm",
    )


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty cache, in memory and on disk; each structure's programs built by its first plan."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    monkeypatch.setattr(programs, "_BUNDLES", {})
    PROGRAMS._COMPILED.clear()
    return tmp_path


def test_a_structures_first_plan_builds_its_programs_and_every_plan_gives_the_same_bits(
    tmp_path, monkeypatch
):
    """The first plan of a structure in a process builds its programs from terms (no sympy), the
    later ones read them from memory, and every one gives the same bits."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    monkeypatch.setattr(programs, "_BUNDLES", {})
    plans = [essay() for _ in range(3)]
    steps = {p.step_time().magnitude for p in plans}
    assert len(steps) == 1
    assert plans[0]._numbers.bundle is not None and not plans[0]._exprs
    assert plans[2]._numbers.bundle is plans[0]._numbers.bundle
    assert len(list(tmp_path.glob("plan-*.json"))) == 1


@settings(max_examples=25, deadline=None)
@given(asks=st.lists(st.integers(0, 10_000), min_size=1, max_size=12))
def test_quantities_asked_in_any_order_have_the_bits_of_the_whole_program(asks):
    """A plan's quantities computed as they are asked, in any order and any number (the program's
    registers past its kept states included), equal the whole program run at once, bit for bit;
    one quantity asked alone runs only the steps it reads."""
    part = essay()._numbers.bundle.quantities
    values = essay()._numbers._values
    whole = part.finite(values)
    hit = part.lazily(values)
    for k in asks:
        name = part.outputs[k % len(part.outputs)]
        assert hit(name) == whole.get(name)
    prog = part.program
    regs = prog.lazily([values.get(k, math.nan) for k in prog.inputs])
    i = part.outputs.index("flops")
    computed = regs.ask((i,))[len(prog.inputs) + len(prog.constants) :]
    assert 0 < sum(r is not None for r in computed) < len(prog.steps) / 10


def test_quantities_asked_on_several_threads_have_the_bits_of_the_whole_program(monkeypatch):
    """Registers of one program filled on eight threads at once, each asking in its own order,
    from a program that has remembered no state yet."""
    from concurrent.futures import ThreadPoolExecutor

    part = essay()._numbers.bundle.quantities
    values = essay()._numbers._values
    fresh_states = {"masks": [bytearray(len(part.program.steps))], "index": {}}
    monkeypatch.setitem(part.program.__dict__, "_asked", fresh_states)
    whole = part.finite(values)
    names = list(part.outputs)

    def asks(k: int) -> bool:
        hit = part.lazily(values)
        order = names[k:] + names[:k]
        return all(hit(n) == whole.get(n) for n in order)

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(asks, range(0, 64, 8)))


def test_past_the_kept_states_the_registers_run_the_whole_program(monkeypatch):
    """A program that has kept its most states runs the whole of itself for later sequences of
    asks, with the same bits."""
    from analytic.core import numeric

    part = essay()._numbers.bundle.quantities
    values = essay()._numbers._values
    monkeypatch.setattr(numeric, "MAX_STATES", 1)
    fresh_states = {"masks": [bytearray(len(part.program.steps))], "index": {}}
    monkeypatch.setitem(part.program.__dict__, "_asked", fresh_states)
    hit = part.lazily(values)
    assert hit("step_time") == part.finite(values)["step_time"]
    assert hit("flops") == part.finite(values)["flops"]


def test_the_programs_are_built_once_and_kept_as_data(fresh):
    """The first plan of a structure writes its programs to the cache as JSON of numbers and names;
    a second process reads them, builds no expression and prints the same numbers."""
    want = essay().step_time().magnitude
    files = sorted(fresh.glob("plan-*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert data["structure"] == structure(essay()._in)
    steps = data["programs"]["quantities"]["program"]["steps"]
    assert {op for op, _ in steps} <= set(ARITY)
    code = (
        "import analytic as an, sys; p = an.Plan(an.model('llama3-405b'), an.hardware('h100-sxm'),"
        " an.Layout(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True), seq_len=8192,"
        " global_batch=2048); print(repr(p.step_time().magnitude)); print('sympy' in sys.modules,"
        " bool(p._exprs))"
    )
    env = {**__import__("os").environ, "ANALYTIC_CACHE": str(fresh)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert out.split() == [repr(want), "False", "False"]


@pytest.mark.parametrize(
    "content",
    [
        "[1, 2, 3]",
        "{}",
        "def f(): pass",
        "\x00",
        "[" * 100_000 + "]" * 100_000,
        json.dumps({"structure": "other", "programs": {}}),
    ],
    ids=["list", "empty", "python", "nul", "deep", "other-structure"],
)
def test_a_corrupt_cache_entry_is_not_read(tmp_path, monkeypatch, content):
    """Whatever an entry holds that is not a structure's programs, a plan does not take it: it
    builds the programs anew, over it, and gives the step of the golden record
    (tests/golden/plans.json)."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    monkeypatch.setattr(programs, "_BUNDLES", {})
    path = cache.entry("plan", structure(essay()._in))
    path.write_text(content)
    plan = essay()
    golden = json.loads((Path(__file__).parent / "golden" / "plans.json").read_text())["essay"][
        "step_time"
    ]
    assert plan.step_time().to("s").magnitude == pytest.approx(golden["value"], rel=1e-12)
    assert plan._numbers.bundle is not None and json.loads(path.read_text())[
        "structure"
    ] == structure(plan._in)


def test_a_corrupt_cache_entry_is_rebuilt(fresh, monkeypatch):
    want = essay().step_time()
    (path,) = fresh.glob("plan-*.json")
    path.write_text("def f(): pass")
    monkeypatch.setattr(programs, "_BUNDLES", {})
    assert essay().step_time() == want
    assert json.loads(path.read_text())["structure"] == structure(essay()._in)


def test_a_unit_that_is_not_a_unit_name_is_refused(fresh, monkeypatch):
    essay().step_time()
    (path,) = fresh.glob("plan-*.json")
    data = json.loads(path.read_text())
    sources = data["programs"]["sources"]
    bare = {**data["programs"], "sources": {**sources, "conditional": [], "program": None}}
    # a structure drawing on no source by condition
    assert programs.Bundle.from_json(bare).source_conditions is None
    with pytest.raises(ValueError, match="one condition per conditional source"):
        programs.Bundle.from_json({**data["programs"], "sources": {**sources, "program": None}})
    data["programs"]["quantities"]["units"][0] = "9**9**9**9"
    with pytest.raises(ValueError, match="unit names"):
        programs.Bundle.from_json(data["programs"])


def test_a_cache_entry_that_is_a_link_is_not_followed(fresh, monkeypatch, tmp_path_factory):
    """A link planted at an entry's name: read as missing, and replaced by a file (its target
    untouched)."""
    key = structure(essay()._in)
    path = cache.entry("plan", key)
    target = tmp_path_factory.mktemp("target") / "victim"
    target.write_text("keep")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    essay().step_time()
    assert target.read_text() == "keep"
    assert not path.is_symlink() and json.loads(path.read_text())["structure"] == key
    assert not list(fresh.glob("*.tmp")) and not list(fresh.glob(".*.tmp"))


def test_a_read_only_cache_costs_only_the_build(fresh, monkeypatch):
    monkeypatch.setenv("ANALYTIC_CACHE", "/proc/analytic-cannot-write-here")
    assert essay().step_time().magnitude > 0


def _close(got: float, want: float, scale: float) -> bool:
    return abs(got - want) <= 1e-12 * max(abs(want), scale) + 1e-300


@given(plans(gpus=16), st.sampled_from(["bf16", "fp8"]), st.booleans())
@settings(max_examples=5, deadline=None)
def test_the_programs_equal_the_expressions(plan, dtype, tokens):
    """Every quantity (and the catalogue formulas it is composed from) and every stage's memory,
    from the programs of a drawn plan's structure and from the plan's expressions, to 1e-12 (a
    difference of large numbers, such as the headroom or a bubble that is zero, relative to the
    scale of what it subtracts: the HBM, the step time, one)."""
    try:
        plan = plan.replace(dtype=dtype, training_tokens="1e12 token" if tokens else None)
    except InputError:  # no FP8 on this hardware
        return
    _programs_equal_expressions(plan)


def test_the_programs_of_a_split_with_the_ends_as_layers_equal_the_expressions():
    """Llama 3 405B as it ran (interleaved, a layer a chunk, the ends counted as layers: (L + 2)/p a
    stage, the end stages a layer fewer), whose split the programs take in closed form."""
    layout = an.Layout(
        tp=8, pp=16, dp=64, zero=2, sequence_parallel=True, schedule="interleaved", vpp=8,
        ends_as_layers=True,
    )
    _programs_equal_expressions(
        an.Plan(
            "llama3-405b", "h100-sxm", layout, seq_len=8192, global_batch=2048, stack="llama3-meta"
        )
    )


def _programs_equal_expressions(plan):
    c = programs.Numbers(plan._in, lambda: template.build(plan))
    assert c.bundle is not None, f"no programs for {plan!r}"
    scale = {
        "byte": plan.hardware.hbm.to("byte").magnitude,
        "second": c.quantity("step_time").magnitude,
        "dimensionless": 1.0,
    }  # what a difference of large numbers is measured against
    for name in plan.quantities():
        try:
            want = plan.expr(name).value()
        except InputError:  # e.g. steps without training tokens: NaN in the programs, and not given
            assert not c.has(name) and c.quantity(name) is None
            continue
        got = c.quantity(name)
        # the branches the plan takes
        assert c.sources(name) == sorted(plan.expr(name).sources), name
        assert got.units == want.units or want.dimensionless, name
        assert _close(got.magnitude, want.magnitude, scale.get(str(want.units), 0)), (
            name,
            got,
            want,
        )
    for k in range(int(plan.layout.pp)):
        parts = c.stage(k)
        for part, f in plan._stage(k).items():
            assert _close(parts[part].to("byte").magnitude, f.value().to("byte").magnitude, 0), (
                k,
                part,
            )


def test_a_plan_with_programs_builds_no_expression(fresh):
    plan = deepseek()
    plan.memory(), plan.memory_by_stage(), plan.step_time(), plan.time_breakdown(
        ops=True
    ), plan.mfu()
    plan.communication(), plan.communication_time(), plan.hardware_flops(), plan.model_flops("palm")
    assert plan.gpus == 2048 and plan.microbatches == 120
    # DualPipe's mirror stage, no TP or CP traffic (tp = cp = 1), ZeRO-1's reduce-scatter and
    # all-gather
    assert "pipeline.mirror_stage.dualpipe" in plan.sources("memory.weights")
    assert plan.sources("communication.tp") == plan.sources("communication.cp") == []
    dp = plan.sources("communication.dp")
    assert (
        "collectives.reduce_scatter.bytes_sent" in dp
        and "collectives.all_reduce.bytes_sent" not in dp
    )
    # each from its own parts; the fullest are the ranks of the first and last
    stages = plan.memory_by_stage()
    # stages (DualPipe: both hold embedding, head, MTP)
    fullest = max(range(16), key=lambda k: stages[k].total)
    assert fullest == 0 and stages[15].total == stages[0].total > stages[1].total
    assert plan.memory().stage == 0 and plan.memory().total == stages[0].total
    assert plan._exprs == {}
    assert plan.expr("step_time").value().magnitude == pytest.approx(
        plan.step_time().magnitude, rel=1e-12
    )


def test_a_plan_with_programs_names_its_fullest_stage_when_it_is_the_last(fresh):
    """Llama 3 8B over 4 stages with full recomputation keeps only layer inputs, so the last stage,
    which also takes the loss of a 128,256-entry vocabulary, is the fullest: the worst stage a
    plan's programs name is the one its stage-by-stage parts (another path) put highest."""
    plan = an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(pp=4, dp=2, recompute="full"),
        seq_len=8192, global_batch=64,
    )
    assert plan._numbers.bundle is not None
    totals = [m.total for m in plan.memory_by_stage()]
    assert max(range(4), key=totals.__getitem__) == 3 and totals[3] > totals[0]
    assert plan.memory().stage == 3 and plan.memory().total == totals[3]


def test_the_command_line_prints_the_same_bits_from_an_empty_and_a_warm_cache(tmp_path):
    """`analytic step --json` builds its structures' programs at a first run (from terms: no sympy)
    and reads them at the next: the two print the same text, every digit."""
    import os

    env = {**os.environ, "ANALYTIC_CACHE": str(tmp_path)}
    code = (
        "import sys, io, contextlib\nfrom analytic.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out: main(['step', '--json'])\n"
        "print(out.getvalue()); print('sympy' in sys.modules)"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        ).stdout
        for _ in range(2)
    ]
    assert list(tmp_path.glob("plan-*.json"))
    assert runs[0] == runs[1] and runs[0].endswith("False\n") and len(runs[0]) > 1000


def test_programs_of_other_sources_are_not_used(fresh, monkeypatch):
    """An edited library: its digest differs, so the programs built for the old one are not read,
    and the numbers are the same."""
    want = essay().step_time()
    monkeypatch.setattr(cache, "library_digest", lambda: "edited")
    monkeypatch.setattr(programs, "_BUNDLES", {})
    plan = essay()
    assert plan.step_time() == want
    assert len(list(fresh.glob("plan-*.json"))) == 2


def test_what_the_programs_cannot_give_is_the_expressions_error(fresh):
    """Without training tokens the run's days are NaN in the programs, so the plan asks its
    expressions, which say what is missing; a hardware without a scale-up bandwidth likewise."""
    plan = essay()
    assert not plan._numbers.has("steps") and plan._numbers.has("step_time")
    with pytest.raises(InputError, match="training_tokens"):
        plan.value("steps")
    bare = dataclasses.replace(an.hardware("h100-sxm"), key="", name="bare", scale_up=None)
    plan = an.Plan(an.model("llama3-8b"), bare, an.Layout(tp=8), seq_len=4096, global_batch=64)
    assert plan._numbers.has("memory.total") and not plan._numbers.has("step_time")
    assert plan._numbers.count("gpus") == 8 and isinstance(plan._numbers.count("gpus"), int)
    with pytest.raises(InputError, match="scale up bandwidth"):
        plan.step_time()


def test_a_new_model_of_a_known_architecture_searches_without_a_build(fresh):
    """Once plans of the structures have built their programs (with sequence parallelism, for tp >
    1, and without, for tp = 1), a search of another model of them builds nothing."""
    for layout in (an.Layout(tp=2, sequence_parallel=True), an.Layout(tp=1)):
        an.Plan(
            an.model("llama3-8b"), an.hardware("h100-sxm"), layout, seq_len=4096, global_batch=128
        ).step_time()
    model = an.model("llama3-8b").replace(
        layers=20, hidden=3072, heads=24, kv_heads=8, ffn_hidden=8192, head_dim=None, name="mine"
    )
    res = an.search(
        model, an.hardware("h100-sxm"), gpus=32, seq_len=4096, global_batch=128, progress=False
    )
    assert res.compiled is False and not list(fresh.glob("search-*.json"))
    best = res.best
    plan = best.plan(model, an.hardware("h100-sxm"), seq_len=4096, global_batch=128)
    assert best.step_time == pytest.approx(plan.expr("step_time").value().magnitude, rel=1e-12)
    assert best.memory == pytest.approx(plan.expr("memory.total").value().magnitude, rel=1e-12)


_EDGES = [0.0, -0.0, 1.0, -2.5, 3.0, 1e308, -1e308, math.inf, -math.inf, math.nan, 0.5, 7.0]


@pytest.mark.parametrize("op", sorted(ARITY))
def test_the_scalar_kernels_are_numpys_on_edge_values(op):
    """Each operation on Python floats gives what numpy gives (NaN where numpy gives NaN), so one
    plan and many layouts get the same numbers."""
    fn, arity = numpy_ops()[op]
    scalar = getattr(SCALAR, op)
    n = arity or 2
    rng = np.random.default_rng(0)
    for _ in range(200):
        args = [float(x) for x in rng.choice(_EDGES, size=n)]
        if op == "gcd" and not all(math.isfinite(a) and abs(a) < 1e15 for a in args):
            continue  # integers only (group sizes)
        with np.errstate(all="ignore"):
            want = fn(*[np.float64(a) for a in args])
        got = scalar(*args)
        if isinstance(want, np.ndarray):
            want = want.item()
        want = float(want)
        assert (math.isnan(got) and math.isnan(want)) or got == want, (op, args, got, want)


def test_a_plan_read_from_programs_in_the_cache_imports_no_numpy(tmp_path):
    """The programs a first process wrote to the cache run on Python floats in the next: `analytic
    step` and `memory` with a warm cache import no numpy (nor sympy, nor pint)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "ANALYTIC_CACHE": str(tmp_path)}
    write = (
        "import analytic as an\nan.Plan('llama3-405b', 'h100-sxm', an.Layout(tp=8, pp=16, dp=64,"
        " zero=1, sequence_parallel=True), seq_len=8192, global_batch=2048).step_time()\n"
    )
    subprocess.run([sys.executable, "-c", write], env=env, check=True, capture_output=True)
    assert any(p.name.startswith("plan-") for p in tmp_path.iterdir())
    read = (
        "import sys, io, contextlib\nfrom analytic.cli.main import main\nwith"
        " contextlib.redirect_stdout(io.StringIO()): codes = [main(['step']),"
        " main(['memory'])]\nprint(codes, sorted({m.split('.')[0] for m in sys.modules} & {'pint',"
        " 'numpy', 'sympy'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", read], env=env, check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[0, 0] []"


def test_a_recipe_other_than_the_stacks_has_programs_of_its_own():
    """The structure's programs of a blockwise plan are lowered from a blockwise template: its
    numbers from them are the plan's own, and differ from delayed scaling's."""
    steps = {}
    for recipe in ("delayed", "blockwise"):
        plan = an.Plan(
            "llama3-70b",
            "h100-sxm",
            an.Layout(tp=4, pp=2, dp=8, zero=1, sequence_parallel=True),
            seq_len=8192,
            global_batch=512,
            dtype="fp8",
            fp8_recipe=recipe,
        )
        numbers = programs.Numbers(plan._in, lower=lambda plan=plan: template.build(plan))
        steps[recipe] = numbers.quantity("step_time").to("s").magnitude
        assert steps[recipe] == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-12)
    assert steps["blockwise"] > steps["delayed"]


@pytest.mark.parametrize(
    "plan_kw",
    [
        dict(
            model="qwen3-30b-a3b",
            layout=dict(tp=2, pp=4, dp=32, ep=8, etp=1, zero=1, sequence_parallel=True),
        ),
        dict(
            model="qwen3-30b-a3b",
            layout=dict(tp=2, pp=4, dp=32, ep=8, zero=1, sequence_parallel=True),
            dispatcher="allgather",
        ),
        dict(
            model="nemotron-3-nano",
            layout=dict(tp=2, pp=2, dp=32, ep=8, zero=1, sequence_parallel=True),
        ),
        dict(
            model="kimi-k2",
            layout=dict(pp=4, dp=64, ep=64, zero=1, recompute="full"),
            optimizer="muon",
            hardware="gb300-nvl72",
        ),
        dict(
            model="llama3-8b",
            layout=dict(tp=2, dp=16, zero=1, sequence_parallel=True),
            dtype="fp8",
            fp8_recipe="tensorwise",  # Megatron-Core refuses layers in BF16 under delayed scaling
            bf16_layers=(1, 1),
        ),
        # the expert data-parallel group: 8 ranks 16 apart, 4.5 of them to a 72-GPU rack, so 4 a
        # rack
        dict(
            model="qwen3-30b-a3b",
            layout=dict(tp=2, dp=64, ep=8, zero=1, sequence_parallel=True),
            hardware="gb200-nvl72",
        ),
    ],
)
def test_the_programs_of_the_2025_runs_equal_the_expressions(plan_kw):
    """Expert tensor parallelism, the all-gather dispatcher, a hybrid model, Muon and BF16 end
    layers: each plan's structure's programs give its expressions' step time and memory."""
    kw = dict(plan_kw)
    model, layout, hardware = (
        kw.pop("model"),
        an.Layout(**kw.pop("layout")),
        kw.pop("hardware", "h100-sxm"),
    )
    plan = an.Plan(model, hardware, layout, seq_len=4096, global_batch=1024, **kw)
    numbers = programs.Numbers(plan._in, lower=lambda: template.build(plan))
    assert numbers.quantity("step_time").to("s").magnitude == pytest.approx(
        plan.step_time().to("s").magnitude, rel=1e-12
    )
    assert numbers.quantity("memory.total").to("byte").magnitude == pytest.approx(
        plan.memory().total.to("byte").magnitude, rel=1e-12
    )


def test_a_ceiling_of_a_whole_quotient_stays_whole():
    """A GEMM's waves: 128 experts × 11 × 15 tiles over 132 SMs is exactly 160 waves. Lowered as a
    product by reciprocals it came to 160.00000000000003, whose ceiling is 161; the program divides
    once, as exact arithmetic does (Nemotron 3 Nano at DP 16 and 1,024 tokens: the programs then
    differed from the plan)."""
    import sympy

    from analytic.core.lowering import program
    from analytic.core.symbols import sym

    names = ("experts", "ep", "sms", "tile_m", "tile_n", "hidden", "expert_ffn_hidden", "tp")
    E, ep, sms, tile_m, tile_n, h, h_e, t = (sym(k) for k in names)
    waves = sympy.ceiling(
        E * sympy.ceiling(h / tile_n) * sympy.ceiling(h_e / (tile_m * t)) / (ep * sms)
    )
    prog = program([waves], {sym(k): k for k in names})
    values = dict(
        experts=128.0, ep=1.0, sms=132.0, tile_m=128.0, tile_n=256.0, hidden=2688.0,
        expert_ffn_hidden=1856.0, tp=1.0,
    )
    assert list(prog.scalar([values[k] for k in prog.inputs])) == [160.0]
    assert prog(*(np.array([values[k]]) for k in prog.inputs))[0][0] == 160.0
    plan = an.Plan("nemotron-3-nano", "h100-sxm", an.Layout(dp=16), seq_len=1024, global_batch=16)
    numbers = programs.Numbers(plan._in, lower=lambda: template.build(plan))
    assert numbers.quantity("step_time").to("s").magnitude == pytest.approx(
        plan.step_time().to("s").magnitude, rel=1e-12
    )


@pytest.mark.parametrize("tp, dp, ep, etp", [(2, 64, 8, None), (1, 128, 64, 1)])
def test_a_group_with_a_fractional_share_of_a_rack_counts_whole_ranks_in_symbols(tp, dp, ep, etp):
    """Qwen3-30B-A3B on GB200 racks. TP 2 and DP 64 with EP 8: the expert data-parallel group is 8
    ranks 16 apart, 72/16 = 4.5 of them to a rack, of which 4 whole ones share its NICs (gcd(8,
    4)); DP 128 with EP 64: 2 ranks 64 apart, 72/64 = 1.125 to a rack, so one. A plan with DP as a
    symbol, evaluated at the degree, gives the numeric plan's DP traffic time and step (before:
    gcd(8, 9/2) = 1/2 for the first)."""

    def plan(degree):
        return an.Plan(
            "qwen3-30b-a3b",
            "gb200-nvl72",
            an.Layout(tp=tp, dp=degree, ep=ep, etp=etp, zero=1, sequence_parallel=tp > 1),
            seq_len=8192,
            global_batch=256,
        )

    symbolic, numeric = plan(an.sym("dp")), plan(dp)
    for name in ("communication_time.dp", "step_time"):
        assert symbolic.expr(name).evaluate(dp=dp).to("s").magnitude == pytest.approx(
            numeric.expr(name).value().to("s").magnitude, rel=1e-12
        )


def _twenty() -> list:
    """Step time, memory and MFU (reprs) of four plans each of five structures."""
    data = Path(__file__).parent / "data" / "hf"
    models = {
        "llama3-8b": an.model("llama3-8b"),
        "qwen3": an.Model.from_hf(data / "qwen3-30b-a3b.json"),
        "gpt-oss": an.Model.from_hf(data / "gpt-oss-120b.json"),
        "nano": an.model("nemotron-3-nano"),
        "405b": an.model("llama3-405b"),
    }
    structures = [
        ("llama3-8b", dict(tp=2, dp=8), {}),
        ("qwen3", dict(tp=2, dp=8, ep=8), {"stack": "torchtitan-2025"}),
        ("gpt-oss", dict(pp=2, dp=8, ep=8), {}),
        ("nano", dict(tp=2, dp=8, ep=8, sequence_parallel=True), {}),
        ("405b", dict(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True), {"dtype": "fp8"}),
    ]
    out = []
    for name, layout, kw in structures:
        for seq, batch in ((4096, 256), (8192, 512), (2048, 1024), (8192, 2048)):
            plan = an.Plan(
                models[name], "h100-sxm", an.Layout(**layout), seq_len=seq, global_batch=batch, **kw
            )
            out.append(
                [
                    repr(plan.step_time().magnitude),
                    repr(plan.memory().total.magnitude),
                    repr(plan.mfu()),
                ]
            )
    return out


def test_twenty_plans_of_five_structures_give_the_same_bits_cold_warm_and_in_this_process(
    tmp_path, monkeypatch
):
    """Four plans each of five structures (presets and config.json files), in a fresh process on an
    empty cache, in another on the cache it left, and in this process after a thousand plans of the
    first structure: every step time, memory and MFU the same, every digit."""
    env = {**__import__("os").environ, "ANALYTIC_CACHE": str(tmp_path)}
    code = "import json\nfrom tests.test_programs import _twenty\nprint(json.dumps(_twenty()))"
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                cwd=Path(__file__).parent.parent,
            ).stdout
        )
        for _ in range(2)
    ]
    assert len(list(tmp_path.glob("plan-*.json"))) >= 5
    monkeypatch.setattr(programs, "_BUNDLES", {})
    for _ in range(1000):
        an.Plan(
            "llama3-8b", "h100-sxm", an.Layout(tp=2, dp=8), seq_len=4096, global_batch=256
        ).step_time()
    assert runs[0] == runs[1] == json.loads(json.dumps(_twenty())) and len(runs[0]) == 20


def test_a_structures_programs_answer_a_model_of_other_counts_with_its_own_numbers(fresh):
    """A first MoE model's plan builds its structure's programs; a second model of the same
    structure with other counts (KV heads, a second shared expert, top-k, width) reads its numbers
    from them, and they are its own expressions' (a count the template kept at the first model's
    value would answer with the first model's)."""
    first = an.model("qwen3-30b-a3b").replace(shared_experts=1, name="first")
    second = first.replace(
        kv_heads=2, shared_experts=2, topk=4, expert_ffn_hidden=1024, name="second"
    )
    layout = an.Layout(tp=2, dp=8, ep=8, sequence_parallel=True)
    plans = [
        an.Plan(m, "h100-sxm", layout, seq_len=4096, global_batch=256) for m in (first, second)
    ]
    assert structure(plans[0]._in) == structure(plans[1]._in)
    steps = [p.step_time() for p in plans]
    assert plans[1]._numbers.bundle is plans[0]._numbers.bundle and steps[0] != steps[1]
    for plan in plans:
        for name in ("step_time", "memory.total", "communication.ep", "flops"):
            want = plan.expr(name).value().to_base_units().magnitude
            assert plan.value(name).to_base_units().magnitude == pytest.approx(
                want, rel=1e-12
            ), name
