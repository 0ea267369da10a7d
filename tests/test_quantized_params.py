"""Quantized primary weights (``Layout(quantized_params=True)``, Megatron-Core's
``--fp8-param-gather``): the weights a GPU holds and the parameter all-gather's bytes, by hand.

Llama 3 8B: 8,030,261,248 parameters, of which the embedding and the output layer (untied) hold
2 × 128,256 × 4,096 = 1,050,673,152; the linears (with their norms, as memory.fp8_weight_cache
counts them) the other 6,979,588,096. On 8 GPUs under the distributed optimizer (ZeRO-1) a GPU
holds them all and the ring all-gather moves 7/8 of them through each GPU."""

import json
from fractions import Fraction

import pytest

import analytic as an
from analytic.cli.main import main

PARAMS, ENDS = 8_030_261_248, 2 * 128_256 * 4_096
LINEAR = PARAMS - ENDS
RING = Fraction(7, 8)


def _plan(hardware="h100-sxm", dtype="fp8", quantized=True, **layout):
    lay = an.Layout(dp=8, zero=1, quantized_params=quantized, **layout)
    return an.Plan("llama3-8b", hardware, lay, seq_len=4096, global_batch=64, dtype=dtype,
                   stack="megatron-core")


def _weights(plan) -> float:
    return plan.memory().weights.to("byte").magnitude


def _dp_bytes(plan) -> float:
    return plan.communication()["dp"].to("byte").magnitude


@pytest.mark.parametrize(
    ("hardware", "dtype", "element", "gathered"),
    [
        # Float8Tensor: the 8-bit weight and its transpose; gathered from a uint8 buffer
        ("h100-sxm", "fp8", Fraction(2), 1),
        # MXFP8Tensor: rowwise and columnwise copies with an E8M0 scale a 32; gathered in BF16
        ("b200", "mxfp8", 2 * (1 + Fraction(1, 32)), 2),
        # NVFP4: two 4-bit copies with an E4M3 scale a 16; the packed rowwise bytes gathered
        ("b200", "nvfp4", 2 * (Fraction(1, 2) + Fraction(1, 16)), Fraction(1, 2)),
    ],
)
def test_the_weights_and_their_gather_by_hand(hardware, dtype, element, gathered):
    quantized, sixteen = _plan(hardware, dtype), _plan(hardware, dtype, quantized=False)
    assert _weights(quantized) == pytest.approx(2 * ENDS + element * LINEAR, rel=1e-12)
    # beside 16-bit weights Transformer Engine keeps the same quantized copies
    assert _weights(sixteen) == pytest.approx(2 * PARAMS + element * LINEAR, rel=1e-12)
    saved = _dp_bytes(sixteen) - _dp_bytes(quantized)
    assert saved == pytest.approx(float(RING * (2 - gathered) * LINEAR), rel=1e-9, abs=1.0)
    assert quantized.step_time() <= sixteen.step_time()
    assert "quantized_params" in quantized.layout.savers_label


def test_the_layers_kept_in_bf16_keep_16_bit_weights():
    """--first-last-layers-bf16 with one layer at each end: 2 of the 32 layers' linears stay in
    16 bits with no quantized copy, so 30/32 of the linears are kept quantized."""
    kept = an.Plan("llama3-8b", "b200", _plan("b200", "mxfp8").layout, seq_len=4096,
                   global_batch=64, dtype="mxfp8", stack="megatron-core", bf16_layers=(1, 1))
    quantized = LINEAR * Fraction(30, 32)
    element = 2 * (1 + Fraction(1, 32))
    assert _weights(kept) == pytest.approx(
        float(2 * (PARAMS - quantized) + element * quantized), rel=1e-12
    )


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        (dict(dtype="bf16"), "low-precision dtype"),
        (dict(stack="torchtitan"), "Transformer Engine stack"),
        (dict(zero=0), "distributed optimizer"),
        (dict(zero=3), "distributed optimizer"),
        (dict(offload_optimizer=0.5), "offload_optimizer"),
    ],
)
def test_refused_where_it_is_not_run_as_modelled(kw, said):
    layout = {k: kw.pop(k) for k in ("zero", "offload_optimizer") if k in kw}
    lay = an.Layout(**{"dp": 8, "zero": 1, **layout, "quantized_params": True})
    with pytest.raises(an.InputError, match=f"quantized_params: .*{said}"):
        an.Plan("llama3-8b", "h100-sxm", lay, seq_len=4096, global_batch=64,
                **{"dtype": "fp8", "stack": "megatron-core", **kw})


def test_not_a_flag_is_refused():
    with pytest.raises(an.InputError, match="quantized_params"):
        an.Layout(quantized_params="yes")


def test_the_command_line_flag(capsys):
    args = ["memory", "--model", "llama3-8b", "--hardware", "h100-sxm", "--dp", "8", "--zero", "1",
            "--seq", "4096", "--global-batch", "64", "--dtype", "fp8", "--json"]
    weights = []
    for extra in ((), ("--quantized-params",)):
        assert main([*args, *extra]) == 0
        weights.append(json.loads(capsys.readouterr().out)["weights"])
    assert weights[0] - weights[1] == pytest.approx(2 * LINEAR / 1e9, rel=1e-12)  # GB
    assert main([*args[:-3], "--dtype", "bf16", "--quantized-params"]) == 2
    assert "quantized_params" in capsys.readouterr().err


def test_search_keeps_the_distributed_optimizers_stages():
    res = an.search("llama3-8b", "h100-sxm", gpus=32, seq_len=4096, global_batch=128,
                    dtype="fp8", progress=False, top=3, layout_options={"quantized_params": True})
    assert res.ranked and {row.layout.zero for row in res.ranked} <= {1, 2}
    assert all(row.layout.quantized_params for row in res.ranked)
    row = res.ranked[0]
    plan = row.plan("llama3-8b", "h100-sxm", seq_len=4096, global_batch=128, dtype="fp8")
    assert row.memory == pytest.approx(plan.memory().total.to("byte").magnitude, rel=1e-9)
    with pytest.raises(an.InputError, match="quantized_params"):
        an.search("llama3-8b", "h100-sxm", gpus=32, seq_len=4096, global_batch=128, dtype="fp8",
                  progress=False, zero=(0, 1), layout_options={"quantized_params": True})


def test_the_gather_is_split_over_tp_and_pp_and_leaves_the_bf16_layers():
    """Over TP 2 and PP 2 a GPU gathers a quarter of the linears (the ends on average too); with a
    layer at each end kept in BF16 (tensorwise scaling), 30 of the 32 layers' linears are gathered
    in 8 bits."""
    def saved(**kw):
        dtype = kw.pop("dtype_kw", {})
        plans = [
            an.Plan("llama3-8b", "h100-sxm", an.Layout(zero=1, quantized_params=q, **kw),
                    seq_len=4096, global_batch=64, dtype="fp8", stack="megatron-core", **dtype)
            for q in (False, True)
        ]
        return _dp_bytes(plans[0]) - _dp_bytes(plans[1])

    assert saved(tp=2, pp=2, dp=8) == pytest.approx(float(RING * LINEAR / 4), rel=1e-9)
    kept = dict(fp8_recipe="tensorwise", bf16_layers=(1, 1))
    assert saved(dp=8, dtype_kw=kept) == pytest.approx(
        float(RING * LINEAR * Fraction(30, 32)), rel=1e-9
    )


def test_the_experts_gather_over_their_own_data_parallel_group():
    """Qwen3-30B-A3B on 16 GPUs, EP 8 with expert TP 1: a GPU holds 1/8 of the routed experts,
    48 × 128 × 3 × 2,048 × 768, and gathers them over its expert data-parallel group of 16/8 = 2
    ranks; the dense linears (48 layers of attention, 19,140,864 parameters each with their norms
    and router, and the final norm) over all 16. FP8 gathers a byte of each where BF16 gathers
    two."""
    routed, dense = 48 * 128 * 3 * 2048 * 768, 48 * 19_140_864 + 2048
    expected = Fraction(15, 16) * dense + Fraction(1, 2) * Fraction(routed, 8)
    # a layer at each end kept in BF16 (tensorwise scaling): 46 of the 48 gathered in 8 bits
    kept = dict(fp8_recipe="tensorwise", bf16_layers=(1, 1))
    for kw, share in (({}, 1), (kept, Fraction(46, 48))):
        plans = [
            an.Plan("qwen3-30b-a3b", "h100-sxm",
                    an.Layout(dp=16, ep=8, etp=1, zero=1, quantized_params=q), seq_len=4096,
                    global_batch=64, dtype="fp8", stack="megatron-core", **kw)
            for q in (False, True)
        ]
        saved = _dp_bytes(plans[0]) - _dp_bytes(plans[1])
        assert saved == pytest.approx(float(expected * share), rel=1e-9)


def test_the_story_says_what_the_weights_are(capsys):
    """`analytic step`'s weights line names what it counts: 16-bit weights, 16-bit weights beside
    Transformer Engine's FP8 copies, or FP8 weights with the ends in 16 bits (the plan's sources
    say which)."""
    args = ["step", "--model", "llama3-8b", "--hardware", "h100-sxm", "--dp", "8", "--zero", "1",
            "--seq", "4096", "--global-batch", "64"]
    said = {}
    for extra in ((), ("--dtype", "fp8"), ("--dtype", "fp8", "--quantized-params")):
        assert main([*args, *extra]) == 0
        said[extra] = next(
            ln.split("  ")[1].strip() for ln in capsys.readouterr().out.splitlines()
            if "weights" in ln and "master" not in ln
        )
    assert list(said.values()) == [
        "16-bit weights",
        "16-bit weights and their FP8 copies",
        "FP8 weights (the embedding and the output layer in 16 bits)",
    ]
