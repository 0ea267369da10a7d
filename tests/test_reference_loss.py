"""Each stack's loss_bytes (presets/stacks.toml) against the peak its loss measures on real
tensors."""

import pytest

import analytic as an
from analytic.presets import stack
from analytic.reference.loss import peak_bytes_per_logit

#: stack → (loss_bytes, loss_bytes_tp): the losses of analytic.reference.loss that each stack runs
STACK_LOSSES = {
    "megatron-core": ("megatron", "megatron"),
    "megatron-lm-2021": ("megatron", "megatron"),
    "deepspeed": ("megatron", "megatron"),
    "torchtitan": ("torchtitan", "torchtitan_loss_parallel"),
    "torchtitan-2025": ("torchtitan_compiled", "torchtitan_compiled_loss_parallel"),
    "torchtitan-2025-eager": ("torchtitan", "torchtitan_loss_parallel"),
}


@pytest.fixture(scope="module")
def measured():
    """Eager losses first, then compiled ones: a compiled sharded loss after an eager one on the
    same mesh, the order in which a sharded loss once failed to compile."""
    names = sorted(
        {n for pair in STACK_LOSSES.values() for n in pair}, key=lambda n: ("compiled" in n, n)
    )
    return {name: peak_bytes_per_logit(name) for name in names}


@pytest.mark.parametrize("name", sorted(STACK_LOSSES))
def test_a_stacks_loss_bytes_are_its_losss_measured_peak(name, measured):
    alone, parallel = STACK_LOSSES[name]
    props = stack(name)
    assert props["loss_bytes"] == pytest.approx(measured[alone], abs=0.01)
    assert props.get("loss_bytes_tp", props["loss_bytes"]) == pytest.approx(
        measured[parallel], abs=0.01
    )


def test_megatrons_in_place_loss_holds_half_of_torchtitans(measured):
    """An fp32 copy overwritten in place (Megatron) against a copy, a log-softmax output and their
    gradients (cross_entropy on .float()): 6 against 12 bytes per logit, 16-bit logits included;
    compiled, the fp32 tensors fuse away and the 16-bit logits and their gradient remain (4)."""
    assert measured["megatron"] == pytest.approx(6, abs=0.01)
    assert measured["torchtitan"] == pytest.approx(12, abs=0.01)
    assert measured["torchtitan_compiled"] == pytest.approx(4, abs=0.01)


def test_the_last_stage_holds_the_stacks_loss():
    """Llama 3 8B on one GPU, one microbatch of 8,192 tokens: the activations are the layers' plus
    the loss's working set, 8,192 × 128,256 logits at 6 (Megatron) or 12 (TorchTitan) bytes each,
    plus the final norm's and the output layer's 16-bit inputs (2 × 2 × 8,192 × 4,096 bytes)."""
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    plans = {
        s: an.Plan(m, hw, an.Layout(), seq_len=8192, global_batch=1, stack=s)
        for s in ("megatron-core", "torchtitan")
    }
    # memory_flash_swiglu by hand
    per_layer = 8192 * (8 * 4096 + 4 * 32 * 128 + 4 * 8 * 128 + 6 * 14336 + 4 * 32)
    for s, per_logit in (("megatron-core", 6), ("torchtitan", 12)):
        mem = plans[s].memory()
        assert round(mem.loss.m_as("byte")) == 8192 * 128256 * per_logit
        assert round(mem.logits.m_as("byte")) == 8192 * 128256 * 2
        head = 2 * 2 * 8192 * 4096
        assert mem.activations.to("byte").magnitude == pytest.approx(
            32 * per_layer + 8192 * 128256 * per_logit + head, rel=1e-12
        )


def test_under_full_recomputation_the_loss_and_a_recomputed_layer_are_not_held_together():
    """The loss is taken after the last forward; a layer is recomputed in a backward: the last stage
    holds the kept inputs and the larger of the two (the loss with the final norm's and the output
    layer's inputs it is taken on)."""
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    plan = an.Plan(
        m, hw, an.Layout(recompute="full"), seq_len=8192, global_batch=1,
        stack="torchtitan-2025-eager",
    )
    # its fused AdamW: the step is no phase of its own (foreach's would be the peak here)
    mem = plan.memory()
    kept = 32 * 2 * 8192 * 4096
    layer = 8192 * (8 * 4096 + 4 * 32 * 128 + 4 * 8 * 128 + 6 * 14336 + 4 * 32)
    assert mem.activations.to("byte").magnitude == pytest.approx(
        kept + max(layer, 8192 * 128256 * 12 + 2 * 2 * 8192 * 4096), rel=1e-12
    )


@pytest.mark.parametrize("dtype,gathered,cp", [("bf16", 2, 1), ("fp8", 1, 1), ("bf16", 2, 2)])
def test_dtensor_tp_saves_the_gathered_norm_outputs(dtype, gathered, cp):
    """TorchTitan's TP with SP all-gathers each norm's output before the column-parallel matmuls,
    which save the gathered tensor (in 1 byte under Float8 TP, which gathers in FP8); Megatron saves
    the shard (here its BF16 count) and gathers again in the backward. Llama 3 70B at TP 8, one
    microbatch of 8,192 tokens, by hand: a layer keeps 2 × 8,192 × 8,192 × (gathered − 2/8) bytes
    more, and the last stage the output layer's 16-bit input whole, 2 × 8,192 × 8,192 × (1 − 1/8)
    bytes more; with CP 2 over twice the tokens, the same a rank."""
    m, hw = an.model("llama3-70b"), an.hardware("h100-sxm")
    titan = "torchtitan-2025-eager"  # TorchTitan's DTensor TP and eager loss, with a fused AdamW
    plans = {
        s: an.Plan(
            m,
            hw,
            an.Layout(tp=8, cp=cp, dp=1, sequence_parallel=True),
            stack=s,
            seq_len=8192 * cp,
            global_batch=1,
            dtype=dtype if s == titan else "bf16",
        )
        for s in (titan, "megatron-core")
    }
    layer, head = (
        {s: p.expr(name).value().to("byte").magnitude for s, p in plans.items()}
        for name in ("memory.activations.layer", "memory.activations")
    )
    s_h = 8192 * 8192
    assert layer[titan] - layer["megatron-core"] == pytest.approx(
        2 * s_h * (gathered - 2 / 8), rel=1e-12
    )
    loss = {s: p.memory().loss.to("byte").magnitude for s, p in plans.items()}
    more = head[titan] - head["megatron-core"] - (loss[titan] - loss["megatron-core"])
    assert more == pytest.approx(
        80 * 2 * s_h * (gathered - 2 / 8) + 2 * s_h * (1 - 1 / 8), rel=1e-9
    )


def test_under_tp_torchtitans_loss_is_its_loss_parallels():
    """TorchTitan's loss under TP runs inside loss_parallel on vocabulary-sharded logits: 16 bytes a
    logit over TP 2 or 8 (12 on one GPU); Megatron's vocabulary-parallel loss holds 6 at any t."""
    m, hw = an.model("llama3-70b"), an.hardware("h100-sxm")
    kw = dict(seq_len=8192, global_batch=8)
    for tp in (2, 8):
        for s, per_logit in (("torchtitan", 16), ("megatron-core", 6), ("torchtitan-2025", 10)):
            plan = an.Plan(m, hw, an.Layout(tp=tp, dp=1, sequence_parallel=True), stack=s, **kw)
            assert round(plan.memory().loss.m_as("byte")) == 8192 * 128256 * per_logit / tp


def test_a_stack_without_a_measured_loss_counts_the_logits_and_says_so():
    """LLM Foundry's and MaxText's losses are not measured: the loss's working set is the 16-bit
    logits alone (2 bytes each), and the plan's notes say so."""
    plan = an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(dp=8), seq_len=8192,
        global_batch=8, stack="llm-foundry",
    )
    mem = plan.memory()
    assert round(mem.loss.m_as("byte")) == round(mem.logits.m_as("byte")) == 8192 * 128256 * 2
    assert any("loss's working set is not known" in n for n in plan.notes)
