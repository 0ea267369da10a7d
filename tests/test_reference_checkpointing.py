"""TorchTitan's op-level selective checkpointing: the bytes a Llama block keeps on real tensors
against the catalogue's count, and what a plan on the torchtitan stack holds and recomputes under
it."""

import pytest

import analytic as an
from analytic.reference.checkpointing import backward_peak_bytes, saved_bytes_per_token

SMALL = dict(hidden=256, heads=4, kv_heads=2, ffn_hidden=704)


def test_a_blocks_saved_bytes_under_the_op_policy_are_the_catalogues():
    """A bf16 Llama block (d_h 64, GQA 4:2, h_ff 704) under TorchTitan's policy keeps, per token,
    its input, Q, V, the attention output with its fp32 statistics, w1's and w2's outputs: 3,728
    bytes by the formula; the CPU's allocator sees the same to within 0.3% (norm statistics
    aside)."""
    want = (
        an.formula("memory.activations.layer_flash_swiglu_op_sac")
        .evaluate(seq_len=1, microbatch_size=1, tp=1, head_dim=64, **SMALL)
        .to("byte")
        .magnitude
    )
    assert want == 3728
    assert saved_bytes_per_token(**SMALL) == pytest.approx(want, rel=0.01)


@pytest.mark.parametrize(
    "hidden, heads, kv_heads, ffn_hidden, tokens", [(256, 4, 2, 704, 512), (256, 4, 4, 1408, 1024)]
)
def test_a_compiled_block_keeps_what_its_backward_reads(
    hidden, heads, kv_heads, ffn_hidden, tokens
):
    """The same block compiled by torch.compile around its checkpoint, as TorchTitan compiles each
    wrapped block: Inductor's partitioner keeps the eager count less w2's output (2h bytes a token),
    which only the residual sum reads, to the byte; eager keeps it (and a few kB of the CPU's
    besides)."""
    dims = dict(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn_hidden=ffn_hidden)
    want = (
        an.formula("memory.activations.layer_flash_swiglu_op_sac_compiled")
        .evaluate(seq_len=1, microbatch_size=1, tp=1, head_dim=hidden // heads, **dims)
        .to("byte")
        .magnitude
    )
    eager = (
        an.formula("memory.activations.layer_flash_swiglu_op_sac")
        .evaluate(seq_len=1, microbatch_size=1, tp=1, head_dim=hidden // heads, **dims)
        .to("byte")
        .magnitude
    )
    assert eager - want == 2 * hidden
    assert saved_bytes_per_token(**dims, tokens=tokens, compiled=True) == want
    assert saved_bytes_per_token(**dims, tokens=tokens) == pytest.approx(eager, rel=0.01)


@pytest.mark.parametrize(
    "hidden, heads, kv_heads, ffn_hidden, tokens",
    [
        (256, 4, 2, 704, 1024),
        (256, 4, 2, 1408, 512),
        (512, 8, 8, 1408, 1024),
        (256, 4, 4, 2816, 512),
    ],
)
def test_a_blocks_backward_peaks_at_the_swiglu_gradients(
    hidden, heads, kv_heads, ffn_hidden, tokens
):
    """A bf16 Llama block's backward on the CPU allocates, at its peak, exactly the two 16-bit
    gradients of the SwiGLU's gate and up projections beyond what its forward left: 4·s·h_ff
    bytes."""
    want = (
        an.formula("memory.activations.backward.swiglu_gradients")
        .evaluate(seq_len=tokens, microbatch_size=1, tp=1, ffn_hidden=ffn_hidden)
        .to("byte")
        .magnitude
    )
    assert want == 4 * tokens * ffn_hidden
    assert backward_peak_bytes(hidden, heads, kv_heads, ffn_hidden, tokens) == want


def test_a_layers_backward_gradients_join_the_plans_activations():
    """Llama 3 405B, TP8 PP16, 8,192-token microbatches, full recomputation: the first stage's peak
    is the inputs of its 8 layers for 16 microbatches in flight, one layer recomputed and the SwiGLU
    backward's 4 · 8,192 · 53,248 / 8 bytes (218 MB)."""
    m, hw = an.model("llama3-405b"), an.hardware("h100-sxm")
    plan = an.Plan(
        m,
        hw,
        an.Layout(tp=8, pp=16, dp=64, sequence_parallel=True),
        seq_len=8192,
        global_batch=2048,
    )
    assert "memory.activations.backward.swiglu_gradients" in plan.sources("memory.activations")
    full = plan.replace(layout=plan.layout.replace(recompute="full"))
    layer = full.value("memory.activations.layer").to("byte").magnitude
    inputs = 8192 // 8 * 16384 * 2  # a layer's input, split by sequence parallelism
    held = full.expr("memory.activations.first_stage").value().to("byte").magnitude
    # 16 microbatches in flight on the first stage, 8 layers each: their inputs, and one layer
    # recomputed
    assert held == pytest.approx(16 * 8 * inputs + layer + 4 * 8192 * 53248 / 8, rel=1e-12)


def test_without_the_policy_the_block_keeps_what_the_flash_count_says():
    """Every second matmul recomputed saves, for Llama 3 8B, 63,616 of the 139,392 bytes a token
    keeps per layer."""
    m = an.model("llama3-8b")
    kw = dict(
        seq_len=1, microbatch_size=1, tp=1, hidden=m.hidden, heads=m.heads, kv_heads=m.kv_heads,
        head_dim=m.head_dim, ffn_hidden=m.ffn_hidden,
    )
    op = (
        an.formula("memory.activations.layer_flash_swiglu_op_sac")
        .evaluate(**kw)
        .to("byte")
        .magnitude
    )
    full = an.formula("memory.activations.layer_flash_swiglu").evaluate(**kw).to("byte").magnitude
    assert (op, full) == (63616, 139392)


def test_torchtitans_selective_plan_holds_the_op_count_and_recomputes_three_matmuls():
    """Llama 3 8B on 8 GPUs with FSDP, one microbatch of 2 × 8,192 tokens: torchtitan's selective
    plan keeps 32 layers of 55,424 bytes a token (63,616 with eager blocks, w2's 2 × 4,096 bytes a
    token among them), the loss's 12 bytes a logit and the final norm's and output layer's inputs (2
    × 2 × 4,096 bytes a token); it executes, beyond PaLM's count, wk, wo and w3's forwards again
    (2h(a_kv·d_h + a·d_h + h_ff) FLOPs a token a layer) and FlashAttention's backward QKᵀ.
    Megatron-Core's selective keeps the flash count and recomputes the attention core."""
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    kw = dict(seq_len=8192, global_batch=16, microbatch_size=2)
    titan, plain = (
        an.Plan(m, hw, an.Layout(dp=8, zero=3, recompute=r), stack="torchtitan", **kw)
        for r in ("selective", "none")
    )
    tokens = 2 * 8192
    rest = tokens * 128256 * 12 + tokens * 2 * 2 * 4096
    assert titan.memory().activations.to("byte").magnitude == pytest.approx(
        32 * 55424 * tokens + rest, rel=1e-12
    )
    eager = titan.replace(stack="torchtitan-eager")
    assert eager.memory().activations.to("byte").magnitude == pytest.approx(
        32 * 63616 * tokens + rest, rel=1e-12
    )
    # the time model does not tell eager from compiled blocks
    assert eager.step_time().magnitude == pytest.approx(titan.step_time().magnitude, rel=1e-12)
    extra = (titan.hardware_flops() - plain.hardware_flops()).to("FLOP").magnitude
    per_token = 2 * 4096 * (8 * 128 + 32 * 128 + 14336)
    assert extra == pytest.approx(per_token * 32 * 16 * 8192, rel=1e-12)
    assert titan.step_time() > plain.step_time()
    megatron = an.Plan(
        m, hw, an.Layout(dp=8, zero=3, recompute="selective"), stack="megatron-core", **kw
    )
    flash_layer = 139392 * tokens
    assert megatron.memory().activations.to("byte").magnitude == pytest.approx(
        32 * flash_layer + tokens * 128256 * 6 + tokens * 2 * 2 * 4096, rel=1e-12
    )


def test_the_op_policy_is_refused_where_it_is_not_modelled():
    hw = an.hardware("h100-sxm")
    kw = dict(seq_len=4096, global_batch=256)
    with pytest.raises(an.InputError, match="op-level selective policy"):
        an.Plan(
            an.model("deepseek-v3"),
            hw,
            an.Layout(dp=256, ep=8, recompute="selective"),
            stack="torchtitan",
            **kw,
        )
    with pytest.raises(an.InputError, match="op-level selective policy"):
        an.Plan(
            an.model("llama3-8b"), hw, an.Layout(dp=8, recompute="selective"), stack="torchtitan",
            flash_attention=False, seq_len=4096, global_batch=8,
        )
    with pytest.raises(an.InputError, match="selective recomputation is not modelled"):
        an.Plan(
            an.model("llama3-8b"), hw, an.Layout(dp=8, recompute="selective"), stack="llm-foundry",
            seq_len=4096, global_batch=8,
        )


def test_fsdp2_holds_a_pipelined_stages_gradients_in_fp32():
    """ZeRO-3 under 1F1B keeps the stage's 16-bit parameters and its unsharded gradients: 2 + 2
    bytes a parameter on Megatron-Core, 2 + 4 on TorchTitan, whose FSDP2 accumulates them in its
    fp32 reduce dtype."""
    m, hw = an.model("llama3-70b"), an.hardware("h100-sxm")
    lay = an.Layout(tp=8, pp=4, dp=4, zero=3, sequence_parallel=True, recompute="full")
    kw = dict(seq_len=8192, global_batch=64)
    held = {
        s: an.Plan(m, hw, lay, stack=s, **kw).memory(stage=1)
        for s in ("torchtitan", "megatron-core")
    }
    stage_params = held["megatron-core"].gathered.to("byte").magnitude / 4
    assert stage_params == pytest.approx(
        20 * (2 * 8192 * 8192 + 2 * 8192 * 8 * 128 + 3 * 8192 * 28672 + 2 * 8192) / 8, rel=1e-12
    )
    assert held["torchtitan"].gathered.to("byte").magnitude == pytest.approx(
        6 * stage_params, rel=1e-12
    )


def test_full_recomputation_on_the_op_stack_repeats_a_forward():
    """Full recomputation runs every layer's forward again on either stack: a third of PaLM's
    training FLOPs more, the same on torchtitan (whose selective policy is op-level) as on
    Megatron-Core; without recomputation neither adds anything."""
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    kw = dict(seq_len=8192, global_batch=16, microbatch_size=2)

    def extra(stack):
        plans = [
            an.Plan(m, hw, an.Layout(dp=8, zero=3, recompute=r), stack=stack, **kw)
            for r in ("full", "none")
        ]
        return (plans[0].hardware_flops() - plans[1].hardware_flops()).to("FLOP").magnitude

    per_token = (
        an.formula("compute.flops_per_token_palm")
        .evaluate(
            params=m.active_params_formula().value(),
            layers=m.layers,
            heads=m.heads,
            head_dim=m.head_dim,
            seq_len=8192,
        )
        .to("FLOP/token")
        .magnitude
    )
    assert extra("torchtitan") == pytest.approx(per_token * 16 * 8192 / 3, rel=1e-9)
    assert extra("torchtitan") == pytest.approx(extra("megatron-core"), rel=1e-12)
