"""Hybrid Mamba-2 / attention / MoE models (Nemotron-H, Nemotron 3): counts against hand counts and
published totals, and plans against the transformer a hybrid pattern of attention-FFN pairs is."""

import json
from pathlib import Path

import pytest

import analytic as an
from analytic.core.errors import InputError, LayoutError

HF = Path(__file__).resolve().parent / "data" / "hf"
SMALL = dict(
    hidden=256, heads=8, kv_heads=2, vocab=1000, ffn_hidden=512, mlp="relu2", position="rope"
)


def test_a_nemotron_3_nano_mamba_layer_by_hand():
    """One Mamba-2 layer of Nemotron 3 Nano from its shapes: in_proj 2,688 × (2·4,096 + 2·8·128 +
    64), a width-4 convolution with bias over 4,096 + 2·8·128 channels, A, D and dt's bias per head,
    the gated norm's 4,096, out_proj 4,096 × 2,688, and the layer's input norm."""
    m = an.model("nemotron-3-nano")
    by_hand = 2688 * 10304 + 6144 * 4 + 6144 + 3 * 64 + 4096 + 4096 * 2688 + 2688
    mamba = an.formula("model.params.mamba2").bind(m.inputs()).value().magnitude
    assert mamba + m.hidden == by_hand


def test_a_nemotron_3_nano_mamba_layer_saves_by_hand():
    """What one Mamba-2 layer of Nemotron 3 Nano (h = 2,688; 64 heads of 64, 8 groups of state
    128) keeps a token in BF16, as Megatron-Core runs it: the input norm's input and output
    (2 × 2 × 2,688), the input projection's output z, x, B, C, dt (2 × (2 × 4,096 + 2 × 8 × 128 +
    64)), the scan's output, the gated output the group norm saves and that norm's output the output
    projection saves (3 × 2 × 4,096): 55,936 bytes; at TP 2 the inner tensors halve."""
    m = an.model("nemotron-3-nano")
    by_hand = 4 * 2688 + 2 * (2 * 4096 + 2 * 8 * 128 + 64) + 3 * 2 * 4096
    assert by_hand == 55936
    for tp, sp, want in ((1, "", by_hand), (2, "", 4 * 2688 + (by_hand - 4 * 2688) / 2),
                         (2, "_sp", by_hand / 2)):
        f = an.formula(f"memory.activations.mamba2{sp}")
        values = {k: v for k, v in m.inputs().items() if k in f.symbols}
        got = f.evaluate(**values, seq_len=1, microbatch_size=1, tp=tp).to("byte").magnitude
        assert got == want


def test_the_nemotron_3_counts_by_kind():
    nano, super_ = an.model("nemotron-3-nano"), an.model("nemotron-3-super")
    assert (nano.mamba_blocks, nano.moe_blocks, nano.attention_blocks, nano.dense_blocks) == (
        23,
        23,
        6,
        0,
    )
    # Super: 40 Mamba-2, 40 MoE and 8 attention layers, and an MTP module of an attention and an MoE
    # layer
    assert (super_.mamba_blocks, super_.moe_blocks, super_.attention_blocks, super_.blocks) == (
        40,
        41,
        9,
        90,
    )


def test_nemotron_3_super_latent_experts_by_hand():
    """A LatentMoE layer of Nemotron 3 Super: 512 experts of two 1,024 × 2,688 matrices, the shared
    experts' two 4,096 × 5,376, the router 4,096 × 512, the down and up projections 4,096 × 1,024
    each, the norm."""
    m = an.model("nemotron-3-super")
    layer = 512 * 2 * 1024 * 2688 + 2 * 4096 * 5376 + 4096 * 512 + 2 * 4096 * 1024 + 4096
    mamba = 4096 * (2 * 8192 + 2 * 8 * 128 + 128) + 10240 * 5 + 3 * 128 + 8192 + 8192 * 4096 + 4096
    attention = 4096 * 128 * (2 * 32 + 2 * 2) + 4096
    embeddings = 2 * 131072 * 4096 + 4096
    assert m.total_params == 40 * layer + 40 * mamba + 8 * attention + embeddings


def test_nemotron_3_active_counts_as_published():
    """Nano: 3.6B with the embeddings (the report's 3.2B without the input table: 3.58 - 0.35).
    Super's name says 12B: 12.77B with both tables, 12.23B without the input table."""
    nano, super_ = an.model("nemotron-3-nano"), an.model("nemotron-3-super")
    assert nano.active_params == pytest.approx(3.6e9, rel=0.01)
    assert nano.active_params - 131072 * 2688 == pytest.approx(3.2e9, rel=0.01)
    assert super_.active_params - 131072 * 4096 == pytest.approx(12e9, rel=0.02)


@pytest.mark.parametrize("name", ["nemotron-3-nano", "nemotron-3-super"])
def test_a_nemotron_3_preset_is_its_config(name):
    assert an.Model.from_hf(HF / f"{name}.json", name=name) == an.model(name)


def test_layers_block_type_reads_as_the_pattern():
    cfg = json.loads((HF / "nemotron-3-nano.json").read_text())
    names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    listed = {k: v for k, v in cfg.items() if k != "hybrid_override_pattern"}
    listed["layers_block_type"] = [names[c] for c in cfg["hybrid_override_pattern"]]
    assert an.Model.from_hf(listed, name="nemotron-3-nano") == an.model("nemotron-3-nano")


@pytest.mark.parametrize(
    "change, match",
    [
        ({"num_hidden_layers": 51}, "num_hidden_layers 51"),
        ({"hybrid_override_pattern": "MEMX" * 13}, "layer_pattern"),
        ({"mlp_hidden_act": "silu"}, "mlp_hidden_act"),
        ({"n_group": 8, "topk_group": 2}, "n_group"),
        ({"num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E*E"}, "MTP module"),
        ({"moe_shared_expert_intermediate_size": 1000}, "not a multiple"),
        ({"layers_block_type": [["mamba"]] * 52}, "layers_block_type"),
    ],
)
def test_a_nemotron_config_the_reader_cannot_map_is_one_error(change, match):
    cfg = {**json.loads((HF / "nemotron-3-nano.json").read_text()), **change}
    with pytest.raises(InputError, match=match):
        an.Model.from_hf(cfg)


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(layers=3, layer_pattern="*-"), "2 layers"),
        (dict(layers=2, layer_pattern="*E"), "needs experts"),
        (dict(layers=2, layer_pattern="M*"), "ssm_heads"),
        (
            dict(
                layers=2, layer_pattern="M-", ssm_heads=4, ssm_head_dim=8, ssm_state=8, ssm_groups=1
            ),
            "attention layer",
        ),
        (dict(layers=2, ssm_heads=4), "without a layer_pattern"),
        (
            dict(layers=2, layer_pattern="*E", experts=4, topk=1, mlp="swiglu", moe_latent=64),
            "ungated",
        ),
    ],
)
def test_a_hybrid_model_that_does_not_hold_together_is_refused(fields, match):
    with pytest.raises(InputError, match=match):
        an.Model(**{**SMALL, **fields})


def _without_dp(plan) -> float:
    """The step but its exposed DP traffic, in seconds."""
    return (plan.step_time() - plan.time_breakdown()["dp"]).to("s").magnitude


@pytest.mark.parametrize("tp, pp", [(1, 1), (2, 1), (2, 2)])
def test_a_pattern_of_attention_mlp_pairs_plans_as_the_transformer(tp, pp):
    """A hybrid "*-" × n is the n-block transformer with the same parts: its parameters, memory,
    FLOPs and step time are the transformer's, counted through the hybrid model's kinds, but for the
    DP traffic's buckets, one a layer: the hybrid's are twice as many, each half as large (the same
    bytes, more collectives, a smaller first gather and last reduction)."""
    dense = an.Model(layers=4, **SMALL)
    hybrid = an.Model(layers=8, layer_pattern="*-" * 4, **SMALL)
    assert hybrid.total_params == dense.total_params
    lay = an.Layout(tp=tp, pp=pp, dp=4, sequence_parallel=tp > 1)
    a, b = (an.Plan(m, "h100-sxm", lay, global_batch=16, seq_len=1024) for m in (dense, hybrid))
    assert _without_dp(b) == pytest.approx(_without_dp(a), rel=1e-12)
    assert b.communication()["dp"].magnitude == pytest.approx(a.communication()["dp"].magnitude)
    assert b.memory().total.magnitude == pytest.approx(a.memory().total.magnitude, rel=1e-12)
    assert b.hardware_flops().magnitude == pytest.approx(a.hardware_flops().magnitude, rel=1e-12)


def test_a_pattern_of_attention_moe_pairs_with_mtp_plans_as_the_transformer():
    moe = dict(SMALL, experts=8, topk=2, expert_ffn_hidden=128, shared_experts=1, mtp_modules=1)
    dense = an.Model(layers=4, **moe)
    hybrid = an.Model(layers=8, layer_pattern="*E" * 4, **moe)
    assert (hybrid.total_params, hybrid.active_params) == (dense.total_params, dense.active_params)
    lay = an.Layout(tp=2, pp=2, dp=4, ep=2, sequence_parallel=True)
    a, b = (an.Plan(m, "h100-sxm", lay, global_batch=16, seq_len=1024) for m in (dense, hybrid))
    assert _without_dp(b) == pytest.approx(_without_dp(a), rel=1e-12)
    assert b.hardware_flops().magnitude == pytest.approx(a.hardware_flops().magnitude, rel=1e-12)
    assert b.memory().total.magnitude == pytest.approx(a.memory().total.magnitude, rel=1e-12)


def test_mamba_layers_add_their_scans_to_the_flops():
    """PaLM's count of a model of two Mamba-2, one attention and one MLP layer: 6N per token,
    12·a·d_h·s for the attention layer, and three forwards of each scan, 7·H·P·N FLOPs per token
    (Megatron-LM's hybrid_flops)."""
    m = an.Model(
        layers=4, layer_pattern="M*M-", ssm_heads=8, ssm_head_dim=32, ssm_state=16, ssm_groups=2,
        **SMALL,
    )
    p = an.Plan(m, "h100-sxm", an.Layout(dp=4), global_batch=16, seq_len=1024)
    per_token = 6 * m.active_params + 12 * 8 * 32 * 1024 + 2 * 3 * 7 * 8 * 32 * 16
    assert p.model_flops("palm").magnitude == pytest.approx(16 * 1024 * per_token)


def test_context_parallelism_over_mamba_layers_is_refused():
    with pytest.raises(LayoutError, match="Mamba-2"):
        an.Plan("nemotron-3-nano", "h100-sxm", an.Layout(cp=2, dp=4), global_batch=16, seq_len=4096)
    with pytest.raises(LayoutError, match="Mamba-2 heads"):
        an.Plan(
            an.Model(
                layers=2, layer_pattern="M*", ssm_heads=6, ssm_head_dim=32, ssm_state=16,
                ssm_groups=2, **SMALL,
            ),
            "h100-sxm",
            an.Layout(tp=4, dp=1),
            global_batch=4,
            seq_len=1024,
        )


def test_fp8_caching_of_an_ungated_mlp_is_refused():
    """DeepSeek-V3's FP8 caching saves a SwiGLU's inputs and products; an ungated MLP's are not
    counted."""
    moe = dict(SMALL, experts=8, topk=2, expert_ffn_hidden=128)
    with pytest.raises(InputError, match="SwiGLU"):
        an.Plan(
            an.Model(layers=4, **moe), "h100-sxm", an.Layout(dp=4, fp8_activations=True),
            global_batch=16, seq_len=1024,
        ).memory()
