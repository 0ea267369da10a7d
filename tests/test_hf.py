"""Models from Hugging Face config.json files. The files in tests/data/hf hold the values of the
released configs (meta-llama/Llama-3.1-8B, Qwen/Qwen3-30B-A3B, mistralai/Mixtral-8x22B-v0.1,
deepseek-ai/DeepSeek-V3), written out here, not downloaded; the counts are checked against the
model cards' figures, and a field the mapping does not know is refused by name."""

import json
from pathlib import Path

import pytest

import analytic as an
from analytic.cli import main
from analytic.errors import InputError

DATA = Path(__file__).parent / "data" / "hf"


def _config(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def test_llama_from_its_config_counts_the_released_weights():
    """8,030,261,248 parameters in the released Llama 3.1 8B weights (the llama3-8b preset's published count)."""
    m = an.Model.from_hf(DATA / "llama-3.1-8b.json")
    assert m.total_params == m.active_params == 8_030_261_248 == an.model("llama3-8b").total_params


@pytest.mark.parametrize("name, total, active, step", [
    ("qwen3-30b-a3b", 30.5, 3.3, 0.1),  # Qwen/Qwen3-30B-A3B model card: 30.5B in total, 3.3B activated
    ("qwen3-235b-a22b", 235, 22, 1),  # Qwen/Qwen3-235B-A22B model card: 235B in total, 22B activated
    ("mixtral-8x22b", 141, 39, 1),  # Mistral AI, "Cheaper, Better, Faster, Stronger" (2024): 141B, 39B active
])
def test_counts_from_a_config_match_the_model_card(name, total, active, step):
    """The card's figures as printed: to its last digit (Qwen's truncate, Mistral's round)."""
    m = an.Model.from_hf(DATA / f"{name}.json")
    for ours, card in ((m.total_params / 1e9, total), (m.active_params / 1e9, active)):
        shown = int(ours / step) * step if step < 1 else round(ours / step) * step
        assert shown == pytest.approx(card), (ours, card)


def test_deepseek_v3_from_its_config_is_the_preset():
    """MLA ranks, 256 + 1 experts of 2,048, top-8, three dense layers first, one MTP module, and
    routing to at most 4 of 8 groups (one per node: the preset's nodes_per_token) all come out."""
    m = an.Model.from_hf(DATA / "deepseek-v3.json", name="deepseek-v3")
    assert m == an.model("deepseek-v3")


def test_qwen3_counts_its_qk_norm():
    """QK-Norm adds two head_dim gains per layer: 48 × 2 × 128 parameters over the same model without it."""
    cfg = _config("qwen3-30b-a3b")
    with_norm = an.Model.from_hf(cfg)
    assert with_norm.qk_norm and with_norm.total_params - with_norm.replace(qk_norm=False).total_params == 48 * 2 * 128


def test_qwen2_counts_its_qkv_biases():
    """Qwen2.5-7B (the Qwen2 architecture): the card's 7.61B parameters, 6.53B without the two
    embedding tables; the QKV biases are (28 + 2·4)·128 per layer, and a fused QKV bias is one more
    tensor per block."""
    m = an.Model.from_hf(_config("qwen2.5-7b"))
    assert m.qkv_bias and not m.bias
    assert 7.61e9 <= m.total_params < 7.62e9  # the card's two decimals
    assert round((m.total_params - 2 * 152064 * 3584) / 1e7) == 653
    plain = m.replace(qkv_bias=False)
    assert m.total_params - plain.total_params == 28 * (28 + 2 * 4) * 128
    assert m.block_tensors - plain.block_tensors == 28
    with pytest.raises(an.InputError, match="qkv_bias"):
        m.replace(bias=True)


def test_gemma_counts_as_the_paper():
    """Gemma 7B: 7,751,248,896 non-embedding parameters (Gemma report, arXiv 2403.08295, Table 2) with
    tied embeddings; its GeGLU MLP costs what a SwiGLU one does, in every plan quantity."""
    m = an.Model.from_hf(_config("gemma-7b"))
    assert (m.mlp, m.mlp_formulas, m.tied_embeddings) == ("geglu", "swiglu", True)
    assert m.total_params - m.vocab * m.hidden == 7_751_248_896
    kw = dict(seq_len=8192, global_batch=64)
    lay = an.Layout(tp=8, dp=8, sequence_parallel=True, zero=1)
    gated, swiglu = (an.Plan(x, an.hardware("h100-sxm"), lay, **kw) for x in (m, m.replace(mlp="swiglu")))
    assert gated.step_time() == swiglu.step_time() and gated.memory() == swiglu.memory()
    with pytest.raises(an.InputError, match="hidden_act"):
        an.Model.from_hf({**_config("gemma-7b"), "hidden_act": "relu"})


@pytest.mark.parametrize("change, named", [
    ({"model_type": "gemma2"}, "gemma2"),
    ({"some_new_field": 3}, "some_new_field"),
    ({"hidden_act": "gelu_pytorch_tanh"}, "hidden_act"),
    ({"sliding_window": 4096}, "sliding_window"),
    ({"attention_bias": True}, "attention_bias"),
    ({"num_hidden_layers": None}, "num_hidden_layers"),
])
def test_a_config_the_mapping_does_not_understand_is_refused_by_name(change, named):
    cfg = {**_config("llama-3.1-8b"), **change}
    with pytest.raises(InputError, match=named):
        an.Model.from_hf(cfg)


def test_a_config_file_that_is_not_a_config_is_refused(tmp_path):
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    for path, why in ((tmp_path / "missing.json", "not a file"), (listed, "not an object"), (broken, "not JSON")):
        with pytest.raises(InputError, match=why):
            an.Model.from_hf(path)


def test_the_cli_takes_a_config_for_model(capsys):
    path = str(DATA / "qwen3-30b-a3b.json")
    assert main(["memory", "--model", path, "--hardware", "h100-sxm", "--gpus", "64", "--dp", "64", "--ep", "8",
                 "--seq", "4096", "--global-batch", "512", "--zero", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] and out["weights"] > 0
    assert main(["memory", "--model", str(DATA / "nothing.json"), "--hardware", "h100-sxm"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
