"""What Transformer Engine's linears save of their inputs under a low-precision recipe on
Megatron-Core, counted by hand per token of one layer.

Llama 3 8B (h = 4,096, 32 heads of 128, SwiGLU of 14,336) keeps 139,392 bytes a token in BF16. An
element saved quantized takes 2ρ bytes, its scales included: 1 for per-tensor FP8, 33/32 for
blockwise FP8 and MXFP8 (a byte and 1/32 of a byte of scale), 9/16 for NVFP4 (half a byte and an
E4M3 scale per 16). What Megatron-Core saves quantized of a dense layer: the two norms' outputs
(fused into the QKV projection and the MLP's first matrix, 2 × 4,096) and the down projection's
input (14,336): 22,528 elements. The output projection keeps the attention kernel's 16-bit output
except under delayed scaling, where it saves a quantized copy of it besides (32 × 128)."""

from fractions import Fraction

import pytest

import analytic as an

DENSE = 2 * 4096 + 14336  # elements a dense Llama 3 8B layer saves quantized, per token


def per_token(model, layout=None, hardware="b200", **kw):
    plan = an.Plan(
        an.model(model), an.hardware(hardware), layout or an.Layout(), seq_len=4096,
        global_batch=8, **kw,
    )
    return Fraction(plan.expr("memory.activations.layer").value().to("byte").magnitude) / 4096


@pytest.mark.parametrize(
    "dtype,recipe,width,copy",
    [
        ("fp8", "delayed", 1, 1),
        ("fp8", "tensorwise", 1, 0),
        ("fp8", "blockwise", Fraction(33, 32), 0),
        ("mxfp8", None, Fraction(33, 32), 0),
        ("nvfp4", None, Fraction(9, 16), 0),
    ],
)
def test_a_dense_layer_saves_its_linears_inputs_at_the_recipes_width(dtype, recipe, width, copy):
    """Each of the 22,528 elements takes `width` bytes instead of 2; delayed scaling adds a byte for
    each of the attention output's 4,096."""
    bf16 = per_token("llama3-8b")
    assert bf16 == 139392
    recipe_kw = {"fp8_recipe": recipe} if recipe else {}
    got = per_token("llama3-8b", dtype=dtype, **recipe_kw)
    assert got == bf16 - DENSE * (2 - width) + copy * 4096


def test_under_tp_with_sequence_parallelism_each_rank_saves_its_share():
    """TP 2 with SP: the norms' outputs are saved as each rank's sequence shard, the down
    projection's input and the attention output split by heads: every term halves."""
    lay = an.Layout(tp=2, sequence_parallel=True)
    bf16 = per_token("llama3-8b", lay)
    assert per_token("llama3-8b", lay, dtype="fp8", fp8_recipe="delayed") == (
        bf16 - Fraction(DENSE, 2) + Fraction(4096, 2)
    )


def test_a_moe_layers_router_keeps_its_16_bit_input():
    """Qwen3-30B-A3B (h = 2,048, 32 heads of 128, 8 of 128 experts of 768, no shared expert), per
    token in MXFP8: the input norm's output (2,048, fused into the QKV projection), the 8 routed
    copies (8 × 2,048) and the experts' down projections' inputs (8 × 768) are saved quantized;
    the pre-MLP norm's output stays in 16 bits for the router."""
    lay = an.Layout(ep=8, dp=8)
    bf16 = per_token("qwen3-30b-a3b", lay)
    saved = 2048 + 8 * 2048 + 8 * 768
    assert per_token("qwen3-30b-a3b", lay, dtype="mxfp8") == bf16 - saved * Fraction(31, 32)


def test_mla_down_projections_and_the_shared_experts_keep_copies():
    """DeepSeek-V3 (h = 7,168, MLA latents of 1,536 and 512, 8 routed and 1 shared expert of
    2,048), per token, MoE layer, NVFP4 (9/16 of a byte an element): MLA's two down-projections
    each quantize the input norm's output (2 × 7,168 × 9/16 for its 2 × 7,168 bytes); the latents'
    norms' outputs (1,536 + 512), the 8 routed copies (8 × 7,168) and the 9 experts' down
    projections' inputs (9 × 2,048) are saved quantized; the shared expert's first matrix keeps a
    quantized copy of the pre-MLP norm's output beside the router's 16-bit one (7,168 × 9/16)."""
    lay = an.Layout(ep=8, dp=8)
    bf16 = per_token("deepseek-v3", lay)
    q = Fraction(9, 16)
    quantized = 1536 + 512 + 8 * 7168 + 9 * 2048
    want = bf16 + 2 * 7168 * q - 2 * 7168 - quantized * (2 - q) + 7168 * q
    assert per_token("deepseek-v3", lay, dtype="nvfp4") == want


def test_recomputed_norms_leave_no_copy_and_moe_act_no_product():
    """DeepSeek-V3 under its recompute modules (layernorm, mla_up_proj, moe_act), per-tensor FP8:
    the norms' and latents' outputs are freed by the modules and Megatron-Core saves the inputs of
    their consumers unquantized (save_original_input), as it does the experts' down projections'
    under moe_act: the 8 routed copies (8 × 7,168) and the shared expert's down projection's input
    (2,048) are left to save quantized, a byte each."""
    lay = an.Layout(
        ep=8, dp=8, recompute="selective", recompute_modules=("layernorm", "mla_up_proj", "moe_act")
    )
    bf16 = per_token("deepseek-v3", lay)
    assert bf16 == 258688  # tests/test_reference_saved.py counts it
    got = per_token("deepseek-v3", lay, dtype="fp8", fp8_recipe="tensorwise")
    assert got == bf16 - 8 * 7168 - 2048


def test_the_layers_kept_in_bf16_save_their_16_bit_inputs():
    """Llama 3 8B in NVFP4 with 2 + 2 of its 32 layers kept in BF16: a layer saves the mean of
    28 quantized layers and 4 in 16 bits, as the GEMMs are timed; DeepSeek-V3's quantized copies
    (MLA's second down-projection's, the shared expert's) too, with 1 + 1 of its 61 layers in
    BF16 (the MoE layer counted above). Megatron-Core refuses layers in BF16 under delayed
    scaling."""
    bf16 = per_token("llama3-8b")
    got = per_token("llama3-8b", dtype="nvfp4", bf16_layers=(2, 2))
    assert got == bf16 - DENSE * Fraction(23, 16) * Fraction(28, 32)
    lay, q = an.Layout(ep=8, dp=8), Fraction(9, 16)
    quantized = 1536 + 512 + 8 * 7168 + 9 * 2048
    change = 2 * 7168 * q - 2 * 7168 - quantized * (2 - q) + 7168 * q
    got = per_token("deepseek-v3", lay, dtype="nvfp4", bf16_layers=(1, 1))
    want = per_token("deepseek-v3", lay) + change * Fraction(59, 61)
    assert float(got) == pytest.approx(float(want), rel=1e-12)
    with pytest.raises(an.InputError, match="bf16_layers: Megatron-Core refuses"):
        per_token("llama3-8b", dtype="fp8", fp8_recipe="delayed", bf16_layers=(2, 2))


def test_a_stack_whose_linears_save_16_bit_inputs_keeps_the_bf16_count():
    """On TorchTitan, torchao's Float8Linear saves its input as it was given (16-bit without TP's
    float8 all-gather): an FP8 plan's layer saves what the BF16 one does."""
    kw = dict(stack="torchtitan-2025", hardware="h100-sxm")
    assert per_token("llama3-8b", dtype="fp8", **kw) == per_token("llama3-8b", **kw) == 139392


def test_a_plan_names_the_formulas_of_its_quantized_inputs():
    """The layer's sources name what was counted: the freed bytes and, under delayed scaling, the
    output projection's copy."""
    plan = an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(), seq_len=4096, global_batch=8,
        dtype="fp8",
    )
    sources = plan.sources("memory.activations.layer")
    assert "memory.activations.fp8_freed.norm_output" in sources
    assert "memory.activations.fp8_freed.swiglu_products" in sources
    assert "memory.activations.quantized_copy.attention_output" in sources


def test_an_ungated_mlp_saves_its_down_projections_input_quantized():
    """Nemotron-4 340B (h = 18,432, 96 heads of 192, squared-ReLU MLP of 73,728), FP8 with delayed
    scaling: the two norms' outputs (2 × 18,432) and the down projection's input (73,728) take a
    byte, and the output projection keeps a byte of each of the attention output's 18,432."""
    bf16 = per_token("nemotron-4-340b", an.Layout(dp=8))
    got = per_token("nemotron-4-340b", an.Layout(dp=8), dtype="fp8", fp8_recipe="delayed")
    assert got == bf16 - (2 * 18432 + 73728) + 18432


def test_a_hybrid_models_mean_layer_saves_each_kinds_inputs_quantized():
    """Nemotron 3 Nano (52 layers: 23 Mamba-2, 23 MoE, 6 attention; h = 2,688; 32 heads of 128;
    6 routed experts of 1,856 in h, 2 shared), FP8 with delayed scaling, per token of the mean
    layer: an attention layer frees its norm's output (2,688) and keeps the output projection's
    copy (4,096); a Mamba-2 layer's input projection fuses its norm (2,688) and its output
    projection saves its group norm's output (64 heads of 64); an MoE layer frees its 6 routed
    copies (6 × 2,688) and 8 experts' down projections' inputs (8 × 1,856) and keeps the shared
    experts' copy of its norm's output (2,688)."""
    lay = an.Layout(ep=8, dp=8)
    bf16 = per_token("nemotron-3-nano", lay)
    change = 6 * (4096 - 2688) - 23 * (2688 + 4096) + 23 * (2688 - 6 * 2688 - 8 * 1856)
    got = per_token("nemotron-3-nano", lay, dtype="fp8", fp8_recipe="delayed")
    assert float(got) == pytest.approx(float(bf16 + Fraction(change, 52)), rel=1e-12)


@pytest.mark.parametrize(
    "recipe,ratio", [("delayed", Fraction(1, 2)), ("tensorwise", Fraction(1, 2)),
                     ("mxfp8", Fraction(33, 64))]
)
def test_a_transformer_engine_layer_saves_what_the_count_says(recipe, ratio):
    """A Llama layer as Megatron-Core builds it with Transformer Engine (h = 256, 4 heads of 64,
    SwiGLU of 160), run on real tensors with its linears' inputs quantized to E4M3: the catalogue's
    16-bit layer less what the fused norms' outputs and the down projection's input free, plus,
    under delayed scaling, the output projection's copy. torch also keeps the two norms' fp32
    statistics (2 × 4 bytes a row) and one fp32 scale per tensor quantized per tensor, which the
    count leaves out."""
    from analytic.reference.saved import QuantizedLlamaLayer, saved_bytes

    dims = dict(seq_len=1, microbatch_size=1, tp=1, hidden=256, heads=4, kv_heads=4,
                head_dim=64, ffn_hidden=160, quantized_ratio=ratio)

    def count(name):
        f = an.formula(name)
        return f.evaluate(**{k: v for k, v in dims.items() if k in f.symbols}).to("byte").magnitude

    copy = count("memory.activations.quantized_copy.attention_output")
    want = (
        count("memory.activations.layer_flash_swiglu")
        - count("memory.activations.fp8_freed.norm_outputs")
        - count("memory.activations.fp8_freed.swiglu_products")
        + (copy if recipe == "delayed" else 0)
    )
    got = saved_bytes(QuantizedLlamaLayer(256, 4, 160, recipe), 128, 256)
    per_tensor_scales = {"delayed": 4, "tensorwise": 3, "mxfp8": 0}[recipe] * 4
    assert sum(got.values()) == 128 * (want + 2 * 4) + per_tensor_scales
    assert got["float8_e4m3fn"] == 128 * (2 * 256 + 160 + (256 if recipe == "delayed" else 0))


def test_megatron_core_refuses_what_delayed_scaling_cannot_save(capsys):
    """Megatron-Core's transformer_config.py refuses, under FP8's delayed scaling, the layernorm and
    moe_act recompute modules (their consumers save their original inputs, which TE refuses with a
    delayed-scaling quantizer) and layers kept in BF16; the other modules and recipes run. The
    command line says so in one line and exits 2."""
    from analytic.cli.main import main

    kw = dict(seq_len=4096, global_batch=64, dtype="fp8")
    lay = an.Layout(ep=8, dp=8, recompute="selective")
    for modules, refused in ((("layernorm",), "layernorm"), (("moe_act", "core_attn"), "moe_act"),
                             (("layernorm", "moe_act"), "layernorm and moe_act")):
        with pytest.raises(an.InputError, match=f"Megatron-Core refuses {refused} recomputation"):
            an.Plan("deepseek-v3", "h100-sxm", lay.replace(recompute_modules=modules), **kw)
        an.Plan("deepseek-v3", "h100-sxm", lay.replace(recompute_modules=modules), **kw,
                fp8_recipe="tensorwise")
    an.Plan("deepseek-v3", "h100-sxm", lay.replace(recompute_modules=("mla_up_proj",)), **kw)
    an.Plan("llama3-8b", "h100-sxm", an.Layout(dp=8), **kw, bf16_layers=(0, 1),
            fp8_recipe="blockwise")
    with pytest.raises(an.InputError, match="bf16_layers: Megatron-Core refuses"):
        an.Plan("llama3-8b", "h100-sxm", an.Layout(dp=8), **kw, bf16_layers=(0, 1))
    argv = ("memory --model llama3-8b --hardware h100-sxm --gpus 8 --seq 4096 --global-batch 64"
            " --dtype fp8 --recompute selective --recompute-modules layernorm").split()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Megatron-Core refuses layernorm recomputation" in err[0]


def test_the_story_says_how_the_linears_inputs_are_saved(capsys):
    """`analytic step`'s activations line says the linears' inputs are saved quantized where the
    plan counts them so (its sources say which): in MXFP8 on Megatron-Core, not in BF16 and not on
    TorchTitan, whose MXFP8 linear saves its 16-bit input and weight (pytorch/ao
    torchao/prototype/moe_training/mxfp8_linear.py: save_for_backward(input_hp, weight_hp))."""
    from analytic.cli.main import main

    args = ["step", "--model", "llama3-8b", "--hardware", "b200", "--dp", "8", "--zero", "1",
            "--seq", "4096", "--global-batch", "64"]
    said = {}
    for extra in ((), ("--dtype", "mxfp8"), ("--dtype", "mxfp8", "--stack", "torchtitan-2025")):
        assert main([*args, *extra]) == 0
        said[extra] = next(
            ln for ln in capsys.readouterr().out.splitlines() if "activations held" in ln
        )
    assert ["linears' inputs saved in MXFP8" in line for line in said.values()] == [
        False, True, False
    ]
