"""Training precisions: FP8 (delayed, tensorwise and blockwise scaling), MXFP8 and NVFP4
(block-scaled), each counted against hand counts of the bytes its casts move and its cached weights
hold, at the peak of its format, where its tensor cores and its stack run it."""

from fractions import Fraction

import pytest

import analytic as an

KW = dict(seq_len=8192, global_batch=512)
LAYOUT = an.Layout(tp=4, pp=2, dp=8, zero=1, sequence_parallel=True)


def _plan(dtype, hardware="gb200-nvl72", **kw):
    return an.Plan("llama3-70b", hardware, LAYOUT, dtype=dtype, **KW, **kw)


@pytest.mark.parametrize(
    "dtype, element, block, scale", [("mxfp8", 1, 32, 1), ("nvfp4", Fraction(1, 2), 16, 1)]
)
def test_a_cast_moves_the_16_bit_read_and_two_quantised_copies_with_their_scales(
    dtype, element, block, scale
):
    """A 4096×8192 input and a 4096×8192 output gradient: each element read once in 16 bits and
    written rowwise and columnwise in the format, each copy with one scale byte per block."""
    m, n, k = 4096, 8192, 8192
    by_hand = 0
    for rows, cols in ((m, k), (m, n)):  # the forward's input, the backward's output gradient
        elements = rows * cols
        by_hand += 2 * elements + 2 * (element * elements + scale * elements // block)
    got = an.formula(f"compute.memory_bound.{dtype}_cast").evaluate(
        gemm_count=1, gemm_m=m, gemm_n=n, gemm_k=k
    )
    assert got.to("byte").magnitude == by_hand


def test_the_cached_weights_are_two_copies_of_the_format_with_their_scales():
    """Over a bf16 plan's count, Transformer Engine's cached weights add 2 bytes a linear parameter
    in FP8, 2·(1 + 1/32) in MXFP8 and 2·(1/2 + 1/16) in NVFP4: 33/32 and 9/16 of FP8's."""
    base = _plan("bf16").memory().weights.to("byte").magnitude
    added = {
        d: _plan(d).memory().weights.to("byte").magnitude - base for d in ("fp8", "mxfp8", "nvfp4")
    }
    assert added["fp8"] > 0
    assert added["mxfp8"] / added["fp8"] == pytest.approx(33 / 32, rel=1e-12)
    assert added["nvfp4"] / added["fp8"] == pytest.approx(9 / 16, rel=1e-12)


def test_each_format_runs_at_its_peak_and_its_own_measured_ceiling():
    """B200's block-scaled GEMMs at the published measurements (FlashInfer's MXFP8 3,200.9
    TFLOP/s of the 4,500 FP8 peak; cuBLASLt's block-scaled FP4 5,239 of 9,000); GB200 has none of
    its own and takes those fractions (the only measured devices), saying so."""
    measured = {"mxfp8": 3200.9 / 4500, "nvfp4": 5239 / 9000}
    for hardware in ("b200", "gb200-nvl72"):
        hw = an.hardware(hardware)
        for dtype, peak in (("fp8", "fp8"), ("mxfp8", "fp8"), ("nvfp4", "fp4")):
            plan = _plan(dtype, hardware)
            assert plan.inputs["peak_flops"] == hw.peak_flops(peak).to("FLOP/s").magnitude
            assert plan.inputs["peak_flops_16"] == hw.peak_flops("bf16").to("FLOP/s").magnitude
            own = hw.matmul_ceiling(dtype).fraction if dtype == "fp8" else measured[dtype]
            assert float(plan.inputs["matmul_efficiency"]) == pytest.approx(own, rel=1e-12)
            pooled = any(f"no measured {dtype} GEMM ceiling" in n for n in plan.notes)
            assert pooled == (dtype != "fp8" and hardware != "b200")
    nvfp4 = _plan("nvfp4", "b200")
    nvfp4.step_time()
    assert any("an MXFP4 measurement" in n for n in nvfp4.notes)  # what the measurement stands for
    steps = [_plan(d).step_time() for d in ("nvfp4", "fp8", "mxfp8", "bf16")]
    assert steps == sorted(steps)


@pytest.mark.parametrize(
    "dtype, hardware, stack, message",
    [
        (
            "mxfp8",
            "h100-sxm",
            None,
            "mxfp8 runs on the block-scaled tensor cores of blackwell, cdna4, not on",
        ),
        (
            "nvfp4",
            "mi355x",
            None,
            "nvfp4 runs on the block-scaled tensor cores of blackwell, not on",
        ),
        ("nvfp4", "b200", "deepspeed", "stack deepspeed is not known to train in nvfp4"),
        (
            "nvfp4",
            "b200",
            "torchtitan-2025",
            "stack torchtitan-2025 trains in bf16, fp8, mxfp8, not nvfp4",
        ),
    ],
)
def test_a_format_where_its_tensor_cores_or_stack_do_not_run_it_is_refused(
    dtype, hardware, stack, message
):
    with pytest.raises(an.InputError, match=message):
        an.Plan(
            "llama3-8b",
            hardware,
            an.Layout(dp=8),
            dtype=dtype,
            seq_len=4096,
            global_batch=64,
            **({} if stack is None else {"stack": stack}),
        )


def test_search_and_the_command_line_take_the_formats():
    res = an.search("llama3-70b", "gb200-nvl72", gpus=64, progress=False, dtype="mxfp8", **KW)
    best = res.best
    plan = best.plan(an.model("llama3-70b"), an.hardware("gb200-nvl72"), dtype="mxfp8", **KW)
    assert plan.step_time().to("s").magnitude == pytest.approx(best.step_time, rel=1e-9)
    from analytic.cli.main import main

    assert (
        main(
            (
                "step --model llama3-70b --hardware b200 --gpus 64 --tp 4 --pp 2 --seq 8192"
                " --global-batch 512 --dtype nvfp4 --json"
            ).split()
        )
        == 0
    )


# read in 16 bits, write FP8 and its transpose; the amax recorded by the same kernel
# two copies, each with an FP32 scale per 128 elements
@pytest.mark.parametrize(
    "recipe, per_element",
    [
        ("delayed", 2 + 1 + 1),
        ("tensorwise", 2 + 2 + 1 + 1),  # an amax pass reads the 16-bit tensor first
        ("blockwise", 2 + 2 * (1 + Fraction(4, 128))),
    ],
)
def test_each_fp8_scaling_recipe_moves_its_casts_bytes(recipe, per_element):
    """A 4096×8192 input and output gradient around one GEMM: bytes by hand, per element of each."""
    m, n, k = 4096, 8192, 8192
    by_hand = per_element * (m * k + m * n)
    name = an.presets.precision("fp8", recipe)["cast"]
    got = an.formula(name).evaluate(gemm_count=1, gemm_m=m, gemm_n=n, gemm_k=k)
    assert got.to("byte").magnitude == by_hand


def test_the_recipe_is_the_stacks_unless_given_and_moves_casts_cache_and_step():
    """Megatron-Core's default is delayed (its --fp8-recipe default); blockwise caches 2·(1 +
    4/16384) bytes a linear parameter against delayed's 2, and its casts cost more; TorchTitan runs
    tensorwise, its compiled blocks reading a tensor once for the cast (the amax fused), its eager
    ones twice."""
    base = _plan("bf16", "h100-sxm").memory().weights.to("byte").magnitude
    plans = {
        r: _plan("fp8", "h100-sxm", fp8_recipe=r) for r in ("delayed", "tensorwise", "blockwise")
    }
    assert _plan("fp8", "h100-sxm").fp8_recipe == "delayed"
    cache = {r: p.memory().weights.to("byte").magnitude - base for r, p in plans.items()}
    assert cache["tensorwise"] == cache["delayed"] > 0
    assert cache["blockwise"] / cache["delayed"] == pytest.approx(1 + 1 / 4096, rel=1e-12)
    step = {r: p.step_time().to("s").magnitude for r, p in plans.items()}
    assert step["delayed"] < step["blockwise"] < step["tensorwise"]
    casts = {
        st: [s for s in _plan("fp8", "h100-sxm", stack=st).sources("step_time") if "_cast" in s]
        for st in ("torchtitan-2025", "torchtitan-2025-eager", "hai-llm")
    }
    assert casts == {
        "torchtitan-2025": ["compute.memory_bound.fp8_cast"],
        "torchtitan-2025-eager": ["compute.memory_bound.fp8_current_cast"],
        "hai-llm": ["compute.memory_bound.fp8_blockwise_cast"],
    }
    assert plans["blockwise"].replace(dtype="bf16").fp8_recipe is None


@pytest.mark.parametrize(
    "kw, message",
    [
        (
            dict(dtype="bf16", fp8_recipe="delayed"),
            "fp8_recipe: a scaling recipe of dtype fp8, not of bf16",
        ),
        (
            dict(dtype="fp8", fp8_recipe="rowwise"),
            "fp8_recipe: expected one of 'delayed', 'tensorwise', 'blockwise'",
        ),
        (
            dict(dtype="fp8", fp8_recipe="delayed", stack="torchtitan-2025"),
            "fp8_recipe: stack torchtitan-2025 runs FP8 with tensorwise scaling, not delayed",
        ),
    ],
)
def test_a_recipe_outside_fp8_or_its_stack_is_refused(kw, message):
    with pytest.raises(an.InputError, match=message):
        an.Plan("llama3-8b", "h100-sxm", an.Layout(dp=8), seq_len=4096, global_batch=64, **kw)


def test_the_command_line_takes_the_recipe(capsys):
    import json

    from analytic.cli.main import main

    # the command line's default
    layout = an.Layout(tp=8, pp=4, dp=2, zero=1, sequence_parallel=True)
    args = (
        "step --model llama3-70b --hardware h100-sxm --tp 8 --pp 4 --dp 2 --zero 1 --seq 8192"
        " --global-batch 512 --dtype fp8 --json"
    ).split()
    steps = {}
    for recipe in ("delayed", "blockwise"):
        assert main([*args, "--fp8-recipe", recipe]) == 0
        lines = json.loads(capsys.readouterr().out)["lines"]
        steps[recipe] = next(line["value"] for line in lines if line["key"] == "step_time")
        plan = an.Plan("llama3-70b", "h100-sxm", layout, dtype="fp8", fp8_recipe=recipe, **KW)
        assert steps[recipe] == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-12)
    assert steps["delayed"] < steps["blockwise"]
    assert main([*args[:-3], "--fp8-recipe", "blockwise"]) == 2
    assert "fp8_recipe: a scaling recipe of dtype fp8, not of bf16" in capsys.readouterr().err


def test_search_counts_every_layout_with_the_recipe_and_its_plans_agree(capsys):
    """search(fp8_recipe=...) counts every layout with the recipe, each row's plan takes it, and the
    command line's --fp8-recipe is the API's; a recipe the stack does not run is refused before
    anything."""
    kw = dict(gpus=64, seq_len=8192, global_batch=512, dtype="fp8", progress=False, top=3)
    res = {
        r: an.search("llama3-70b", "h100-sxm", fp8_recipe=r, **kw) for r in ("delayed", "blockwise")
    }
    assert an.search("llama3-70b", "h100-sxm", **kw).best.fp8_recipe == "delayed"  # the stack's
    for recipe, found in res.items():
        best = found.best
        plan = best.plan(
            an.model("llama3-70b"), an.hardware("h100-sxm"), seq_len=8192, global_batch=512,
            dtype="fp8",
        )
        assert (best.fp8_recipe, plan.fp8_recipe) == (recipe, recipe)
        assert plan.step_time().to("s").magnitude == pytest.approx(best.step_time, rel=1e-9)
    same = res["delayed"].best.layout
    blockwise = an.Plan(
        "llama3-70b",
        "h100-sxm",
        same,
        microbatch_size=res["delayed"].best.microbatch_size,
        seq_len=8192,
        global_batch=512,
        dtype="fp8",
        fp8_recipe="blockwise",
    )
    assert (
        blockwise.step_time()
        > res["delayed"]
        .best.plan("llama3-70b", "h100-sxm", seq_len=8192, global_batch=512, dtype="fp8")
        .step_time()
    )
    with pytest.raises(
        an.InputError, match="stack torchtitan-2025 runs FP8 with tensorwise scaling, not blockwise"
    ):
        an.search("llama3-70b", "h100-sxm", fp8_recipe="blockwise", stack="torchtitan-2025", **kw)
    from analytic.cli.main import main

    assert (
        main(
            (
                "search --model llama3-70b --hardware h100-sxm --gpus 64 --seq 8192 --global-batch"
                " 512 --dtype fp8 --fp8-recipe blockwise --top 1 --json"
            ).split()
        )
        == 0
    )
    import json

    row = json.loads(capsys.readouterr().out)["ranked"][0]
    assert row["step_time_s"] == pytest.approx(res["blockwise"].best.step_time, rel=1e-12)
    assert row["fp8_recipe"] == "blockwise"


def test_the_layers_kept_in_bf16_run_their_gemms_at_16_bits():
    """Megatron-LM's --first-last-layers-bf16: an FP8 plan of Llama 3 8B (32 layers) keeping every
    layer in BF16 runs its GEMMs in the BF16 plan's time and caches no FP8 weights; keeping the
    first and the last, 2/32 of the layers' GEMMs move from the FP8 time to the BF16 one and 2/32 of
    the weight cache goes."""
    kw = dict(seq_len=4096, global_batch=64)
    lay = an.Layout(dp=8)
    bf16 = an.Plan("llama3-8b", "h100-sxm", lay, **kw)
    # Megatron-Core refuses layers in BF16 under delayed scaling
    fp8, ends, every = (
        an.Plan("llama3-8b", "h100-sxm", lay, dtype="fp8", fp8_recipe="tensorwise", bf16_layers=k,
                **kw)
        for k in (None, (1, 1), (32, 0))
    )
    gemm = {
        k: p.value("time.gemm").to("s").magnitude
        for k, p in (("bf16", bf16), ("fp8", fp8), ("ends", ends), ("every", every))
    }
    assert gemm["every"] == pytest.approx(gemm["bf16"], rel=1e-12)
    assert gemm["ends"] == pytest.approx(
        gemm["fp8"] + 2 / 32 * (gemm["bf16"] - gemm["fp8"]), rel=1e-12
    )
    weights = {
        k: p.memory().weights.to("byte").magnitude
        for k, p in (("bf16", bf16), ("fp8", fp8), ("ends", ends), ("every", every))
    }
    assert weights["every"] == pytest.approx(weights["bf16"], rel=1e-12)
    assert weights["fp8"] - weights["ends"] == pytest.approx(
        2 / 32 * (weights["fp8"] - weights["bf16"]), rel=1e-9
    )


def test_layers_kept_in_bf16_are_a_low_precision_plans():
    with pytest.raises(an.InputError, match="dtype bf16 has none"):
        an.Plan(
            "llama3-8b", "h100-sxm", an.Layout(dp=8), seq_len=4096, global_batch=64,
            bf16_layers=(1, 1),
        )
    with pytest.raises(an.InputError, match="exceed the 32 layers"):
        an.Plan(
            "llama3-8b", "h100-sxm", an.Layout(dp=8), seq_len=4096, global_batch=64, dtype="fp8",
            bf16_layers=(20, 20),
        )
    from analytic.cli.main import main

    assert (
        main(
            (
                "step --model llama3-8b --hardware h100-sxm --gpus 8 --seq 4096 --global-batch 64"
                " --dtype fp8 --fp8-recipe tensorwise --bf16-layers 1,1 --json"
            ).split()
        )
        == 0
    )
    with pytest.raises(an.InputError, match="bf16_layers: Megatron-Core refuses"):
        an.Plan(
            "llama3-8b", "h100-sxm", an.Layout(dp=8), seq_len=4096, global_batch=64, dtype="fp8",
            bf16_layers=(1, 1),
        )
    assert (
        main(
            (
                "step --model llama3-8b --hardware h100-sxm --gpus 8 --seq 4096 --global-batch 64"
                " --dtype fp8 --bf16-layers 1"
            ).split()
        )
        == 2
    )
