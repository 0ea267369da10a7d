"""What an MLA attention half and an MoE MLP half save for their backward, measured on real bf16
tensors against the catalogue's counts, and DeepSeek-V3's layer under its recompute modules by
hand."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import analytic as an
from analytic.reference.saved import LegacyLlamaLayer, MLAHalf, MoEHalf, saved_bytes

TOKENS, H = 128, 256


def per_token(name, **kw):
    return (
        an.formula(name)
        .evaluate(seq_len=1, microbatch_size=1, tp=1, hidden=H, **kw)
        .to("byte")
        .magnitude
    )


def test_an_mla_half_saves_what_the_count_says():
    """A small MLA half (4 heads of 32 + 16 RoPE dimensions, latents of 96 and 64) keeps 2,992 bytes
    a token by the formula; torch sees the same, plus its three norms' fp32 statistics (4 bytes a
    row each), which the count leaves out."""
    dims = dict(heads=4, head_dim=32, rope_dim=16, q_lora_rank=96, kv_lora_rank=64)
    want = per_token("memory.activations.attention_mla", **dims)
    assert want == 2992
    got = saved_bytes(MLAHalf(H, 4, 32, 16, 96, 64), TOKENS, H)
    assert sum(got.values()) == TOKENS * (want + 3 * 4)


def test_an_moe_half_saves_what_the_count_says():
    """8 experts of 64, top-2, one shared: the norm's input and output, the two routed copies of
    each token and the gate, up and product of 3 experts: 3,200 bytes a token. torch also keeps the
    norm's statistics and the two fp32 routing probabilities, which the count leaves out (4 + 2 × 4
    bytes)."""
    dims = dict(topk=2, shared_experts=1, expert_ffn_hidden=64)
    want = per_token("memory.activations.mlp_moe", **dims)
    assert want == 4 * H + 2 * 2 * H + 6 * 3 * 64 == 3200
    got = saved_bytes(MoEHalf(H, 8, 2, 1, 64), TOKENS, H)
    assert got["bfloat16"] == TOKENS * want
    assert got["float32"] == TOKENS * (4 + 2 * 4)


@pytest.mark.parametrize("batch", [1, 2])
def test_a_legacy_megatron_layer_saves_what_the_stack_count_says(batch):
    """Megatron-LM's Llama layer before Megatron-Core (4 heads of 64, SwiGLU of 160): the fused
    count (5,072 bytes a token with the softmax statistics) plus the stack's extras: two 1-byte
    dropout masks (2 × 256), the SiLU's output (2 × 160) and, with more than one sequence a
    microbatch, the attention output's contiguous copy (2 × 256). torch also keeps the two norms'
    fp32 statistics (2 × 4 bytes)."""
    dims = dict(heads=4, kv_heads=4, head_dim=64, ffn_hidden=160)
    fused = per_token("memory.activations.layer_flash_swiglu", **dims)
    assert fused == 8 * H + 4 * 256 + 4 * 4 + 4 * 256 + 6 * 160 == 5072
    values = dict(seq_len=1, microbatch_size=batch, tp=1, hidden=H, **dims)

    def extra(name):
        f = an.formula(f"memory.activations.legacy.{name}")
        return (
            f.evaluate(**{k: v for k, v in values.items() if k in f.symbols}).to("byte").magnitude
            / batch
        )

    extras = {
        name: extra(name) for name in ("dropout_masks", "attention_output_copy", "silu_output")
    }
    assert extras == {
        "dropout_masks": 2 * H,
        "attention_output_copy": 2 * H if batch > 1 else 0,
        "silu_output": 2 * 160,
    }
    got = saved_bytes(LegacyLlamaLayer(H, 4, 160), TOKENS, H, batch=batch)
    tokens = TOKENS * batch
    assert got["bool"] == tokens * extras["dropout_masks"]
    assert got["bfloat16"] + got["bool"] + got["float32"] == tokens * (
        fused + sum(extras.values()) + 2 * 4
    )


def test_the_legacy_stack_adds_its_extras_to_a_plan():
    """Llama 3 8B at TP2 (no SP), microbatch 2 of 4,096 tokens: the stack's layer keeps, per token,
    the fused count plus 2h of masks, 2h/t of the attention output's copy and 2h_ff/t of the SiLU's
    output."""
    kw = dict(seq_len=4096, global_batch=16, microbatch_size=2)
    lay = an.Layout(tp=2, dp=4, sequence_parallel=False)
    legacy, core = (
        an.Plan(an.model("llama3-8b"), an.hardware("h100-sxm"), lay, stack=stack, **kw)
        .expr("memory.activations.layer")
        .value()
        .to("byte")
        .magnitude
        for stack in ("megatron-lm-2023", "megatron-core")
    )
    assert legacy - core == 4096 * 2 * (2 * 4096 + 2 * 4096 / 2 + 2 * 14336 / 2)


def test_the_legacy_stack_keeps_no_silu_output_in_a_gelu_layer():
    """GPT-3's GELU layer on the legacy stack (TP 8, no SP, microbatch 2 of 2,048 tokens) keeps the
    two dropout masks (2h a token) and the attention output's copy (2h/t), and no SiLU output."""
    kw = dict(seq_len=2048, global_batch=16, microbatch_size=2)
    lay = an.Layout(tp=8, dp=1, sequence_parallel=False)
    legacy, core = (
        an.Plan(an.model("gpt3-175b"), an.hardware("h100-sxm"), lay, stack=stack, **kw)
        .expr("memory.activations.layer")
        .value()
        .to("byte")
        .magnitude
        for stack in ("megatron-lm-2023", "megatron-core")
    )
    assert legacy - core == 2048 * 2 * (2 * 12288 + 2 * 12288 / 8)


def test_deepseek_v3_layer_under_its_recompute_modules():
    """DeepSeek-V3's MoE layer (DeepSeek-V3 §3.2.3: every RMSNorm and MLA's up-projections
    recomputed; §3.3.2: the experts' SwiGLU output recomputed), by hand, per token in bf16: the two
    norms' inputs (2 × 2 × 7168), the query latent (2 × 1536), the key/value latent with the RoPE
    key (2 × 576), the attention output (2 × 128 × 128) and its statistics (4 × 128); the 8 routed
    copies (8 × 2 × 7168), the routed gate and up projections (8 × 4 × 2048) and the shared expert's
    gate, up and product (6 × 2048): 258,688 bytes, against 455,296 with nothing recomputed."""
    want = (
        2 * 2 * 7168
        + 2 * 1536
        + 2 * 576
        + 2 * 128 * 128
        + 4 * 128
        + 8 * 2 * 7168
        + 8 * 4 * 2048
        + 6 * 2048
    )
    assert want == 258688
    lay = an.Layout(pp=16, dp=128, ep=64, zero=1)
    kw = dict(seq_len=4096, global_batch=15360)
    saver = an.Plan(
        an.model("deepseek-v3"),
        an.hardware("h800"),
        lay.replace(
            recompute="selective", recompute_modules=("layernorm", "mla_up_proj", "moe_act")
        ),
        **kw,
    )
    plain = an.Plan(an.model("deepseek-v3"), an.hardware("h800"), lay, **kw)
    for plan, bytes_ in ((saver, want), (plain, 455296)):
        assert plan.expr("memory.activations.layer").value().to("byte").magnitude == 4096 * bytes_


def test_deepseek_v3_layer_with_its_activations_cached_in_fp8():
    """DeepSeek-V3 §3.3.2 caches what a Linear saves, and the SwiGLU's inputs, in FP8: on top of its
    recompute modules, the 8 routed copies (8 × 7168 bytes), the gate and up projections of the 8
    routed and the shared expert (2 × 9 × 2048) and the shared expert's product (2048, the routed
    ones are recomputed) take 1 byte an element instead of 2: 162,432 bytes a token. The norms' and
    latents' outputs are recomputed, so caching frees nothing of them."""
    want = 258688 - 8 * 7168 - 2 * 9 * 2048 - 2048
    assert want == 162432
    lay = an.Layout(
        pp=16,
        dp=128,
        ep=64,
        zero=1,
        recompute="selective",
        recompute_modules=("layernorm", "mla_up_proj", "moe_act"),
        fp8_activations=True,
    )
    plan = an.Plan(
        an.model("deepseek-v3"), an.hardware("h800"), lay, seq_len=4096, global_batch=15360,
        dtype="fp8", fp8_recipe="tensorwise",
    )
    assert plan.expr("memory.activations.layer").value().to("byte").magnitude == 4096 * want


def test_fp8_caching_keeps_mlas_latents_in_a_byte_where_their_up_projections_are_not_recomputed():
    """DeepSeek-V3 with its norms and experts' activation recomputed but not its up-projections:
    caching in FP8 (per-tensor scales) frees, against the same layer in BF16, a byte an element of
    the routed copies (8 × 7168), the experts' gate and up projections (2 × 9 × 2048), the shared
    expert's product (2048) and the up-projections' inputs, the query and key/value latents' norm
    outputs (1536 + 512): 98,304 bytes a token. Under TP 2 with sequence parallelism the routed
    copies stay whole on each rank and the rest is split in two."""

    def per_token(fp8, tp=1):
        lay = an.Layout(
            tp=tp,
            pp=16,
            dp=128 // tp,
            ep=64,
            zero=1,
            recompute="selective",
            sequence_parallel=tp > 1,
            recompute_modules=("layernorm", "moe_act"),
            fp8_activations=fp8,
        )
        plan = an.Plan(
            an.model("deepseek-v3"), an.hardware("h800"), lay, seq_len=4096, global_batch=15360,
            **(dict(dtype="fp8", fp8_recipe="tensorwise") if fp8 else {}),
        )
        return plan.expr("memory.activations.layer").value().to("byte").magnitude / 4096

    assert per_token(False) - per_token(True) == 8 * 7168 + 2 * 9 * 2048 + 2048 + (1536 + 512)
    assert (
        per_token(False, 2) - per_token(True, 2)
        == 8 * 7168 + (2 * 9 * 2048 + 2048 + 1536 + 512) / 2
    )


def test_fp8_caching_of_a_dense_layer_halves_its_norm_outputs_and_swiglu():
    """Llama 3 8B in FP8 with its activations cached in FP8 (per-tensor scales): against the layer
    in BF16, the two norms' outputs (2 × 4096) and the SwiGLU's gate, up and product (3 × 14336)
    take a byte an element less: 139,392 − 51,200 bytes a token."""
    kw = dict(seq_len=4096, global_batch=8)
    plans = [
        an.Plan(an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(fp8_activations=f), **kw,
                dtype="fp8" if f else "bf16")
        for f in (False, True)
    ]
    per_token = [
        p.expr("memory.activations.layer").value().to("byte").magnitude / 4096 for p in plans
    ]
    assert per_token == [139392, 139392 - 2 * 4096 - 3 * 14336]
    sp = [
        an.Plan(
            an.model("llama3-8b"),
            an.hardware("h100-sxm"),
            an.Layout(tp=2, sequence_parallel=True, fp8_activations=f),
            **kw,
            dtype="fp8" if f else "bf16",
        )
        for f in (False, True)
    ]
    split = [p.expr("memory.activations.layer").value().to("byte").magnitude / 4096 for p in sp]
    assert split[0] - split[1] == (2 * 4096 + 3 * 14336) / 2  # TP 2 with SP: each split in two
    with pytest.raises(an.InputError, match="fp8_activations"):
        an.Plan(
            an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(fp8_activations=True),
            seq_len=4096, global_batch=8,
        )


@pytest.mark.parametrize(
    "modules,error,model",
    [
        (("mla_up_proj",), "multi-head latent attention", "llama3-8b"),
        (("moe_act",), "MoE layers", "llama3-8b"),
        (("mlp",), "dense MLP layers", "qwen3-30b-a3b"),
    ],
)
def test_a_recompute_module_the_model_lacks_is_refused(modules, error, model):
    with pytest.raises(an.InputError, match=error):
        an.Plan(
            an.model(model),
            an.hardware("h100-sxm"),
            an.Layout(recompute="selective", recompute_modules=modules),
            seq_len=4096,
            global_batch=8,
        )


def test_recompute_modules_are_checked():
    """Named from Megatron-Core's list, under selective recomputation only, not on a stack that
    recomputes by op."""
    with pytest.raises(an.LayoutError, match="recompute='selective'"):
        an.Layout(recompute_modules=("layernorm",))
    with pytest.raises(an.InputError, match="recompute_modules: expected a tuple"):
        an.Layout(recompute="selective", recompute_modules="layernorm")
    with pytest.raises(an.AnalyticError, match="recompute_modules"):
        an.Layout(recompute="selective", recompute_modules=("mlp_up",))
    with pytest.raises(an.InputError, match="torchtitan"):
        an.Plan(
            an.model("llama3-8b"),
            an.hardware("h100-sxm"),
            an.Layout(recompute="selective", recompute_modules=("layernorm",)),
            seq_len=4096,
            global_batch=8,
            stack="torchtitan",
        )
    lay = an.Layout(recompute="selective", recompute_modules=["moe_act", "layernorm", "layernorm"])
    assert lay.recompute_modules == ("layernorm", "moe_act")


def test_recomputed_norms_free_two_hidden_vectors_a_token_on_a_dense_model():
    """Llama 3 8B: recomputing the two norms frees their outputs, 2 × 2 × 4096 bytes a token of the
    139,392 a layer keeps."""
    kw = dict(seq_len=4096, global_batch=8)
    plans = [
        an.Plan(
            an.model("llama3-8b"),
            an.hardware("h100-sxm"),
            an.Layout(recompute="selective", recompute_modules=mods),
            **kw,
        )
        for mods in ((), ("layernorm",))
    ]
    per_token = [
        p.expr("memory.activations.layer").value().to("byte").magnitude / 4096 for p in plans
    ]
    assert per_token == [139392, 139392 - 4 * 4096]


@st.composite
def _mla_moe_models(draw):
    """Small MLA or GQA models with MoE layers (SwiGLU experts, some dense layers first)."""
    heads = draw(st.sampled_from([4, 8, 16]))
    mla = draw(st.booleans())
    extra = (
        dict(
            attention="mla",
            q_lora_rank=draw(st.sampled_from([64, 96])),
            kv_lora_rank=draw(st.sampled_from([32, 64])),
            rope_dim=draw(st.sampled_from([8, 16])),
            kv_heads=heads,
        )
        if mla
        else dict(kv_heads=draw(st.sampled_from([1, 2, 4])))
    )
    return an.Model(
        layers=draw(st.integers(2, 8)),
        hidden=64 * heads,
        heads=heads,
        vocab=1000,
        position="rope",
        mlp="swiglu",
        ffn_hidden=draw(st.sampled_from([256, 1024])),
        experts=8,
        topk=draw(st.sampled_from([1, 2, 4])),
        shared_experts=draw(st.sampled_from([0, 1, 2])),
        expert_ffn_hidden=draw(st.sampled_from([64, 128])),
        dense_layers=draw(st.integers(0, 1)),
        **extra,
    )


@given(
    _mla_moe_models(),
    st.sets(st.sampled_from(["core_attn", "layernorm", "mla_up_proj", "moe_act"])),
    st.booleans(),
)
@settings(max_examples=15, deadline=None)
def test_savers_never_add_and_fp8_at_most_halves(model, modules, sp):
    """Recompute modules only free what a layer saves, and caching in FP8 takes at most one of each
    cached tensor's two bytes: per layer, 0 < savers ≤ none, and FP8 ≥ half of bf16 with the same
    modules."""
    modules = tuple(m for m in modules if m != "mla_up_proj" or model.attention == "mla")
    kw = dict(seq_len=512, global_batch=8, dtype="fp8", fp8_recipe="tensorwise")

    def layer(recompute_modules=(), fp8=False):
        lay = an.Layout(
            tp=2,
            dp=2,
            ep=2,
            sequence_parallel=sp,
            recompute="selective" if recompute_modules else "none",
            recompute_modules=recompute_modules,
            fp8_activations=fp8,
        )
        return (
            an.Plan(model, an.hardware("h100-sxm"), lay, **kw)
            .expr("memory.activations.layer")
            .value()
            .magnitude
        )

    plain, saved = layer(), layer(modules)
    assert 0 < saved <= plain
    assert saved / 2 <= layer(modules, fp8=True) <= saved


def test_a_dense_mlp_recomputed_by_the_mlp_module_keeps_only_its_norms_input_and_output():
    """A dense SwiGLU MLP of 160 (h = 256): the norm's input and output and the gate, up and
    product, 4h + 6·160 = 1,984 bytes a token; under Megatron-Core's "mlp" module the checkpoint
    keeps the norm's output and frees the rest: 4h = 1,024. torch also keeps the norm's fp32
    statistics (4 bytes a row)."""
    from analytic.reference.saved import DenseMLPHalf

    whole = per_token("memory.activations.mlp_swiglu", ffn_hidden=160)
    freed = (
        an.formula("memory.activations.freed.mlp_swiglu")
        .evaluate(seq_len=1, microbatch_size=1, tp=1, ffn_hidden=160)
        .to("byte")
        .magnitude
    )
    assert (whole, whole - freed) == (4 * H + 6 * 160, 4 * H) == (1984, 1024)
    for recompute, want in ((False, whole), (True, whole - freed)):
        got = saved_bytes(DenseMLPHalf(H, 160, recompute=recompute), TOKENS, H)
        assert got == {"bfloat16": TOKENS * want, "float32": TOKENS * 4}


def test_the_mlp_module_frees_a_dense_layers_mlp_and_runs_its_forward_again():
    """Llama 3 8B (32 dense layers, h = 4,096, SwiGLU of 14,336) under Megatron-Core's "mlp" module:
    a layer keeps 6 × 14,336 bytes a token fewer (139,392 − 86,016), its FP8 caching then frees only
    the two norms' outputs (a byte each of 2 × 4,096), and the step runs every layer's MLP forward
    again: 32 × 2 × 3 × 4,096 × 14,336 FLOPs a token more."""

    def plan(modules, **kw):
        lay = an.Layout(tp=1, dp=8, recompute="selective", recompute_modules=modules,
                        fp8_activations=kw.pop("fp8_activations", False))
        return an.Plan(an.model("llama3-8b"), an.hardware("h100-sxm"), lay, seq_len=4096,
                       global_batch=8, **kw)

    def per_token(p):
        return p.expr("memory.activations.layer").value().to("byte").magnitude / 4096

    core, mlp = plan(("core_attn",)), plan(("core_attn", "mlp"))
    assert (per_token(core), per_token(mlp)) == (139392, 139392 - 6 * 14336)
    tokens = 8 * 4096
    extra = mlp.hardware_flops().to("FLOP").magnitude - core.hardware_flops().to("FLOP").magnitude
    assert extra == 32 * tokens * 2 * 3 * 4096 * 14336
    assert mlp.step_time() > core.step_time()
    cached = plan(("mlp",), dtype="fp8", fp8_activations=True)
    assert per_token(mlp) - per_token(cached) == 2 * 4096
