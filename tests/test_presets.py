import tomllib
from pathlib import Path

import pytest

import analytic as an
from analytic.core.errors import PresetError, UnknownNameError
from analytic.presets import hardware_from_table, model_source

ROOT = Path(__file__).resolve().parent.parent

# published counts (model cards, papers) and the relative rounding of how they are printed
PUBLISHED = {
    "llama3-8b": 5e-4,
    "llama3-70b": 1e-4,
    "llama3-405b": 2e-5,
    "gpt3-175b": 3e-4,
    "palm-540b": 2e-5,
    "bloom-176b": 1e-4,
    "deepseek-v3": 1e-3,
    "qwen3-30b-a3b": 2e-3,
    "qwen3-235b-a22b": 2e-3,
    "gpt-oss-20b": 5e-4,
    "gpt-oss-120b": 1e-4,
    "kimi-k2": 0.05,
    "nemotron-3-nano": 2e-3,
    "nemotron-3-super": 6e-3,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_published(name):
    m = an.model(name)
    published = model_source(name)["published_params"]["value"]
    assert m.total_params == pytest.approx(published, rel=PUBLISHED[name])


@pytest.mark.parametrize(
    "name", ["qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b", "gpt-oss-120b"]
)
def test_a_2025_preset_is_its_released_config(name):
    """The preset's fields, written from the model card and config, are what the released
    config.json (tests/data/hf) reads as."""
    assert an.Model.from_hf(ROOT / "tests" / "data" / "hf" / f"{name}.json", name=name) == an.model(
        name
    )


@pytest.mark.parametrize(
    "name, rel", [("qwen3-30b-a3b", 0.02), ("qwen3-235b-a22b", 0.01), ("kimi-k2", 0.03)]
)
def test_active_counts_match_the_cards_as_printed(name, rel):
    """Active parameters (both embedding tables counted) against the card's figure printed to two or
    three digits: Kimi K2's 32.9B is 31.7B without the input table, either side of the card's
    32B."""
    m = an.model(name)
    assert m.active_params == pytest.approx(
        model_source(name)["published_active_params"]["value"], rel=rel
    )


def test_llama3_8b_exact_count():
    assert an.model("llama3-8b").total_params == 8_030_261_248


def test_deepseek_v3_active_within_documented_approximation():
    m = an.model("deepseek-v3")
    # 37B printed to 2 digits; embedding and output layers (0.93B each) are counted as active
    assert m.active_params == pytest.approx(37e9, rel=0.02)
    assert m.active_params < m.total_params / 15


def test_gpt_one_liner_matches_megatron_count():
    m = an.Model.gpt(layers=96, hidden=12288, heads=96, vocab=51200, seq_len=2048)
    megatron = an.formula("model.params.megatron").evaluate(
        layers=96, hidden=12288, vocab=51200, seq_len=2048
    )
    # Megatron's eq. (2) leaves out the final LayerNorm (2h parameters)
    assert m.total_params - megatron.magnitude == pytest.approx(2 * 12288)


@pytest.mark.parametrize("name", an.hardwares())
def test_every_hardware_number_has_a_source(name):
    hw = an.hardware(name)
    assert hw.sources and all(s.strip() for s in hw.sources.values())
    assert hw.peak_flops("bf16").to("TFLOP/s").magnitude > 100


def test_dense_not_sparse_peaks():
    assert an.hardware("h100-sxm").peak_flops("bf16").to("TFLOP/s").magnitude == pytest.approx(
        989.4
    )
    assert an.hardware("h100-sxm").peak_flops("fp8").to("TFLOP/s").magnitude == pytest.approx(
        1978.9
    )


def test_torchtitans_h100_takes_sxms_peak_and_shows_nvls_as_a_reading():
    """TorchTitan's benchmark H100s (HBM2e, 500 W; its note 2: the peak lies between SXM's and
    NVL's, unknown, and its MFU uses SXM's): H100 SXM's dense peaks (NVIDIA's product page prints
    1,979 BF16 and 3,958 FP8 TFLOPS with sparsity), the benchmark's 2.4 TB/s, H100 SXM's SM count,
    generation and measured GEMM ceiling as a fraction of peak (794.5 of 989.4 TFLOP/s in the
    Maximum Achievable Matmul FLOPS table); the range's bottom, H100 NVL's 1,671 / 2 TFLOPS, is a
    reading of the case that states it."""
    sxm, tt = an.hardware("h100-sxm"), an.hardware("h100-sxm-hbm2e")
    for dtype, sxm_sparse in (("bf16", 1979), ("fp8", 3958)):
        assert tt.peak_flops(dtype) == sxm.peak_flops(dtype)
        assert tt.peak_flops(dtype).to("TFLOP/s").magnitude == pytest.approx(
            sxm_sparse / 2, abs=0.2
        )
    assert tt.hbm_bandwidth.to("TB/s").magnitude == pytest.approx(2.4)
    assert (tt.sms, tt.generation) == (sxm.sms, sxm.generation)
    assert (
        tt.matmul_ceiling("bf16").fraction
        == sxm.matmul_ceiling("bf16").fraction
        == pytest.approx(794.5 / 989.4)
    )
    cases = tomllib.loads((ROOT / "validation" / "predicted.toml").read_text())["case"]
    readings = [
        r
        for c in cases
        for r in c.get("reading", [])
        if c["plan"].get("hardware") == "h100-sxm-hbm2e"
    ]
    assert [r["plan"]["hardware_overrides"]["peak_flops"] for r in readings] == ["835.5 TFLOP/s"]


def test_link_conventions():
    hw = an.hardware("h100-sxm")
    # 900 GB/s bidirectional
    assert hw.scale_up_bandwidth.to("GB/s").magnitude == pytest.approx(450)
    assert hw.scale_out_bandwidth.to("GB/s").magnitude == pytest.approx(50)  # 400 Gbit/s


def test_preset_without_source_fails():
    with pytest.raises(PresetError, match="source"):
        hardware_from_table("x", {"peak": {"bf16": {"value": "1 TFLOP/s"}}})
    with pytest.raises(PresetError):
        hardware_from_table(
            "x", {"peak": {"bf16": {"value": "1 TFLOP/s", "source": "s"}}, "hbm": "80 GB"}
        )


def test_unknown_names_suggest():
    with pytest.raises(UnknownNameError, match="llama3-405b"):
        an.model("llama3-450b")
    with pytest.raises(UnknownNameError, match="h100-sxm"):
        an.hardware("h100")
    with pytest.raises(UnknownNameError, match="bf16"):
        an.hardware("h100-sxm").peak_flops("bf61")


def test_missing_link_is_a_clear_error():
    with pytest.raises(PresetError, match="scale out bandwidth"):
        an.hardware("tpu-v4").scale_out_bandwidth


def test_the_newer_accelerators_by_hand():
    """The numbers derived in hardware.toml, recomputed from what their sources print: MI355X's FP8
    peak from its compute units, FP8 work per clock and clock; GB300's per-GPU figures from the
    rack's; B300's dense 16-bit and FP8 peaks, B200's (G. Lockwood's table); TPU v6e's ICI one way
    from its bidirectional figure."""
    mi = an.hardware("mi355x")
    assert mi.peak_flops("fp8").to("FLOP/s").magnitude == pytest.approx(
        8 * 32 * 8192 * 2.4e9, rel=1e-3
    )
    assert mi.peak_flops("bf16").to("TFLOP/s").magnitude == pytest.approx(
        mi.peak_flops("fp8").to("TFLOP/s").magnitude / 2, rel=1e-3
    )
    assert mi.sms == 256
    gb = an.hardware("gb300-nvl72")
    assert gb.peak_flops("fp8").to("PFLOP/s").magnitude == pytest.approx(360 / 72)
    assert gb.peak_flops("bf16").to("PFLOP/s").magnitude == pytest.approx(180 / 72)
    assert gb.hbm_bandwidth.to("TB/s").magnitude == pytest.approx(576 / 72)
    assert gb.scale_up_domain == 72 and gb.scale_up_bandwidth.to("TB/s").magnitude == pytest.approx(
        1.8 / 2
    )
    b300 = an.hardware("b300")
    # the same dense BF16 as B200
    assert b300.peak_flops("bf16") == an.hardware("b200").peak_flops("bf16")
    assert b300.peak_flops("fp8") == an.hardware("b200").peak_flops("fp8")
    v6e = an.hardware("tpu-v6e")
    assert v6e.scale_up_bandwidth.to("GB/s").magnitude == pytest.approx(800 / 2)
    # capacities as the runtime reports them, against the other sources' figures: XLA's "of 31.25G
    # hbm" (GiB, two decimals) on v6e; the HGX specification's 180 GB per B200 read as binary, of
    # which the driver keeps under 1%
    assert round(v6e.hbm.to("GiB").magnitude, 2) == 31.25
    assert 0.99 * 180 < an.hardware("b200").hbm.to("GiB").magnitude < 180
    # per Pod
    assert (v6e.peak_flops("bf16") * 256).to("PFLOP/s").magnitude == pytest.approx(234.9, rel=1e-3)


def test_amds_links_by_hand():
    """MI300X and MI355X scale up over 7 x16 Infinity Fabric links, one to each peer of the 8-GPU
    node: 7 × 16 lanes at 32 Gb/s (CDNA 3) and at 38.4 Gb/s (CDNA 4) a direction, half the 896 GB/s
    and 1,075.2 GB/s 'P2P ring peak aggregate' both ways that AMD prints; one 400 Gb/s NIC a GPU."""
    for key, gbps, both_ways in (("mi300x", 32, 896), ("mi355x", 38.4, 1075.2)):
        hw = an.hardware(key)
        assert hw.scale_up_links == 7 == hw.gpus_per_node - 1
        assert hw.scale_up_bandwidth.to("GB/s").magnitude == pytest.approx(7 * 16 * gbps / 8)
        assert 2 * hw.scale_up_bandwidth.to("GB/s").magnitude == pytest.approx(both_ways)
        assert hw.scale_out_bandwidth.to("Gbit/s").magnitude == pytest.approx(400)
    assert all(
        an.hardware(k).scale_up_links is None
        for k in ("h100-sxm", "b200", "gb200-nvl72", "tpu-v5p")
    )


def test_a_stack_keeps_its_bases_properties_where_it_gives_none():
    """torchtitan-2025 names torchtitan as its base: it differs in its compiled loss and its fused
    AdamW. torchtitan-2025-eager names torchtitan-2025: it keeps the fused AdamW and has the eager
    loss and blocks of 2024's torchtitan-eager, which differs from torchtitan in its eager blocks
    alone."""
    from analytic.presets import stack

    old, new, eager = stack("torchtitan"), stack("torchtitan-2025"), stack("torchtitan-2025-eager")
    assert {k for k in old if old[k] != new[k]} == {
        "name",
        "loss_bytes",
        "loss_bytes_tp",
        "optimizer_kernel",
    }
    assert (new["loss_bytes"], new["loss_bytes_tp"], new["optimizer_kernel"]) == (4, 10, "fused")
    assert {k for k in old if old[k] != eager[k]} == {"name", "optimizer_kernel", "compiled_blocks"}
    assert eager["optimizer_kernel"] == "fused" and (
        old["compiled_blocks"],
        eager["compiled_blocks"],
    ) == (True, False)
    eager_2024 = stack("torchtitan-eager")
    assert {k for k in old if old[k] != eager_2024[k]} == {"name", "compiled_blocks"}


def test_every_stack_property_is_known_and_one_the_plan_reads():
    """A stack's properties are those stacks.toml documents, each value one of its choice list: a
    misspelt saved tensor or input rule would otherwise count nothing."""
    from analytic.core import choices
    from analytic.presets import stack, stacks

    known = {
        "name",
        "allocator",
        "attention",
        "grad_dtype",
        "loss_bytes",
        "loss_bytes_tp",
        "selective",
        "fsdp_reduce_dtype",
        "sp_saved_inputs",
        "saved_extra",
        "optimizer_offload",
        "optimizer_kernel",
        "zero_optimizer",
        "fp8_weight_cache",
        "quantized_saved_inputs",
        "cp_attention",
        "compiled_blocks",
        "efficiency",
        "schedules",
        "dtypes",
        "context_parallel",
        "pipeline_zero",
        "max_zero",
        "even_chunks",
        "platforms",
        "sp_relayout",
        "qk_norm_gathered",
        "weight_decay",
        "optimizers",
        "fp8_recipes",
        "dispatchers",
        "ep_overlap",
    }
    for name in stacks():
        props = stack(name)
        assert set(props) <= known, name
        assert props["grad_dtype"] in choices.GRAD_DTYPES and props.get(
            "selective", "attention"
        ) in ("attention", "op")
        assert props.get("sp_saved_inputs", "split") in choices.SP_SAVED_INPUTS, name
        assert set(props.get("saved_extra", ())) <= set(choices.SAVED_EXTRAS), name
        assert props.get("optimizer_offload", "hybrid") in choices.OPTIMIZER_OFFLOADS, name
        assert props.get("optimizer_kernel", "fused") in choices.OPTIMIZER_KERNELS, name
        assert props.get("zero_optimizer", "deepspeed") in choices.ZERO_OPTIMIZERS, name
        assert (
            props.get("fp8_weight_cache", "transformer-engine") in choices.FP8_WEIGHT_CACHES
        ), name
        assert props.get("cp_attention", "pytorch-allgather") in choices.CP_ATTENTIONS, name
        assert (
            props.get("quantized_saved_inputs", "megatron-core") in choices.QUANTIZED_SAVED_INPUTS
        ), name
        assert props.get("compiled_blocks", False) in (True, False) and props.get(
            "sp_relayout", False
        ) in (True, False), name
        assert props.get("qk_norm_gathered", False) in (True, False) and props.get(
            "weight_decay", False
        ) in (True, False), name
        assert props.get("ep_overlap", False) in (True, False), name
        assert set(props.get("schedules", ())) <= set(choices.SCHEDULES), name
        assert set(props.get("dtypes", ())) <= set(choices.TRAINING_DTYPES), name
        assert set(props.get("optimizers", ("adam",))) <= set(choices.OPTIMIZERS), name
        assert set(props.get("dispatchers", ("alltoall",))) <= set(choices.DISPATCHERS), name
        assert set(props.get("fp8_recipes", ("delayed",))) <= set(choices.FP8_RECIPES), name
        assert props.get("context_parallel", True) in (True, False) and props.get(
            "pipeline_zero", 3
        ) in (0, 1, 2, 3), name
        assert props.get("max_zero", 3) in (0, 1, 2, 3) and set(props["platforms"]) <= set(
            choices.PLATFORMS
        ), name
    assert stack("torchtitan-2025")["sp_saved_inputs"] == "gathered"  # from its base
    assert stack("torchtitan-2025-eager")["efficiency"] == "torchtitan"  # from its base's base
    for platform in choices.PLATFORMS:  # every platform has a default stack, and it runs there
        assert platform in stack(choices.default_stack(platform))["platforms"], platform
    assert stack("megatron-lm-2023")["saved_extra"] == list(choices.SAVED_EXTRAS)


def test_measured_gemm_ceilings_order_the_devices():
    """The MAMF table's ceilings (absolute FLOP/s, each a device's own measurement): per dtype
    Hopper ≥ Ampere and Blackwell ≥ Hopper; FP8 ≥ BF16 on the same device; no fraction above 1."""

    def ceiling(name, dtype):
        hw = an.hardware(name)
        return hw.matmul_ceiling(dtype).fraction * hw.peak_flops(dtype).to("TFLOP/s").magnitude

    assert ceiling("h100-sxm", "bf16") >= ceiling("a100-80g", "bf16")
    for blackwell in ("b200", "gb200-nvl72", "b300"):
        for dtype in ("bf16", "fp8"):
            assert ceiling(blackwell, dtype) >= ceiling("h100-sxm", dtype) and ceiling(
                blackwell, dtype
            ) >= ceiling("h200", dtype)
    for name in ("h100-sxm", "h200", "b200", "gb200-nvl72", "b300"):
        assert ceiling(name, "fp8") >= ceiling(name, "bf16")
    for name in an.hardwares():
        hw = an.hardware(name)
        assert all(0 < c.fraction <= 1 and c.source for c in hw.ceilings.values()), name
    assert ceiling("a100-80g", "bf16") == pytest.approx(271.2)
    # TPU v6e has no measurement of its own: it takes v5e's fraction (JAX's Pallas guide, 181.8 of
    # 197)
    assert ceiling("tpu-v5e", "bf16") == pytest.approx(181.8)
    assert an.hardware("tpu-v6e").matmul_ceiling("bf16").fraction == pytest.approx(
        181.8 / 197, rel=1e-12
    )
    assert ceiling("tpu-v6e", "bf16") >= ceiling("tpu-v5e", "bf16")


def test_a_stack_without_fitted_sources_takes_the_pooled_efficiency_and_says_so():
    """DeepSpeed's stack has no fitted source (its cases are held out): its plans take the
    efficiency pooled over the fitted families and their notes say so; Megatron-Core's is its
    family's own."""
    from analytic.presets import calibration

    ds, mc = calibration("deepspeed"), calibration("megatron-core")
    assert (
        ds.pooled
        and not mc.pooled
        and mc.key == "megatron"
        and ds.stack_efficiency != mc.stack_efficiency
    )
    plan = an.Plan(
        "gpt3-175b", "a100-80g", an.Layout(dp=64, zero=3), seq_len=2048, global_batch=64,
        stack="deepspeed", flash_attention=False,
    )
    assert float(plan.inputs["stack_efficiency"]) == ds.stack_efficiency
    assert any("pooled over the fitted stacks" in note for note in plan.notes)


def test_measured_hbm_bandwidth_sets_the_memory_efficiency():
    """STREAM copy on Azure's ND A100 v4, ND H100 v5 and ND H200 v5: 1.61 of the A100's 2.039 TB/s,
    2.90 of the H100 SXM's 3.35 and 4.01 of the H200's 4.8; a device without a measurement takes
    their geometric mean and its plans say so."""

    def efficiency(name):
        plan = an.Plan("llama3-8b", name, an.Layout(dp=8), seq_len=4096, global_batch=8)
        return float(plan.inputs["memory_efficiency"]), plan.notes

    assert efficiency("a100-80g")[0] == pytest.approx(1.61 / 2.039, rel=1e-12)
    assert efficiency("h100-sxm")[0] == pytest.approx(2.90 / 3.35, rel=1e-12)
    assert efficiency("h200")[0] == pytest.approx(4.01 / 4.8, rel=1e-12)
    pooled, notes = efficiency("b200")
    assert pooled == pytest.approx((1.61 / 2.039 * 2.90 / 3.35 * 4.01 / 4.8) ** (1 / 3), rel=1e-12)
    assert any("no measured HBM bandwidth" in n for n in notes)


@pytest.mark.parametrize(
    "name", [h for h in an.hardwares() if an.hardware(h).generation == "blackwell"]
)
def test_every_blackwell_preset_has_its_fp8_and_fp4_peaks(name):
    """Blackwell's tensor cores run FP8 at twice the BF16 rate and FP4 at least twice the FP8 rate
    (Blackwell Ultra more: its FP4 units were widened, its FP8 not)."""
    hw = an.hardware(name)
    bf16, fp8, fp4 = (hw.peak_flops(d).to("TFLOP/s").magnitude for d in ("bf16", "fp8", "fp4"))
    assert fp8 == 2 * bf16 and fp4 >= 2 * fp8
