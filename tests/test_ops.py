"""The op-level time model against hand counts: GEMM FLOPs from the parameter count (dense and MoE,
the router replicated over TP), tile and wave quantisation, the fused attention's FLOPs, what the
memory-bound kernels and the Adam step move."""

import pytest

import analytic as an

HAND = an.Hardware(
    name="x", peaks={"bf16": "100 TFLOP/s"}, hbm="800 GB", scale_up="100 GB/s", scale_out="10 GB/s"
)
GIVEN = dict(
    matmul_efficiency=0.5, stack_efficiency=1, memory_efficiency=0.9, link_efficiency=0.8,
    latency="10 us", overlap=0.5, attention_factor=0.5,
)


def _matmul_weights(m) -> int:
    """Active parameters that are matmul weights: all but the input embedding and the norms."""
    norms = (2 * m.layers + 1) * m.hidden + (2 * m.layers * m.head_dim if m.qk_norm else 0)
    return m.active_params - m.vocab * m.hidden - norms


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "mixtral-8x22b"])
def test_moe_gemms_are_six_flops_per_active_weight_and_the_router_is_replicated(name):
    """Routed experts as grouped GEMMs of tokens·k·E_p/E rows per local expert: 6 FLOPs per active
    matmul weight per token, as for a dense model. Under TP every rank runs the whole router."""
    m = an.Model.from_hf(f"tests/data/hf/{name}.json")
    tokens = 16 * 2048 / 8  # per data-parallel replica
    seconds = {}
    for tp in (1, 2):
        p = an.Plan(
            m, HAND, an.Layout(dp=8, ep=8, tp=tp), seq_len=2048, global_batch=16,
            hbm_bandwidth="1e30 B/s", **GIVEN,
        )
        seconds[tp] = p.time_breakdown(ops=True)["gemm"].to("s").magnitude
    peak = 100e12 * 0.5
    assert seconds[1] == pytest.approx(6 * _matmul_weights(m) * tokens / peak, rel=1e-9)
    router = m.hidden * m.experts * m.moe_layers
    assert seconds[2] == pytest.approx(
        6 * ((_matmul_weights(m) - router) / 2 + router) * tokens / peak, rel=1e-9
    )


@pytest.mark.parametrize(
    "n, want",
    [(1536, 384 / 396), (768, 192 / 264), (8192, 2048 / 2112), (1000, 1000 / 1024 * 256 / 264)],
)
def test_wave_quantisation_by_hand(n, want):
    """8,192 rows on an H100 (132 SMs, 128×256 tiles): 1,536 columns make 384 tiles in 3 waves (396
    slots), 768 make 192 in 2 (264), 8,192 make 2,048 in 16 (2,112); 1,000 columns fill 4 tiles of
    1,024 (tile quantisation), 256 tiles in 2 waves."""
    w = an.formula("compute.gemm.wave_efficiency").evaluate(
        gemm_count=1, gemm_m=8192, gemm_n=n, tile_m=128, tile_n=256, sms=132
    )
    assert float(w.magnitude) == pytest.approx(want, rel=1e-12)


def test_fused_attention_is_causal_flops_at_the_kernels_share_of_peak():
    """Llama 3 8B, 8 GPUs of data parallelism, 4,096 tokens: per token and layer the forward's QKᵀ
    and PV are 4·a·d_h·s FLOPs in full, the backward 2.5 of those; causal halves both; at 100
    TFLOP/s × η_att 0.6 × κ_att 0.5."""
    m = an.model("llama3-8b")
    p = an.Plan(
        m, HAND, an.Layout(dp=8), seq_len=4096, global_batch=8, attention_efficiency=0.6,
        hbm_bandwidth="2 TB/s", **GIVEN,
    )
    with pytest.raises(an.InputError, match="hbm bandwidth"):  # a hand-made accelerator without one
        an.Plan(m, HAND, an.Layout(dp=8), seq_len=4096, global_batch=8, **GIVEN).step_time()
    per_token = 4 * m.heads * m.head_dim * 4096 * 3.5 / 2
    want = per_token * 4096 * m.layers / (100e12 * 0.6 * 0.5)
    assert p.time_breakdown(ops=True)["attention"].to("s").magnitude == pytest.approx(
        want, rel=1e-12
    )


def test_memory_bound_kernels_by_hand():
    """Llama 3 8B without TP: per token, each layer's norms and residual adds move 22h elements (10h
    forward, 12h backward), SwiGLU 8h_ff, rotary embeddings 4(a + a_kv)d_h over both passes; the
    cross-entropy 3V; 2 bytes each, at 2 TB/s × 0.9."""
    m = an.model("llama3-8b")
    p = an.Plan(
        m, HAND, an.Layout(dp=8), seq_len=4096, global_batch=8, hbm_bandwidth="2 TB/s", **GIVEN
    )
    per_token = (
        m.layers * (22 * m.hidden + 8 * m.ffn_hidden + 4 * (m.heads + m.kv_heads) * m.head_dim)
        + 3 * m.vocab
    )
    want = per_token * 4096 * 2 / (2e12 * 0.9)
    assert p.time_breakdown(ops=True)["memory_bound"].to("s").magnitude == pytest.approx(
        want, rel=1e-12
    )


@pytest.mark.parametrize("recompute, passes", [("none", 2), ("full", 3)])
def test_torchtitan_copies_the_whole_tensor_at_each_sequence_parallel_collective(recompute, passes):
    """Sequence parallelism over TP 4 takes the residual stream's norms and adds (10h forward, 12h
    backward per token) to s/t tokens a rank; TorchTitan, gathering and scattering on the sequence
    dimension, also copies (aten.cat) the whole [b, s, h] tensor at each of a block's four
    collectives: 2h elements per token of the microbatch each, in each pass (forward, recomputed
    forward, backward), with or without async TP, whose fused kernels move the dimension too.
    Megatron-Core's sequence-first layout gathers on dim 0: no copy."""
    m, tokens, t = an.model("llama3-8b"), 2 * 4096, 4  # a microbatch of 2 sequences
    kw = dict(seq_len=4096, global_batch=8, microbatch_size=2, hbm_bandwidth="2 TB/s", **GIVEN)

    def memory_bound(stack, sp, async_tp=False):
        layout = an.Layout(tp=t, dp=2, sequence_parallel=sp, async_tp=async_tp, recompute=recompute)
        return (
            an.Plan(m, HAND, layout, stack=stack, **kw)
            .time_breakdown(ops=True)["memory_bound"]
            .to("s")
            .magnitude
        )

    # per element of a block and token: 2 microbatches, 2 bytes each
    seconds = 2 * m.layers * 2 / (2e12 * 0.9)
    residual = (10 * m.hidden * (passes - 1) + 12 * m.hidden) * (tokens - tokens / t) * seconds
    copies = 4 * 2 * m.hidden * tokens * passes * seconds
    for stack in ("torchtitan-2025", "torchtitan-2025-eager"):
        assert memory_bound(stack, True) == pytest.approx(
            memory_bound(stack, False) - residual + copies, rel=1e-9
        )
        assert memory_bound(stack, True, async_tp=True) == pytest.approx(
            memory_bound(stack, True), rel=1e-12
        )
    assert memory_bound("megatron-core", True) == pytest.approx(
        memory_bound("megatron-core", False) - residual, rel=1e-9
    )


@pytest.mark.parametrize(
    "zero, grad_dtype, per_param", [(0, "bf16", 28), (1, "bf16", 28), (1, "fp32", 30)]
)
def test_the_adam_step_moves_its_shard(zero, grad_dtype, per_param):
    """One Adam step reads master weight, moments and gradient and writes three of them and the
    16-bit copy: 28 bytes a parameter (30 with fp32 gradients), over the parameters this GPU
    updates."""
    m = an.model("llama3-8b")
    p = an.Plan(
        m, HAND, an.Layout(dp=8, zero=zero), seq_len=4096, global_batch=8, hbm_bandwidth="2 TB/s",
        grad_dtype=grad_dtype, **GIVEN,
    )
    shard = m.total_params / (8 if zero else 1)
    want = per_param * shard / (2e12 * 0.9)
    assert p.time_breakdown(ops=True)["optimizer"].to("s").magnitude == pytest.approx(
        want, rel=1e-12
    )


@pytest.mark.parametrize(
    "stack, zero, grad_dtype, moments, per_param",
    [
        ("torchtitan", 3, "bf16", "fp32", 8 + 14 * 4 + 2 * 2 + 8),
        ("torchtitan", 1, "fp32", "fp32", 8 + 14 * 4 + 2 * 4 + 8),
        ("torchtitan", 3, "bf16", "bf16", 8 + 14 * 2 + 2 * 2 + 8),
        ("llm-foundry", 3, "bf16", "fp32", 8 + 16 * 4 + 2 * 2),
    ],
)
def test_an_unfused_adam_step_moves_each_pass(stack, zero, grad_dtype, moments, per_param):
    """TorchTitan's foreach AdamW with weight decay (0.1): lerp_, mul_, addcmul_, sqrt, div_, add_,
    addcdiv_ and the decay's mul_ over fp32 moments and bf16 gradients, 76 bytes a parameter (80
    with fp32 gradients, 48 with bf16 moments); Composer's DecoupledAdamW without decay, its first
    moment by mul_ and add_, 76 too (where fused Adam moves 28), over the ZeRO shard."""
    m = an.model("llama3-8b")
    p = an.Plan(
        m, HAND, an.Layout(dp=8, zero=zero), seq_len=4096, global_batch=8, hbm_bandwidth="2 TB/s",
        stack=stack, grad_dtype=grad_dtype, moment_dtype=moments, **GIVEN,
    )
    want = per_param * m.total_params / 8 / (2e12 * 0.9)
    assert p.time_breakdown(ops=True)["optimizer"].to("s").magnitude == pytest.approx(
        want, rel=1e-12
    )


def test_the_stack_chooses_the_attention_kernel():
    """TorchTitan's SDPA runs FlashAttention-2, 35% of an H100 in its benchmarks; Megatron-Core's
    Transformer Engine FlashAttention-3-class kernels, 58%; on an A100 Megatron-Core falls back to
    FlashAttention-2 (61%). Megatron-LM of 2021 had no fused kernel, so FlashAttention is
    refused."""
    m, kw = an.model("llama3-8b"), dict(seq_len=4096, global_batch=8)
    for hw, stack, eff in (
        ("h100-sxm", "torchtitan", 0.35),
        ("h100-sxm", "megatron-core", 0.58),
        ("a100-80g", "megatron-core", 0.61),
    ):
        p = an.Plan(m, an.hardware(hw), an.Layout(dp=8), stack=stack, **kw)
        assert float(p.inputs["attention_efficiency"]) == eff
    old = an.Plan(m, an.hardware("a100-80g"), an.Layout(dp=8), stack="megatron-lm-2021", **kw)
    assert old.flash_attention is False and "compute.memory_bound.scores" in old.sources(
        "time.attention"
    )
    with pytest.raises(an.InputError, match="no fused attention kernel"):
        an.Plan(
            m, an.hardware("a100-80g"), an.Layout(dp=8), stack="megatron-lm-2021",
            flash_attention=True, **kw,
        )
    with pytest.raises(an.InputError, match="stack"):
        an.Plan(m, an.hardware("a100-80g"), an.Layout(dp=8), stack="nemo", **kw)


@pytest.mark.parametrize("name", ["llama3-8b", "deepseek-v3"])
def test_unfused_attention_is_two_batched_gemms_per_head(name):
    """Without a fused kernel, QKᵀ (s/c × d_qk by d_qk × s) and attention over V (s/c × s by s ×
    d_h) run as batched GEMMs over b·a/t heads, forward and both backward GEMMs: 3 × 2·(s/c)·s·(d_qk
    + d_h) FLOPs per head, d_qk = d_h + d_r for MLA; at 100 TFLOP/s × 0.5 with no SM count
    (unquantised) and an unbounded HBM, per layer of the stage and microbatch."""
    m = an.model(name)
    seq, cp, tp, pp = 4096, 2, 2, (1 if name == "llama3-8b" else 61)
    p = an.Plan(
        m, HAND, an.Layout(tp=tp, cp=cp, pp=pp, dp=2), seq_len=seq, global_batch=4,
        flash_attention=False, hbm_bandwidth="1e30 B/s", **GIVEN,
    )
    d_qk = m.head_dim + m.rope_dim
    per_head = 3 * 2 * (seq / cp) * seq * (d_qk + m.head_dim)
    layers = (m.layers + m.mtp_modules) / pp
    want = per_head * m.heads / tp * layers * p.microbatches / (100e12 * 0.5)
    assert p.time_breakdown(ops=True)["attention"].to("s").magnitude == pytest.approx(
        want, rel=1e-9
    )


@pytest.mark.parametrize("tp", [1, 2])
def test_mla_and_shared_expert_gemms_by_hand(tp):
    """DeepSeek-V3 (MLA, 3 dense and 58 MoE layers, an MTP module): per token and GEMM weight, 6
    FLOPs. Split over TP: MLA's up-projections and output, the dense MLPs, the shared and the k
    routed experts, the output head (twice: the MTP module shares it). Replicated on every TP rank:
    MLA's down-projections, the routers, the MTP projection."""
    m = an.model("deepseek-v3")
    h, a, d_h, d_r, r_q, r_kv = (
        m.hidden,
        m.heads,
        m.head_dim,
        m.rope_dim,
        m.q_lora_rank,
        m.kv_lora_rank,
    )
    blocks, moe_blocks = m.layers + m.mtp_modules, m.moe_layers + m.mtp_modules
    split = (
        blocks * (r_q * a * (d_h + d_r) + r_kv * a * 2 * d_h + a * d_h * h)
        + m.dense_layers * 3 * h * m.ffn_hidden
        + moe_blocks * (m.shared_experts + m.topk) * 3 * h * m.expert_ffn_hidden
        + (1 + m.mtp_modules) * m.vocab * h
    )
    replicated = (
        blocks * (h * r_q + h * (r_kv + d_r))
        + moe_blocks * h * m.experts
        + m.mtp_modules * 2 * h * h
    )
    p = an.Plan(
        m, HAND, an.Layout(dp=8, ep=8, tp=tp), seq_len=4096, global_batch=16,
        hbm_bandwidth="1e30 B/s", **GIVEN,
    )
    tokens = 16 * 4096 / 8  # per data-parallel replica
    want = 6 * tokens * (split / tp + replicated) / (100e12 * 0.5)
    assert p.time_breakdown(ops=True)["gemm"].to("s").magnitude == pytest.approx(want, rel=1e-9)


def test_the_stack_efficiency_divides_every_op_class_alone():
    """A stack that realises 0.8 of the op-level ideal takes 1/0.8 of every op class's time; the
    collectives' own time is not its to lose."""
    m = an.model("llama3-8b")
    kw = dict(
        seq_len=4096, global_batch=8, hbm_bandwidth="2 TB/s", **{**GIVEN, "stack_efficiency": 1}
    )
    ideal = an.Plan(m, HAND, an.Layout(dp=8), **kw)
    run = an.Plan(m, HAND, an.Layout(dp=8), **{**kw, "stack_efficiency": 0.8})
    for k in ("gemm", "attention", "memory_bound", "optimizer"):
        ratio = run.time_breakdown(ops=True)[k] / ideal.time_breakdown(ops=True)[k]
        assert ratio.to("").magnitude == pytest.approx(1.25, rel=1e-12)
    assert (
        run.communication_time()["dp"] == ideal.communication_time()["dp"] > 0 * ideal.step_time()
    )


@pytest.mark.parametrize("recompute, forwards", [("none", 1), ("full", 2)])
def test_torchtitans_qwen3_plan_gathers_the_normalised_queries_and_keys(recompute, forwards):
    """TorchTitan's Qwen3 TP plan (2025) leaves the query and key projections' outputs as
    head-sharded DTensors and their QK norms under NoParallel, whose output hook redistributes them
    to Replicate: over TP 4, each forward (again when recomputed) all-gathers the normalised queries
    and keys, a·d_h + a_kv·d_h elements per token, and each backward the gradients of the queries
    and of the repeated keys, 2a·d_h; 3/4 of each gathered tensor reaches a rank. RoPE then rotates
    every head on every rank: its 2(a + a_kv)d_h elements per token and pass on all of the
    microbatch's tokens, not a quarter. A model without QK norms, or the 2024 stack, gathers nothing
    more."""
    base, t, tokens, microbatches = an.model("llama3-8b"), 4, 2 * 4096, 2
    kw = dict(seq_len=4096, global_batch=8, microbatch_size=2, hbm_bandwidth="2 TB/s", **GIVEN)
    layout = an.Layout(tp=t, dp=2, sequence_parallel=True, recompute=recompute)

    def plan(qk_norm, stack="torchtitan-2025-eager"):
        return an.Plan(base.replace(qk_norm=qk_norm), HAND, layout, stack=stack, **kw)

    a, a_kv, d_h, layers = base.heads, base.kv_heads, base.head_dim, base.layers
    gathered = (
        layers
        * microbatches
        * tokens
        * 2
        * (forwards * (a + a_kv) * d_h + 2 * a * d_h)
        * (t - 1)
        / t
    )
    rotated = (
        layers
        * microbatches
        * 2
        * (a + a_kv)
        * d_h
        * (forwards + 1)
        * (tokens - tokens / t)
        * 2
        / (2e12 * 0.9)
    )
    on, off = plan(True), plan(False)
    assert (on.communication()["tp"] - off.communication()["tp"]).to(
        "byte"
    ).magnitude == pytest.approx(gathered, rel=1e-9)
    assert (
        on.time_breakdown(ops=True)["memory_bound"] - off.time_breakdown(ops=True)["memory_bound"]
    ).to("s").magnitude == pytest.approx(rotated, rel=1e-9)
    assert "parallelism.tp.qk_gather_bytes_backward" in on.sources("communication.tp")
    older = [plan(q, "torchtitan-eager") for q in (True, False)]
    assert older[0].communication()["tp"] == older[1].communication()["tp"]
    assert (
        older[0].time_breakdown(ops=True)["memory_bound"]
        == older[1].time_breakdown(ops=True)["memory_bound"]
    )


def test_recomputation_by_op_and_by_module_runs_its_gemms_forward_again():
    """TorchTitan's op-level policy runs wk, wo and w3 forward again (2·h·(a_kv·d_h + a·d_h + h_ff)
    FLOPs a token a layer), Megatron-Core's mla_up_proj module MLA's two up-projections
    (2·a·(r_q(d_h + d_r) + r_kv·2d_h) a token a block, split over TP): the GEMM time each adds, by
    hand at the GEMMs' share of peak."""
    kw = dict(seq_len=4096, global_batch=16, hbm_bandwidth="1e30 B/s", **GIVEN)
    tokens = 16 * 4096 / 8  # per data-parallel replica
    m = an.model("llama3-8b")
    gemm = {
        r: (
            an.Plan(m, HAND, an.Layout(dp=8, zero=3, recompute=r), stack="torchtitan", **kw)
            .time_breakdown(ops=True)["gemm"]
            .to("s")
            .magnitude
        )
        for r in ("selective", "none")
    }
    by_op = (
        2
        * tokens
        * m.hidden
        * (m.kv_heads * m.head_dim + m.heads * m.head_dim + m.ffn_hidden)
        * m.layers
    )
    assert gemm["selective"] - gemm["none"] == pytest.approx(by_op / (100e12 * 0.5), rel=1e-9)
    v3 = an.model("deepseek-v3")
    gemm = {
        mods: (
            an.Plan(
                v3,
                HAND,
                an.Layout(dp=8, ep=8, tp=2, recompute="selective", recompute_modules=mods),
                **kw,
            )
            .time_breakdown(ops=True)["gemm"]
            .to("s")
            .magnitude
        )
        for mods in (("mla_up_proj",), ("core_attn",))
    }
    up = (
        2
        * v3.heads
        * (v3.q_lora_rank * (v3.head_dim + v3.rope_dim) + v3.kv_lora_rank * 2 * v3.head_dim)
    )
    want = tokens * up / 2 * (v3.layers + v3.mtp_modules) / (100e12 * 0.5)
    assert gemm[("mla_up_proj",)] - gemm[("core_attn",)] == pytest.approx(want, rel=1e-9)


def test_the_mlp_module_runs_each_dense_mlp_forward_again():
    """Megatron-Core's "mlp" module on Llama 3 8B (32 dense layers): each layer's three SwiGLU
    matmuls forward again, 2·3·h·h_ff FLOPs a token, at the GEMMs' share of peak (HBM taken as
    endless, as the test above takes it), and its SwiGLU forward again, the 3h_ff elements of its
    forward pass (of the 8h_ff over both passes, as test_memory_bound_kernels_by_hand counts them)
    at 2 bytes each, at 2 TB/s × 0.9; the attention's time does not change."""
    m = an.model("llama3-8b")

    def diff(hbm):
        kw = dict(seq_len=4096, global_batch=8, hbm_bandwidth=hbm, **GIVEN)
        a, b = (
            an.Plan(
                m, HAND, an.Layout(dp=8, recompute="selective", recompute_modules=mods), **kw
            ).time_breakdown(ops=True)
            for mods in (("core_attn", "mlp"), ("core_attn",))
        )
        return {k: (a[k] - b[k]).to("s").magnitude for k in ("gemm", "memory_bound", "attention")}

    tokens = 4096
    gemm = tokens * 2 * 3 * m.hidden * m.ffn_hidden * m.layers / (100e12 * 0.5)
    swiglu = tokens * 3 * m.ffn_hidden * m.layers * 2 / (2e12 * 0.9)
    assert diff("1e30 B/s")["gemm"] == pytest.approx(gemm, rel=1e-9)
    hbm = diff("2 TB/s")
    assert hbm["memory_bound"] == pytest.approx(swiglu, rel=1e-9) and hbm["attention"] == 0


def test_the_op_level_policy_runs_a_blocks_memory_bound_kernels_forward_again():
    """TorchTitan's op-level policy recomputes every memory-bound op of a block: on Llama 3 8B each
    layer's norms and residual adds forward again (10h elements a token), its SwiGLU forward (3h_ff)
    and one more rotary pass (2(a + a_kv)d_h), at 2 bytes each, at 2 TB/s × 0.9; the loss is not
    recomputed."""
    m = an.model("llama3-8b")
    kw = dict(seq_len=4096, global_batch=8, hbm_bandwidth="2 TB/s", **GIVEN)
    bound = {
        r: an.Plan(m, HAND, an.Layout(dp=8, zero=3, recompute=r), stack="torchtitan", **kw)
        .time_breakdown(ops=True)["memory_bound"]
        .to("s")
        .magnitude
        for r in ("selective", "none")
    }
    per_token = m.layers * (
        10 * m.hidden + 3 * m.ffn_hidden + 2 * (m.heads + m.kv_heads) * m.head_dim
    )
    want = per_token * 4096 * 2 / (2e12 * 0.9)
    assert bound["selective"] - bound["none"] == pytest.approx(want, rel=1e-9)


def test_the_layernorm_and_moe_act_modules_run_their_kernels_forward_again():
    """Megatron-Core's "layernorm" module runs a layer's two norms forward again (read h, write h
    each: 4h elements a token) and "moe_act" the routed experts' SwiGLU forward (3·h_e elements
    for each of a token's k copies), at 2 bytes each, at 2 TB/s × 0.9; the GEMMs do not change.
    Llama 3 8B: 32 layers of h 4,096 on one sequence of 4,096 tokens a GPU; Qwen3-30B-A3B: 48
    MoE layers, 8 of 128 experts of width 768 a token, routing balanced, one sequence a GPU over
    EP 8, or two a TP pair of GPUs (TP 2, expert TP 1), each GPU running half the tokens'
    activations."""
    kw = dict(seq_len=4096, global_batch=8, hbm_bandwidth="2 TB/s", **GIVEN)

    def diff(model, layout, module, **extra):
        a, b = (
            an.Plan(model, HAND, layout.replace(recompute="selective", recompute_modules=mods),
                    **kw, **extra).time_breakdown(ops=True)
            for mods in (("core_attn", module), ("core_attn",))
        )
        return {k: (a[k] - b[k]).to("s").magnitude for k in ("gemm", "memory_bound")}

    norms = diff("llama3-8b", an.Layout(dp=8), "layernorm")
    assert norms["memory_bound"] == pytest.approx(4096 * 4 * 4096 * 32 * 2 / (2e12 * 0.9), rel=1e-9)
    assert norms["gemm"] == 0
    for layout in (an.Layout(dp=8, ep=8), an.Layout(tp=2, dp=4, ep=8, etp=1)):
        act = diff("qwen3-30b-a3b", layout, "moe_act", routing_imbalance="balanced")
        assert act["memory_bound"] == pytest.approx(
            4096 * 8 * 3 * 768 * 48 * 2 / (2e12 * 0.9), rel=1e-9
        )
        assert act["gemm"] == 0
