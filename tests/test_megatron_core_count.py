"""Megatron-Core's FLOP count (``Plan.model_flops("megatron-core")``) against the numbers
Megatron-Core prints and the count's own layer functions; the dense and MLA counts are checked
against torch's FlopCounterMode in tests/test_reference_counting.py."""

import tomllib
from pathlib import Path

import pytest

import analytic as an
from analytic.fit import calibration
from analytic.presets import model

ZOO = Path(__file__).parents[1] / "validation" / "predicted.toml"
#: TFLOP/s per GPU of each H100 row, as printed beside its step time (yanring/Megatron-MoE-ModelZoo
#: best_practice/qwen3/readme.md, commit 798dfb5, table "H100": Megatron-Core's count over the step)
ZOO_TFLOPS = {"MZOO-qwen3-235b-ep32-pp8": 245, "MZOO-qwen3-235b-ep8-fsdp": 276,
              "MZOO-qwen3-235b-a2a-pp32": 200, "MZOO-qwen3-235b-tp4-pp8": 167}


def test_the_zoos_printed_throughput_is_the_count_over_its_printed_step_time():
    """Each row's TFLOP/s per GPU times its step time and 256 GPUs is the step's count, to the three
    figures each is printed to (at most 0.45% together; the first row 0.50%)."""
    cases = {c["id"]: c for c in tomllib.loads(ZOO.read_text())["case"] if c["id"] in ZOO_TFLOPS}
    assert len(cases) == 4
    for id_, tflops in ZOO_TFLOPS.items():
        plan = calibration.build_plan(cases[id_]["plan"])
        step = float(cases[id_]["published"].split()[0])
        printed = tflops * 1e12 * step * plan.gpus
        counted = plan.model_flops("megatron-core").to("FLOP").magnitude
        assert counted == pytest.approx(printed, rel=0.006), id_


def _hybrid_flops(m: an.Model, seq: int) -> float:
    """Megatron-LM's hybrid_flops per token (megatron/training/training.py), its layer functions
    restated: attention with causal s/2, ungated (squared-ReLU) MLPs and experts, Mamba-2 with its
    inner width taken as 2h, LatentMoE's projections, one output head."""
    h, kinds = m.hidden, {c: m.layer_pattern.count(c) for c in "M*-E"}
    p, g = m.head_dim * m.heads / h, m.kv_heads
    attn = 4 * h * p * (h + h * g / m.heads + seq / 2)
    mlp = 4 * (m.ffn_hidden / h) * h * h
    d_in = 2 * h
    mamba = (2 * h * (2 * d_in + 2 * m.ssm_groups * m.ssm_state + m.ssm_heads)
             + 7 * d_in * m.ssm_state + 2 * d_in * h)
    moe = 0
    if m.experts:
        lat, h_e = m.moe_latent, m.expert_ffn_hidden
        routed = 4 * lat * h_e * m.topk + 4 * h * lat if lat else 4 * h * h_e * m.topk
        moe = routed + 4 * h * m.shared_experts * h_e
    fwd = (kinds["*"] * attn + kinds["-"] * mlp + kinds["M"] * mamba + kinds["E"] * moe
           + 2 * h * m.vocab)
    return 3 * fwd


#: a hybrid model without experts, with an MTP module (its attention and MLP layers), by hand
DENSE_HYBRID = an.Model(layers=8, hidden=256, heads=4, kv_heads=2, head_dim=64, vocab=1000,
                        ffn_hidden=512, mlp="relu2", position="none", norm="rmsnorm",
                        layer_pattern="M-M*M-M-", ssm_heads=8, ssm_head_dim=64, ssm_state=16,
                        ssm_groups=1, mtp_modules=1, name="dense-hybrid")


@pytest.mark.parametrize("name", ["nemotron-3-nano", "nemotron-3-super", "dense-hybrid"])
def test_a_hybrid_model_is_counted_as_megatron_cores_hybrid_flops(name):
    """Nemotron 3 (Mamba-2, attention and MoE layers; Super with LatentMoE and an MTP module) and a
    hybrid without experts with an MTP module, against hybrid_flops' layer functions at 8,192
    tokens: the hybrid count leaves the MTP modules out."""
    m = DENSE_HYBRID if name == "dense-hybrid" else model(name)
    plan = an.Plan(m, an.hardware("gb200-nvl72"), an.Layout(), seq_len=8192, global_batch=1)
    got = plan.model_flops("megatron-core").to("FLOP").magnitude / 8192
    assert got == pytest.approx(_hybrid_flops(m, 8192), rel=1e-12)


def test_an_unknown_convention_names_the_four():
    plan = an.Plan(model("llama3-8b"), an.hardware("h100-sxm"), an.Layout(), seq_len=8192,
                   global_batch=1)
    with pytest.raises(an.InputError, match="convention.*megatron-core"):
        plan.model_flops("mcore")


def test_the_story_prints_the_throughput_the_validation_case_measures(capsys):
    """`analytic step` on the zoo's GB200 BF16 run prints, under Megatron-Core's count, the
    TFLOP/s per GPU of the validation case's metric (compute.achieved_flops of the case's plan at
    the shipped constants)."""
    import json

    from analytic.cli.main import main
    case = next(c for c in tomllib.loads(ZOO.read_text())["case"]
                if c["id"] == "MZOO-qwen3-235b-gb200-bf16")
    plan = calibration.build_plan(case["plan"])
    metric = calibration.metric_formula(plan, case["metric"], case["convention"]).value()
    flags = ["--model", "qwen3-235b-a22b", "--hardware", "gb200-nvl72", "--scale-up-domain", "8",
             "--gpus", "256", "--pp", "8", "--ep", "8", "--etp", "1", "--zero", "1",
             "--ends-as-layers", "--seq", "4096", "--global-batch", "8192", "--dispatcher", "flex",
             "--json"]
    assert main(["step", *flags]) == 0
    lines = json.loads(capsys.readouterr().out)["lines"]
    printed = next(x["value"] for x in lines if x["key"] == "tflops_megatron_core")
    assert printed == pytest.approx(metric.to("TFLOP/s").magnitude, rel=1e-12)
