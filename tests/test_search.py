import numpy as np
import pytest

import analytic as an
from analytic.core.errors import InputError, LayoutError
from analytic.plan import SCHEDULES

MODEL, HW = an.model("llama3-8b"), an.hardware("h100-sxm")


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    import os

    os.environ["ANALYTIC_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    return an.search(
        MODEL,
        HW,
        gpus=64,
        seq_len=4096,
        global_batch=256,
        recompute=("none", "full"),
        zero=(1, 3),
        schedules=("1f1b", "interleaved"),  # Megatron-Core's
    )


def test_search_numbers_equal_plan(result):
    """Random layouts: the vectorised numbers equal Plan's to 1e-9 relative."""
    arrays = result.arrays
    rng = np.random.default_rng(0)
    for j in rng.choice(len(arrays["memory"]), size=25, replace=False):
        plan = result.row(j).plan(MODEL, HW, seq_len=4096, global_batch=256)
        assert arrays["memory"][j] == pytest.approx(
            plan.memory().total.to("byte").magnitude, rel=1e-9
        )
        assert arrays["step_time"][j] == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)
        assert arrays["mfu"][j] == pytest.approx(plan.mfu(), rel=1e-9)


@pytest.mark.parametrize(
    "stack, schedules",
    [
        ("hai-llm", {"1f1b", "zb-h1", "zb-h2", "dualpipe"}),
        ("torchtitan", {"1f1b", "gpipe", "interleaved"}),
    ],
)
def test_moe_search_numbers_equal_plan(tmp_path, monkeypatch, stack, schedules):
    """An MLA MoE model with an MTP module, every schedule the stack runs (the two stacks between
    them every schedule), ZeRO stage and recompute policy: EP, the node-limited all-to-all and
    DualPipe as Plan computes them, to 1e-9 relative."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    moe = an.Model(
        layers=16, hidden=2048, heads=16, head_dim=128, vocab=32000, mlp="swiglu", position="rope",
        ffn_hidden=8192, experts=64, topk=6, shared_experts=2, expert_ffn_hidden=1024,
        dense_layers=1, attention="mla", q_lora_rank=512, kv_lora_rank=256, rope_dim=64,
        nodes_per_token=2, mtp_modules=1,
    )
    hw = an.hardware("h800")
    res = an.search(moe, hw, gpus=64, seq_len=4096, global_batch=128, stack=stack, progress=False)
    arrays = res.arrays
    assert {SCHEDULES[int(s)] for s in np.unique(arrays["schedule"])} == schedules
    assert np.any(arrays["ep"] > 8)  # EP groups that leave the node
    rng = np.random.default_rng(1)
    for j in rng.choice(len(arrays["memory"]), size=25, replace=False):
        plan = res.row(j).plan(moe, hw, seq_len=4096, global_batch=128)
        assert arrays["memory"][j] == pytest.approx(
            plan.memory().total.to("byte").magnitude, rel=1e-9
        )
        assert arrays["step_time"][j] == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)


def test_ranked_fit_and_are_sorted(result):
    times = [r.step_time for r in result.ranked]
    assert times == sorted(times)
    assert all(r.memory <= HW.hbm.to("byte").magnitude for r in result.ranked)
    assert result.fitting == len(result.ranked) <= result.evaluated


def test_every_enumerated_layout_is_valid(result):
    arrays = result.arrays
    prod = arrays["tp"] * arrays["cp"] * arrays["pp"] * arrays["dp"]
    assert np.all(prod == 64)
    assert np.all(32 % arrays["tp"] == 0) and np.all(arrays["tp"] <= 8)
    m = 256 / (arrays["dp"] * arrays["microbatch_size"])
    assert np.all(m == np.round(m)) and np.all(m >= 1)


def test_best_at_least_as_good_as_a_published_layout(result):
    published = an.Plan(
        MODEL,
        HW,
        an.Layout(tp=8, dp=8, zero=1, sequence_parallel=True),
        seq_len=4096,
        global_batch=256,
    )
    assert result.best.step_time <= published.step_time().to("s").magnitude * (1 + 1e-12)


def test_search_rejects_bad_input():
    with pytest.raises(InputError, match="zero"):
        an.search(MODEL, HW, gpus=8, seq_len=1024, global_batch=8, zero=(5,))
    with pytest.raises(InputError, match="gpus"):
        an.search(MODEL, HW, gpus=0, seq_len=1024, global_batch=8)
    with pytest.raises(InputError, match="batch"):
        an.search(MODEL, HW, gpus=8, seq_len=1024)
    # as Plan says
    with pytest.raises(InputError, match="no fp8 peak; its training dtypes are bf16, fp16"):
        an.search(MODEL, an.hardware("a100-80g"), gpus=8, seq_len=1024, global_batch=8, dtype="fp8")


class _Terminal:
    """A stand-in stderr that says whether it is a terminal."""

    def __init__(self, tty):
        self.tty, self.text = tty, ""

    def isatty(self):
        return self.tty

    def write(self, s):
        self.text += s

    def flush(self):
        pass


@pytest.mark.parametrize("tty", [True, False])
def test_progress_bar_only_on_a_terminal(monkeypatch, result, tty):
    import sys

    search_module = sys.modules["analytic.search.layouts"]  # the module (an.search is the function)
    monkeypatch.setattr(search_module, "CHUNK", 1000)  # several steps for this small search
    err = _Terminal(tty)
    monkeypatch.setattr(sys, "stderr", err)
    res = an.search(
        MODEL,
        HW,
        gpus=64,
        seq_len=4096,
        global_batch=256,
        recompute=("none", "full"),
        zero=(1, 3),
        schedules=("1f1b", "interleaved"),  # Megatron-Core's
    )
    assert res.evaluated == result.evaluated and res.best.step_time == result.best.step_time
    if tty:  # tqdm's bar, its total the layouts evaluated (2.58k)
        assert (
            "search" in err.text
            and f"/{res.evaluated / 1e3:.2f}k" in err.text
            and "layouts" in err.text
        )
    else:
        assert err.text == ""


def test_async_tp_search_equals_plan(tmp_path, monkeypatch):
    """search(async_tp=True): TP layouts carry async TP, their numbers are Plan's, and hiding TP
    traffic never makes a layout slower."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    kw = dict(
        gpus=64, seq_len=4096, global_batch=256, zero=(1,), recompute=("none",),
        schedules=("1f1b",), progress=False,
    )
    plain, hidden = an.search(MODEL, HW, **kw), an.search(MODEL, HW, async_tp=True, **kw)
    # (the two come from different compiled programs: equal where TP is absent up to rounding)
    assert np.all(hidden.arrays["step_time"] <= plain.arrays["step_time"] * (1 + 1e-12))
    assert np.any(hidden.arrays["step_time"] < plain.arrays["step_time"] * (1 - 1e-3))
    j = int(np.argmax(hidden.arrays["tp"]))
    row = hidden.row(j)
    assert row.layout.async_tp and row.layout.tp == 8
    plan = row.plan(MODEL, HW, seq_len=4096, global_batch=256)
    assert row.step_time == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)


def test_reserved_sms_search_equals_plan(tmp_path, monkeypatch):
    """search(comm_sms=…): every layout carries the reserved SMs, its numbers are Plan's, and no
    layout gets faster; more SMs than the accelerator has is refused."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    kw = dict(
        gpus=64, seq_len=4096, global_batch=256, zero=(1,), recompute=("none",),
        schedules=("1f1b",), progress=False,
    )
    plain, reserved = an.search(MODEL, HW, **kw), an.search(MODEL, HW, comm_sms=20, **kw)
    assert np.all(reserved.arrays["step_time"] > plain.arrays["step_time"])
    row = reserved.best
    assert row.layout.comm_sms == 20 and row.as_dict()["comm_sms"] == 20
    plan = row.plan(MODEL, HW, seq_len=4096, global_batch=256)
    assert row.step_time == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)
    with pytest.raises(LayoutError, match="comm_sms"):
        an.search(MODEL, HW, comm_sms=132, **kw)
    with pytest.raises(InputError, match="comm_sms"):
        an.search(MODEL, an.hardware("tpu-v4"), comm_sms=4, **kw)


def test_per_tensor_zero3_search_equals_plan(tmp_path, monkeypatch):
    """search(zero3_gather="per-tensor"): ZeRO-3 layouts gather tensor by tensor and get slower, the
    others are untouched; every number is Plan's."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    kw = dict(
        gpus=64, seq_len=4096, global_batch=256, recompute=("full",), schedules=("1f1b",),
        progress=False,
    )
    block, tensor = an.search(MODEL, HW, **kw), an.search(
        MODEL, HW, zero3_gather="per-tensor", **kw
    )
    stage3 = block.arrays["zero"] == 3
    np.testing.assert_allclose(
        tensor.arrays["step_time"][~stage3], block.arrays["step_time"][~stage3], rtol=1e-12
    )  # two compiled programs: equal up to rounding
    assert np.all(
        tensor.arrays["step_time"][stage3 & (block.arrays["dp"] > 1)]
        > block.arrays["step_time"][stage3 & (block.arrays["dp"] > 1)]
    )
    j = int(np.flatnonzero(stage3 & (block.arrays["dp"] > 1))[0])
    row = tensor.row(j)
    assert row.layout.zero3_gather == "per-tensor" and row.as_dict()["zero3_gather"] == "per-tensor"
    plan = row.plan(MODEL, HW, seq_len=4096, global_batch=256)
    assert row.step_time == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)
    with pytest.raises(InputError, match="zero3_gather"):
        an.search(MODEL, HW, zero3_gather="per-layer", **kw)


def test_stack_search_equals_plan(tmp_path, monkeypatch):
    """search(stack="torchtitan"): every layout is counted on that stack, its numbers equal that
    stack's Plan's with and without TP (whose vocabulary-parallel loss holds more bytes a logit),
    its rows rebuild their plan on it, and no ZeRO-1 layout holds what Megatron-Core's does (fp32
    gradient buffers there, bf16 gradients here); an unknown stack is refused."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    kw = dict(
        gpus=64, seq_len=4096, global_batch=256, zero=(1, 3), recompute=("none", "full"),
        schedules=("1f1b",), progress=False,
    )
    titan, core = an.search(MODEL, HW, stack="torchtitan", **kw), an.search(MODEL, HW, **kw)
    assert titan.stack == "torchtitan" and core.stack == "megatron-core"
    arrays = titan.arrays
    rng = np.random.default_rng(2)
    picked = [
        *rng.choice(np.flatnonzero(arrays["tp"] == 1), 5, replace=False),
        *rng.choice(np.flatnonzero(arrays["tp"] > 1), 10, replace=False),
    ]
    for j in picked:
        row = titan.row(j)
        assert row.stack == "torchtitan" and row.as_dict()["stack"] == "torchtitan"
        plan = row.plan(MODEL, HW, seq_len=4096, global_batch=256)
        assert plan.stack == "torchtitan"
        assert arrays["memory"][j] == pytest.approx(
            plan.memory().total.to("byte").magnitude, rel=1e-9
        )
        assert arrays["step_time"][j] == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)
    zero1 = (
        (arrays["zero"] == 1)
        & (arrays["pp"] == 1)
        & (arrays["recompute"] == an.plan.RECOMPUTE.index("none"))
    )
    # the same layouts, in the same order
    assert zero1.sum() > 5 and np.array_equal(core.arrays["tp"][zero1], arrays["tp"][zero1])
    assert np.all(arrays["memory"][zero1] != core.arrays["memory"][zero1])
    with pytest.raises(InputError, match="stack"):
        an.search(MODEL, HW, stack="torchtitn", **kw)
    with pytest.raises(InputError, match="stack"):
        an.search(MODEL, HW, stack=5, **kw)


def test_search_arguments_are_checked(tmp_path, monkeypatch):
    """Subsets must be non-empty and hold valid values; limits and top are positive integers."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    kw = dict(gpus=64, seq_len=4096, global_batch=256, progress=False)
    for bad in (
        dict(microbatch_sizes=()),
        dict(microbatch_sizes=(0,)),
        dict(microbatch_sizes=(2.5,)),
        dict(vpps=(1,)),
        dict(max_tp=0),
        dict(max_cp=-1),
        dict(top=-1),
    ):
        name = next(iter(bad))
        with pytest.raises(InputError, match=name):
            an.search(MODEL, HW, **kw, **bad)
    assert len(an.search(MODEL, HW, top=3, **kw).ranked) == 3


def test_every_enumerated_layout_passes_the_one_layout_check():
    """search enumerates by its own loops for speed; each row it yields is a layout Plan accepts."""
    from analytic.plan import RECOMPUTE, SCHEDULES, check_layout
    from analytic.search.layouts import enumerate_layouts

    for model, hw, gpus, seq, batch in (
        (MODEL, HW, 64, 4096, 256),
        (an.model("deepseek-v3"), an.hardware("h800"), 256, 4096, 512),
    ):
        rows = enumerate_layouts(model, hw, gpus=gpus, seq_len=seq, global_batch=batch)
        n = len(rows["tp"])
        assert n > 100
        for j in range(0, n, max(1, n // 400)):
            d = {k: int(rows[k][j]) for k in rows}
            layout = an.Layout(
                tp=d["tp"], pp=d["pp"], dp=d["dp"], cp=d["cp"], ep=d["ep"], vpp=d["vpp"],
                zero=d["zero"], sequence_parallel=d["tp"] > 1, recompute=RECOMPUTE[d["recompute"]],
                schedule=SCHEDULES[d["schedule"]],
            )
            check_layout(
                model, layout, seq_len=seq, global_batch=batch,
                microbatch_size=d["microbatch_size"], scale_up_domain=hw.gpus_per_node, sms=hw.sms,
            )


@pytest.mark.parametrize(
    "kw, constraint",
    [
        (dict(tp=3), "heads"),
        (dict(pp=64), "layers"),
        (dict(cp=3), "sequence"),
        (dict(dp=3), "split"),
        (dict(tp=16), "node"),
        (dict(ep=2, dp=2), "MoE"),
    ],
)
def test_the_layout_check_names_the_constraint(kw, constraint):
    from analytic.plan import check_layout

    layout = an.Layout(**({"tp": 1} | kw))
    with pytest.raises(LayoutError, match=constraint):
        check_layout(
            MODEL, layout, seq_len=4096, global_batch=256, microbatch_size=1, scale_up_domain=8
        )


def test_search_over_several_sizes_by_objective(tmp_path, monkeypatch):
    """Three GPU counts at a 64-sequence batch: ranked by step time the largest cluster wins; by
    cost (GPU-seconds per token, checked against the rows' own plans) or MFU a smaller one, and the
    two rank alike (6·N·D MFU is FLOPs over GPU-seconds)."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    m, hw = an.model("llama3-70b"), an.hardware("h100-sxm")
    kw = dict(
        gpus=[64, 256, 1024], seq_len=8192, global_batch=64, zero=(1, 2), recompute=("none",),
        schedules=("1f1b", "zb-h2"), stack="hai-llm", progress=False,
    )
    fast, cheap, busy = (an.search(m, hw, objective=o, **kw) for o in ("step_time", "cost", "mfu"))
    assert set(fast.arrays["gpus"]) == {64, 256, 1024} and fast.evaluated == cheap.evaluated
    fits = fast.arrays["fits"]
    assert fast.best.step_time == fast.arrays["step_time"][fits].min()
    assert cheap.best.cost == pytest.approx(cheap.arrays["cost"][fits].min(), rel=1e-12)
    assert cheap.best.layout.gpus < fast.best.layout.gpus
    assert [r.as_dict() for r in cheap.ranked[:5]] == [r.as_dict() for r in busy.ranked[:5]]
    for r in (fast.best, cheap.best):
        plan = r.plan(m, hw, seq_len=8192, global_batch=64)
        want = (plan.step_time() * plan.gpus / plan.tokens_per_step).to("s/token").magnitude
        assert r.cost == pytest.approx(want, rel=1e-9) and r.as_dict()["gpus"] == plan.gpus
    with pytest.raises(InputError, match="objective"):
        an.search(m, hw, objective="speed", **kw)
    with pytest.raises(InputError, match="gpus"):
        an.search(m, hw, **{**kw, "gpus": [64, 64]})


def test_mesh_search_equals_plan(tmp_path, monkeypatch):
    """On MI300X's fully connected node the numbers search gives every TP degree are Plan's, and a
    layout's TP bytes take 7/(t − 1) times as long as on a switched node of the same bandwidth (the
    group reaches t − 1 of the seven links)."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    mi = an.hardware("mi300x")
    kw = dict(
        gpus=64, seq_len=4096, global_batch=256, zero=(1,), recompute=("none",),
        schedules=("1f1b",), progress=False,
    )
    res = an.search(MODEL, mi, **kw)
    for tp in (2, 4, 8):
        j = int(
            np.flatnonzero(
                (res.arrays["tp"] == tp) & (res.arrays["pp"] == 1) & (res.arrays["cp"] == 1)
            )[0]
        )
        plan = res.row(j).plan(MODEL, mi, seq_len=4096, global_batch=256)
        assert res.arrays["step_time"][j] == pytest.approx(
            plan.step_time().to("s").magnitude, rel=1e-9
        )
        assert res.arrays["memory"][j] == pytest.approx(
            plan.memory().total.to("byte").magnitude, rel=1e-9
        )
        switched = res.row(j).plan(
            MODEL, mi.replace(scale_up_links=None), seq_len=4096, global_batch=256
        )
        eta = float(plan.inputs["scale_up_efficiency"])
        sent = plan.communication()["tp"].to("byte").magnitude
        slower = (
            (plan.communication_time()["tp"] - switched.communication_time()["tp"])
            .to("s")
            .magnitude
        )
        assert slower == pytest.approx(sent / (448e9 * eta) * (7 / (tp - 1) - 1), rel=1e-9)


def test_a_learned_position_table_bounds_the_sequence():
    """GPT-3's learned table has 2,048 rows: Plan and search refuse 4,096 tokens alike (Megatron-LM
    asserts max_position_embeddings ≥ seq_length); 2,048 passes; RoPE has no table to outrun."""
    gpt3, a100 = an.model("gpt3-175b"), an.hardware("a100-80g")
    assert gpt3.max_seq_len == 2048
    with pytest.raises(LayoutError, match="position table"):
        an.Plan(gpt3, a100, an.Layout(tp=8, pp=16, dp=8), seq_len=4096, global_batch=64)
    with pytest.raises(LayoutError, match="position table"):
        an.search(gpt3, a100, gpus=1024, seq_len=4096, global_batch=64, progress=False)
    an.Plan(gpt3, a100, an.Layout(tp=8, pp=16, dp=8), seq_len=2048, global_batch=64)
    an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(dp=8), seq_len=65536,
        global_batch=8,
    )


def test_sequence_parallelism_needs_tp_to_divide_each_cp_ranks_tokens():
    """4,100 tokens split over 4 TP ranks (1,025 each) but not over 8: Plan refuses TP 8 with
    sequence parallelism (Megatron-LM's reduce-scatter asserts it) and takes it without; search,
    which turns sequence parallelism on wherever tp > 1, lists no TP-8 layout at 4,100 and does at
    4,096."""
    kw = dict(global_batch=64)
    with pytest.raises(
        LayoutError, match="sequence_parallel: tp 8 does not divide the 4100 tokens"
    ):
        an.Plan(MODEL, HW, an.Layout(tp=8, dp=8, sequence_parallel=True), seq_len=4100, **kw)
    an.Plan(MODEL, HW, an.Layout(tp=8, dp=8), seq_len=4100, **kw)
    an.Plan(MODEL, HW, an.Layout(tp=4, dp=16, sequence_parallel=True), seq_len=4100, **kw)
    # CP 2 leaves 2,050 tokens a rank
    with pytest.raises(LayoutError, match="tp 4 does not divide the 2050 tokens"):
        an.Plan(MODEL, HW, an.Layout(tp=4, cp=2, dp=8, sequence_parallel=True), seq_len=4100, **kw)
    from analytic.search.layouts import enumerate_layouts

    odd, even = (
        enumerate_layouts(MODEL, HW, gpus=64, seq_len=s, global_batch=64) for s in (4100, 4096)
    )
    assert set(odd["tp"]) == {1.0, 2.0, 4.0} and 8.0 in set(even["tp"])


def test_context_parallelism_needs_two_chunks_a_rank():
    """Load-balanced CP cuts a sequence into 2·cp chunks, two a rank (TransformerEngine asserts it):
    4,100 tokens go over CP 2 (2,050 a rank, 1,025 a chunk) but not over CP 4 (1,025 a rank); search
    lists no CP-4 layout at 4,100 and does at 4,096. sequence_unit combines it with SP's split."""
    from analytic.plan import sequence_unit
    from analytic.search.layouts import enumerate_layouts

    assert [
        sequence_unit(1, 8, True),
        sequence_unit(2, 8, True),
        sequence_unit(2, 1, False),
        sequence_unit(4, 3, True),
        sequence_unit(1, 8, False),
    ] == [8, 16, 4, 24, 1]
    kw = dict(global_batch=64)
    an.Plan(MODEL, HW, an.Layout(cp=2, dp=32), seq_len=4100, **kw)
    with pytest.raises(
        LayoutError, match="the 1025 tokens of each CP rank do not split into the two chunks"
    ):
        an.Plan(MODEL, HW, an.Layout(cp=4, dp=16), seq_len=4100, **kw)
    odd, even = (
        enumerate_layouts(MODEL, HW, gpus=64, seq_len=s, global_batch=64) for s in (4100, 4096)
    )
    assert 4.0 not in set(odd["cp"]) and 2.0 in set(odd["cp"]) and 4.0 in set(even["cp"])


def _distinct_stacks() -> list[str]:
    """The stacks whose properties differ beyond their name and efficiency family (a stack that
    takes its base's kernels whole searches as its base does, at another constant)."""
    from analytic.presets import stack

    seen, out = [], []
    for name in an.stacks():
        props = {k: v for k, v in stack(name).items() if k not in ("name", "efficiency")}
        if props not in seen:
            seen.append(props)
            out.append(name)
    return out


@pytest.mark.parametrize("stack", _distinct_stacks())
def test_every_ranked_row_is_plans_on_every_stack(stack):
    """On each stack of its own properties, rows drawn across the ranking (tp = 1 among them, where
    Plan has no sequence parallelism; selective recomputation on stacks whose policy for it is not
    modelled left out, as Plan refuses it): each is a layout Plan accepts, with Plan's memory and
    step time (to 1e-12)."""
    model, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    kw = dict(seq_len=4096, global_batch=32)
    flash = stack != "megatron-lm-2021"  # its stack has no fused attention kernel
    if not flash:  # the unfused formulas count GPT's layer: multi-head attention, a GELU MLP
        model = an.Model(
            layers=24, hidden=2048, heads=16, vocab=51200, mlp="gelu", position="learned",
            max_seq_len=4096, name="gpt-1.3b",
        )
    try:
        res = an.search(
            model, hw, gpus=8, **kw, stack=stack, flash_attention=flash, progress=False, top=10**6
        )
    except an.InputError as exc:  # a stack that runs none of this model's layouts says why
        pytest.skip(str(exc))
    rows = list(res.ranked)
    assert rows and any(r.layout.tp == 1 for r in rows) and any(r.layout.tp > 1 for r in rows)
    picks = rows[:: max(1, len(rows) // 3)]
    picks += [next(r for r in rows if r.layout.tp == 1)]
    for row in picks:
        plan = row.plan(model, hw, **kw)  # raises where Plan refuses the layout
        assert plan.memory().total.to("byte").magnitude == pytest.approx(
            row.memory, rel=1e-12
        ), row.layout
        assert plan.step_time().to("s").magnitude == pytest.approx(
            row.step_time, rel=1e-12
        ), row.layout
        assert plan.memory_verdict() == row.verdict == "fits", row.layout
    if stack in ("llm-foundry", "maxtext"):  # selective recomputation not modelled for them
        assert all(r.layout.recompute != "selective" for r in rows)
        with pytest.raises(an.InputError, match="selective recomputation is not modelled"):
            an.search(
                model, hw, gpus=8, **kw, stack=stack, recompute=("selective",), progress=False
            )


def test_search_ranks_what_fits_at_its_peak_and_says_each_rows_verdict():
    """Qwen3-30B-A3B on 8 H200 (the first hour's question): layouts whose count fits but whose
    predicted peak does not are 'at the allocator's limit', as Plan says; they are ranked only with
    at_limit."""
    from pathlib import Path

    model = an.Model.from_hf(Path(__file__).parent / "data" / "hf" / "qwen3-30b-a3b.json")
    kw = dict(gpus=8, seq_len=4096, global_batch=64, progress=False, top=10**6)
    plain, every = an.search(model, "h200", **kw), an.search(model, "h200", **kw, at_limit=True)
    verdicts = {r.verdict for r in every.ranked}
    assert verdicts == {"fits", "fits at the allocator's limit"} and {
        r.verdict for r in plain.ranked
    } == {"fits"}
    assert plain.fitting == sum(r.verdict == "fits" for r in every.ranked) < every.fitting
    limit = next(r for r in every.ranked if r.verdict != "fits")
    assert (
        limit.plan(model, an.hardware("h200"), seq_len=4096, global_batch=64).memory_verdict()
        == limit.verdict
    )


def test_one_replica_ranks_zero_0_to_2_as_one_layout():
    """With dp·cp = 1 there is nothing to shard: Plan gives ZeRO-0, 1 and 2 the same memory and
    step, so search keeps the lowest asked for; ZeRO-3 (FSDP on one rank: 16-bit gradients) differs
    and stays. The table prints no stage for the first."""
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    plans = [
        an.Plan(m, hw, an.Layout(tp=8, zero=z), seq_len=4096, global_batch=8) for z in range(4)
    ]
    totals = [p.memory().total for p in plans]
    assert totals[0] == totals[1] == totals[2] != totals[3]
    res = an.search(m, hw, gpus=8, seq_len=4096, global_batch=8, tp=8, progress=False)
    assert set(res.arrays["zero"]) == {0.0, 3.0}
    res = an.search(
        m, hw, gpus=8, seq_len=4096, global_batch=8, tp=8, zero=(1, 2, 3), progress=False
    )
    assert set(res.arrays["zero"]) == {1.0, 3.0}
    # dp 2: all four
    wider = an.search(m, hw, gpus=8, seq_len=4096, global_batch=8, tp=4, progress=False)
    assert set(wider.arrays["zero"]) == {0.0, 1.0, 2.0, 3.0}


def test_the_ranking_as_a_frame_with_units():
    """SearchResult.frame(): the ranked layouts best first, units in the columns' names; each row's
    step, memory and GPU-hours per million tokens are its plan's."""
    res = an.search(
        "llama3-70b", "h100-sxm", gpus=512, seq_len=8192, batch_tokens="4Mi", top=3, progress=False
    )
    f = res.frame()
    assert list(f["step_time [s]"]) == sorted(f["step_time [s]"]) and len(f) == 3
    assert f.attrs["units"]["memory"] == "GB" and f.attrs["stack"] == "megatron-core"
    for _, row in f.iterrows():
        lay = an.Layout(
            tp=row["tp"], cp=row["cp"], pp=row["pp"], dp=row["dp"], zero=row["zero"],
            recompute=row["recompute"], schedule=row["schedule"], vpp=row["vpp"],
            sequence_parallel=row["tp"] > 1,
        )
        plan = an.Plan(
            "llama3-70b", "h100-sxm", lay, seq_len=8192, batch_tokens="4Mi",
            microbatch_size=row["microbatch_size"],
        )
        assert row["step_time [s]"] == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)
        assert row["memory [GB]"] == pytest.approx(plan.memory().total.to("GB").magnitude, rel=1e-9)
        gpu_hours = (plan.step_time() * 512 / plan.tokens_per_step * 1e6).to("hour/token").magnitude
        assert row["cost [GPU-hour/Mtoken]"] == pytest.approx(gpu_hours, rel=1e-9)


def _agrees(result, model, seq_len, global_batch, n=3):
    """The first ``n`` ranked layouts' step time and memory are their Plan's."""
    for row in result.ranked[:n]:
        plan = row.plan(model, HW, seq_len=seq_len, global_batch=global_batch)
        assert row.step_time == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)
        assert row.memory == pytest.approx(plan.memory().total.to("byte").magnitude, rel=1e-9)
    return result


def test_a_muon_search_counts_every_layout_with_muon_at_zero_1(tmp_path, monkeypatch):
    """search(optimizer="muon"): every layout at ZeRO-1 (Muon's layer-wise distributed optimizer),
    each row's plan Muon's and its numbers Plan's; ZeRO-2 asked for by name is refused as Plan
    refuses it."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    kw = dict(gpus=64, seq_len=4096, global_batch=256, progress=False)
    res = _agrees(an.search("llama3-8b", HW, optimizer="muon", **kw), "llama3-8b", 4096, 256)
    assert set(res.arrays["zero"]) == {1} and res.best.optimizer == "muon"
    adam = an.search("llama3-8b", HW, zero=(1,), **kw)
    assert res.best.memory < adam.best.memory  # one momentum buffer against Adam's two
    with pytest.raises(InputError, match="zero=2"):
        an.search("llama3-8b", HW, optimizer="muon", zero=(2,), **kw)
    with pytest.raises(InputError, match="runs adam, not muon"):
        an.search("llama3-8b", HW, optimizer="muon", stack="torchtitan-2025", **kw)


def test_an_etp_search_folds_ep_past_dp(tmp_path, monkeypatch):
    """search(etp=1): the expert layers' ETP × EP folds over TP × CP × DP, so EP exceeds CP × DP
    where TP > 1, as Megatron-Core allows; every row carries ETP 1 and its numbers are Plan's."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    res = an.search(
        "qwen3-30b-a3b", HW, gpus=32, seq_len=4096, global_batch=128, etp=1, zero=(1,),
        recompute=("none",), schedules=("1f1b",), progress=False,
    )
    _agrees(res, "qwen3-30b-a3b", 4096, 128)
    rows = [res.row(j) for j in range(len(res.arrays["tp"]))]
    assert all(r.layout.etp == 1 for r in rows)
    assert any(r.layout.ep > r.layout.cp * r.layout.dp for r in rows)
    assert all((r.layout.tp * r.layout.cp * r.layout.dp) % r.layout.ep == 0 for r in rows)


def test_a_pipeline_layout_search_takes_its_chunks(tmp_path, monkeypatch):
    """search(pipeline_layout=..., pp=...): every layout has the layout's pp and vpp (8 chunks on 4
    ranks: 2, interleaved), its first and last stages' layers, and Plan's numbers; without pp it
    says what to give."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    text = "Etttt|" + "tttt|" * 6 + "ttttL"
    kw = dict(gpus=64, seq_len=4096, global_batch=256, progress=False)
    res = _agrees(
        an.search("llama3-8b", HW, pipeline_layout=text, pp=4, **kw), "llama3-8b", 4096, 256
    )
    assert set(res.arrays["pp"]) == {4} and set(res.arrays["vpp"]) == {2}
    assert res.best.layout.schedule == "interleaved" and res.best.layout.pipeline_layout == text
    with pytest.raises(InputError, match="pin pp"):
        an.search("llama3-8b", HW, pipeline_layout=text, **kw)


@pytest.mark.parametrize(
    "kw",
    [
        dict(grad_dtype="bf16"),
        dict(moment_dtype="bf16"),
        dict(layout_options={"recompute_modules": ("layernorm",)}),
        dict(layout_options={"fp8_activations": True}, dtype="fp8"),
        dict(layout_options={"offload_activations": True}),
        dict(layout_options={"offload_optimizer": 0.5}),
        dict(layout_options={"first_stage_layers": 8}, pp=4),
    ],
)
def test_every_layout_option_of_a_plan_is_searched_with(tmp_path, monkeypatch, kw):
    """Each Plan option and Layout field a step takes, given to search, is every row's: the rows'
    numbers are their Plan's, and the choices it needs are the only ones searched (recompute
    modules: selective)."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    res = an.search(
        "llama3-8b", HW, gpus=32, seq_len=4096, global_batch=128, progress=False, top=2, **kw
    )
    for row in res.ranked:
        plan = row.plan(
            "llama3-8b", HW, seq_len=4096, global_batch=128, dtype=kw.get("dtype", "bf16")
        )
        assert row.step_time == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)
        assert row.memory == pytest.approx(plan.memory().total.to("byte").magnitude, rel=1e-9)
        for k, v in kw.get("layout_options", {}).items():
            assert getattr(row.layout, k) == (v if k != "recompute_modules" else tuple(v))
    if "recompute_modules" in kw.get("layout_options", {}):
        from analytic.plan import RECOMPUTE

        assert {RECOMPUTE[int(r)] for r in res.arrays["recompute"]} == {"selective"}


def test_a_layout_option_search_does_not_take_is_named():
    with pytest.raises(InputError, match="recompute_layers"):
        an.search(
            "llama3-8b", HW, gpus=32, seq_len=4096, global_batch=128, progress=False,
            layout_options={"recompute_layers": 4},
        )
    with pytest.raises(InputError, match="pin pp"):
        an.search(
            "llama3-8b", HW, gpus=32, seq_len=4096, global_batch=128, progress=False,
            layout_options={"first_stage_layers": 8},
        )


def test_a_search_with_the_all_to_alls_overlapped_keeps_the_layouts_megatron_core_pairs(
    tmp_path, monkeypatch
):
    """layout_options={"ep_overlap": True}: every row has EP, no full recomputation and, with a
    pipeline, the interleaved schedule, and its numbers are its Plan's; full recomputation asked
    for by name, a dense model and a stack without the combined 1F1B are refused."""
    from analytic.plan import RECOMPUTE, SCHEDULES

    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    kw = dict(gpus=32, seq_len=4096, global_batch=128, progress=False, stack="megatron-core")
    res = an.search("qwen3-30b-a3b", HW, layout_options={"ep_overlap": True}, **kw)
    a = res.arrays
    assert len(a["ep"]) and (a["ep"] > 1).all() and 2 in set(a["ep"])
    assert "full" not in {RECOMPUTE[int(r)] for r in a["recompute"]}
    assert ((a["pp"] == 1) | (a["schedule"] == SCHEDULES.index("interleaved"))).all()
    for row in list(res.ranked)[:3]:
        plan = row.plan("qwen3-30b-a3b", HW, seq_len=4096, global_batch=128)
        assert row.layout.ep_overlap
        assert row.step_time == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)
        assert row.memory == pytest.approx(plan.memory().total.to("byte").magnitude, rel=1e-9)
    for model, more, says in (
        ("qwen3-30b-a3b", dict(recompute=("none", "full")), "full"),
        ("llama3-8b", {}, "MoE"),
        ("qwen3-30b-a3b", dict(stack="torchtitan-2025"), "torchtitan-2025"),
    ):
        with pytest.raises(InputError, match=f"ep_overlap: .*{says}"):
            an.search(model, HW, layout_options={"ep_overlap": True}, **{**kw, **more})


def test_the_schedules_and_chunks_each_pipeline_lists():
    """8 layers on 8 GPUs: one stage runs 1F1B alone; two stages every schedule, DualPipe on an even
    count, 2 or 4 chunks a stage (2 × 4 = 8 layers, a layer a chunk); four stages 2 chunks, not 4
    (16 chunks for 8 layers); eight stages no interleaving."""
    from analytic.plan import SCHEDULES
    from analytic.search.layouts import enumerate_layouts

    small = an.Model(layers=8, hidden=256, heads=8, kv_heads=2, vocab=1000, ffn_hidden=512,
                     mlp="swiglu", position="rope")
    a = enumerate_layouts(small, an.hardware("h100-sxm"), gpus=8, seq_len=1024, global_batch=64)
    rows = zip(a["pp"], a["schedule"], a["vpp"])
    listed = {(int(p), SCHEDULES[int(s)], int(v)) for p, s, v in rows}
    flat = {"1f1b", "gpipe", "zb-h1", "zb-h2", "dualpipe"}
    want = {(1, "1f1b", 1)} | {(p, s, 1) for p in (2, 4, 8) for s in flat}
    want |= {(2, "interleaved", 2), (2, "interleaved", 4), (4, "interleaved", 2)}
    assert listed == want


def test_the_expert_degrees_each_layout_folds():
    """An MoE of 8 experts on 16 GPUs with expert TP 4: the experts fold over tp·cp·dp / 4 ranks,
    EP dividing that and the experts; where 4 does not divide tp·cp·dp, no layout."""
    from analytic.search.layouts import enumerate_layouts

    moe = an.Model(layers=8, hidden=256, heads=8, kv_heads=2, vocab=1000, ffn_hidden=512,
                   mlp="swiglu", position="rope", experts=8, topk=2, expert_ffn_hidden=128)
    a = enumerate_layouts(moe, an.hardware("h100-sxm"), gpus=16, seq_len=1024, global_batch=64,
                          etp=4)
    eps = {}
    for t, c, d, e in zip(a["tp"], a["cp"], a["dp"], a["ep"]):
        eps.setdefault((int(t), int(c), int(d)), set()).add(int(e))
    # (tp, cp, dp): tp·cp·dp / 4 = 4, 4, 2, 2, 1
    want = {(1, 1, 16): {1, 2, 4}, (2, 2, 4): {1, 2, 4}, (2, 2, 2): {1, 2}, (1, 4, 2): {1, 2},
            (2, 1, 2): {1}}
    assert {k: eps[k] for k in want} == want
    assert (1, 1, 2) not in eps and (2, 1, 1) not in eps  # 2 ranks: no fold of 4


def test_the_ends_counted_as_layers_split_the_pipelines_search_ranks(tmp_path, monkeypatch):
    """layout_options={"ends_as_layers": True}: Llama 3 8B's 32 layers and the two ends make 34
    slots, so only 2 stages of one chunk split them (17 is no divisor of 64 GPUs); every layout
    has a pipeline and no DualPipe, and its numbers are its Plan's. DualPipe asked for by name, a
    pipeline layout, the end stages' layers or a hybrid pattern is refused as Plan refuses it."""
    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    kw = dict(gpus=64, seq_len=4096, global_batch=256, progress=False)
    res = an.search(MODEL, HW, layout_options={"ends_as_layers": True}, **kw)
    arrays = res.arrays
    assert set(arrays["pp"]) == {2} and set(arrays["vpp"]) == {1}
    assert SCHEDULES.index("dualpipe") not in set(arrays["schedule"])
    rng = np.random.default_rng(2)
    for j in rng.choice(len(arrays["memory"]), size=10, replace=False):
        plan = res.row(j).plan(MODEL, HW, seq_len=4096, global_batch=256)
        assert plan.layout.ends_as_layers
        assert arrays["memory"][j] == pytest.approx(
            plan.memory().total.to("byte").magnitude, rel=1e-9
        )
        assert arrays["step_time"][j] == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)
    with pytest.raises(LayoutError, match="ends_as_layers: DualPipe"):
        an.search(
            MODEL, HW, layout_options={"ends_as_layers": True}, stack="hai-llm",
            schedules=("1f1b", "dualpipe"), **kw,
        )
    # 22 layers and the ends: 24 slots, whole chunks of pp × vpp ≤ 22 with pp dividing 64
    short = MODEL.replace(layers=22)
    res = an.search(short, HW, layout_options={"ends_as_layers": True}, **kw)
    pairs = set(zip(res.arrays["pp"].astype(int), res.arrays["vpp"].astype(int)))
    assert pairs == {(2, 1), (4, 1), (8, 1), (2, 2), (2, 4), (4, 2)}
    # with a pipeline layout, or the end stages' layers given, as Layout refuses them
    with pytest.raises(LayoutError, match="pipeline_layout: places the ends itself"):
        an.search(
            MODEL, HW, layout_options={"ends_as_layers": True}, pp=4,
            pipeline_layout="E" + "tttttttt|" * 3 + "ttttttttL", **kw,
        )
    with pytest.raises(LayoutError, match="ends_as_layers: the split it makes leaves no"):
        an.search(
            MODEL, HW, layout_options={"ends_as_layers": True, "first_stage_layers": 7}, pp=4,
            **kw,
        )
    hybrid = an.Model.from_hf("tests/data/hf/nemotron-3-nano.json")
    with pytest.raises(InputError, match="ends_as_layers: a hybrid pattern"):
        an.search(hybrid, HW, layout_options={"ends_as_layers": True}, **kw)


def test_a_stack_searches_the_schedules_it_runs():
    """Megatron-Core runs 1F1B and the interleaved schedule (stacks.toml, from its
    get_forward_backward_func): a search on it ranks no other, and one asked for by name is refused
    naming the stacks that run it; DeepSeek's HAI-LLM runs DualPipe."""
    kw = dict(gpus=64, seq_len=4096, global_batch=256, progress=False)
    res = an.search(MODEL, HW, **kw)
    assert {SCHEDULES[int(s)] for s in set(res.arrays["schedule"])} == {"1f1b", "interleaved"}
    with pytest.raises(InputError, match=r"not dualpipe \(the stacks that run it: hai-llm\)"):
        an.search(MODEL, HW, schedules=("1f1b", "dualpipe"), **kw)
    with pytest.raises(InputError, match="schedule: stack megatron-core runs 1f1b, interleaved"):
        an.Plan(MODEL, HW, an.Layout(pp=4, dp=16, schedule="zb-h1"), seq_len=4096,
                global_batch=256)
    dual = an.search(MODEL, HW, stack="hai-llm", **kw)
    assert SCHEDULES.index("dualpipe") in set(dual.arrays["schedule"])
