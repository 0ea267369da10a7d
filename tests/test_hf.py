"""Models from Hugging Face config.json files. The files in tests/data/hf hold the values of the
released configs (meta-llama/Llama-3.1-8B, Qwen/Qwen3-30B-A3B, mistralai/Mixtral-8x22B-v0.1,
deepseek-ai/DeepSeek-V3), written out here, not downloaded; the counts are checked against the
model cards' figures, and a field the mapping does not know is refused by name."""

import json
from pathlib import Path

import pytest

import analytic as an
from analytic.cli.main import main
from analytic.core.errors import InputError

DATA = Path(__file__).parent / "data" / "hf"


def _config(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def test_llama_from_its_config_counts_the_released_weights():
    """8,030,261,248 parameters in the released Llama 3.1 8B weights (the llama3-8b preset's
    published count)."""
    m = an.Model.from_hf(DATA / "llama-3.1-8b.json")
    assert m.total_params == m.active_params == 8_030_261_248 == an.model("llama3-8b").total_params


# Qwen/Qwen3-30B-A3B model card: 30.5B in total, 3.3B activated
# Qwen/Qwen3-235B-A22B model card: 235B in total, 22B activated
# Mistral AI, "Cheaper, Better, Faster, Stronger" (2024): 141B, 39B active
@pytest.mark.parametrize(
    "name, total, active, step",
    [
        ("qwen3-30b-a3b", 30.5, 3.3, 0.1),
        ("qwen3-235b-a22b", 235, 22, 1),
        ("mixtral-8x22b", 141, 39, 1),
    ],
)
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
    """QK-Norm adds two head_dim gains per layer: 48 × 2 × 128 parameters over the same model
    without it."""
    cfg = _config("qwen3-30b-a3b")
    with_norm = an.Model.from_hf(cfg)
    assert (
        with_norm.qk_norm
        and with_norm.total_params - with_norm.replace(qk_norm=False).total_params == 48 * 2 * 128
    )


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
    """Gemma 7B: 7,751,248,896 non-embedding parameters (Gemma report, arXiv 2403.08295, Table 2)
    with tied embeddings; its GeGLU MLP costs what a SwiGLU one does, in every plan quantity."""
    m = an.Model.from_hf(_config("gemma-7b"))
    assert (m.mlp, m.mlp_formulas, m.tied_embeddings) == ("geglu", "swiglu", True)
    assert m.total_params - m.vocab * m.hidden == 7_751_248_896
    kw = dict(seq_len=8192, global_batch=64)
    lay = an.Layout(tp=8, dp=8, sequence_parallel=True, zero=1)
    gated, swiglu = (
        an.Plan(x, an.hardware("h100-sxm"), lay, **kw) for x in (m, m.replace(mlp="swiglu"))
    )
    assert gated.step_time() == swiglu.step_time() and gated.memory() == swiglu.memory()
    with pytest.raises(an.InputError, match="hidden_act"):
        an.Model.from_hf({**_config("gemma-7b"), "hidden_act": "relu"})


@pytest.mark.parametrize(
    "change, named",
    [
        ({"model_type": "gemma2"}, "gemma2"),
        ({"some_new_field": 3}, "some_new_field"),
        ({"hidden_act": "gelu_pytorch_tanh"}, "hidden_act"),
        ({"sliding_window": 4096}, "sliding_window"),
        ({"attention_bias": True}, "attention_bias"),
        ({"num_hidden_layers": None}, "num_hidden_layers"),
    ],
)
def test_a_config_the_mapping_does_not_understand_is_refused_by_name(change, named):
    cfg = {**_config("llama-3.1-8b"), **change}
    with pytest.raises(InputError, match=named):
        an.Model.from_hf(cfg)


def test_a_config_file_that_is_not_a_config_is_refused(tmp_path):
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    for path, why in (
        (tmp_path / "missing.json", "No such file"),
        (listed, "not an object"),
        (broken, "not JSON"),
    ):
        with pytest.raises(InputError, match=why):
            an.Model.from_hf(path)


@pytest.mark.parametrize("reader", ["config", "profile"])
def test_a_device_a_fifo_or_a_folder_is_refused_at_once(tmp_path, reader):
    """/dev/zero reports a size of 0 and never ends, a FIFO blocks its reader: neither is read, nor
    a folder; each is one InputError naming the argument."""
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    read = (
        an.Model.from_hf
        if reader == "config"
        else (lambda p: an.Plan("llama3-8b", "h100-sxm", seq_len=2048, global_batch=8, profile=p))
    )
    for path in ("/dev/zero", fifo, tmp_path):
        with pytest.raises(InputError, match=f"^{reader}: .*not a regular file"):
            read(path)


def test_the_cli_takes_a_config_for_model(capsys):
    path = str(DATA / "qwen3-30b-a3b.json")
    assert (
        main(
            [
                "memory",
                "--model",
                path,
                "--hardware",
                "h100-sxm",
                "--gpus",
                "64",
                "--dp",
                "64",
                "--ep",
                "8",
                "--seq",
                "4096",
                "--global-batch",
                "512",
                "--zero",
                "1",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] and out["weights"] > 0
    assert main(["memory", "--model", str(DATA / "nothing.json"), "--hardware", "h100-sxm"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "name, total, active", [("gpt-oss-120b", 116.83e9, 5.13e9), ("gpt-oss-20b", 20.91e9, 3.61e9)]
)
def test_gpt_oss_counts_its_model_cards_parameters(name, total, active):
    """GPT-OSS's model card (OpenAI 2025, Table 1): 116.83B / 5.13B active and 20.91B / 3.61B, the
    active count without the input embedding table. Hand count of the 120B: per layer 26,542,080
    attention weights + 8,000 biases + 64 sinks + 5,760 norm gains, and 128 experts of 3·2,880²
    weights and 8,640 biases with a 2,880×128 router and its 128 biases; two 201,088×2,880
    embeddings and a final norm."""
    m = an.Model.from_hf(DATA / f"{name}.json")
    assert m.total_params == pytest.approx(total, abs=5e6)
    assert m.active_params - m.vocab * m.hidden == pytest.approx(active, abs=5e6)
    if name == "gpt-oss-120b":
        layer = 26_542_080 + 8_000 + 64 + 5_760 + 128 * (3 * 2880**2 + 8_640) + 2880 * 128 + 128
        assert m.total_params == 36 * layer + 2 * 201_088 * 2880 + 2880
    assert (m.sliding_window, m.windowed_layers, m.attention_sinks, m.expert_bias) == (
        128,
        m.layers // 2,
        True,
        True,
    )


def test_gpt_oss_layer_types_must_name_every_layer():
    cfg = _config("gpt-oss-20b")
    for types in (cfg["layer_types"][:-1], cfg["layer_types"][:-1] + ["chunked_attention"]):
        with pytest.raises(InputError, match="layer_types"):
            an.Model.from_hf({**cfg, "layer_types": types})
    with pytest.raises(InputError, match="experts_per_token"):
        an.Model.from_hf({**cfg, "experts_per_token": 2})


def test_mistrals_window_covers_every_layer():
    cfg = {**_config("llama-3.1-8b"), "model_type": "mistral", "sliding_window": 4096}
    m = an.Model.from_hf(cfg)
    assert (m.sliding_window, m.sliding_layers, m.windowed_layers) == (4096, None, m.layers)


def _edited(name: str, **changes) -> dict:
    return {**_config(name.removesuffix(".json")), **changes}


@pytest.mark.parametrize(
    "name, changes, why",
    [
        (
            "llama-3.1-8b.json",
            {"tie_word_embeddings": "false"},
            'tie_word_embeddings: expected true or false, got "false"',
        ),
        (
            "llama-3.1-8b.json",
            {"num_key_value_heads": 0},
            "num_key_value_heads: expected an integer from 1, got 0",
        ),
        (
            "llama-3.1-8b.json",
            {"num_key_value_heads": True},
            "num_key_value_heads: expected an integer",
        ),
        ("llama-3.1-8b.json", {"hidden_act": None}, "hidden_act: expected a string, got null"),
        (
            "llama-3.1-8b.json",
            {"model_type": ["llama"]},
            "model_type list is not one the library maps",
        ),
        (
            "llama-3.1-8b.json",
            {"num_hidden_layers": "32"},
            'num_hidden_layers: expected an integer from 1, got "32"',
        ),
        (
            "llama-3.1-8b.json",
            {"_name_or_path": "\x1b[31mred\ud800"},
            "_name_or_path: expected a printable name",
        ),
        (
            "llama-3.1-8b.json",
            {"_name_or_path": "x" * 100_000},
            r"_name_or_path: expected a printable name .{0,120}$",
        ),
        ("gpt-oss-20b.json", {"layer_types": 24}, "layer_types must name each"),
        ("gpt-oss-20b.json", {"layer_types": [{"a": 1}] * 24}, "layer_types must name each"),
        ("deepseek-v3.json", {"topk_group": 9}, "topk_group 9 is more than n_group 8"),
    ],
    ids=[
        "string-bool",
        "zero-kv-heads",
        "bool-count",
        "null-act",
        "type-list",
        "string-count",
        "escapes",
        "long-name",
        "layer-types-int",
        "layer-types-dicts",
        "topk-group",
    ],
)
def test_a_config_field_of_the_wrong_kind_is_named_not_read_by_its_truth(name, changes, why):
    with pytest.raises(InputError, match=why):
        an.Model.from_hf(_edited(name, **changes))


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"vocab_size": 1' + "0" * 5000 + "}",
        '{"a": ' * 10_000 + "1" + "}" * 10_000,
    ],
)
def test_a_config_file_too_deep_or_with_too_long_a_number_is_one_error(tmp_path, text):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(InputError, match="^config: "):
        an.Model.from_hf(path)


#: the configs (released, written out here) that the defaults test starts from, one a model_type;
#: the others are built from transformers' defaults alone
_BASE = {
    "llama": "llama-3.1-8b",
    "mixtral": "mixtral-8x22b",
    "gemma": "gemma-7b",
    "qwen2": "qwen2.5-7b",
    "qwen3_moe": "qwen3-30b-a3b",
    "deepseek_v3": "deepseek-v3",
    "gpt_oss": "gpt-oss-20b",
}


@pytest.mark.parametrize(
    "kind", sorted(__import__("analytic.presets.hf", fromlist=["ARCHITECTURES"]).ARCHITECTURES)
)
def test_an_omitted_field_is_read_as_transformers_fills_it(kind):
    """For every model_type the reader maps and every field its transformers config class fills: a
    config without the field is the config with the field written at that default
    (presets/hf_defaults.toml)."""
    from analytic.presets import hf

    base = _config(_BASE[kind]) if kind in _BASE else {"model_type": kind}
    if kind == "deepseek_v2":
        base["num_experts_per_tok"] = 6  # DeepseekV2Config has no default: a config must give it
    filled = hf.defaults(kind)
    assert filled, kind
    for field, default in filled.items():
        written = {**{k: v for k, v in base.items() if k != hf.ALIASES.get(field)}, field: default}
        omitted = {k: v for k, v in written.items() if k != field}
        assert _outcome(omitted) == _outcome(written), (kind, field)


def _outcome(cfg: dict):
    """The Model a config gives, or the message it is refused with (a default that does not fit the
    rest of a released config is refused alike, written or omitted)."""
    try:
        return an.Model.from_hf(cfg)
    except InputError as exc:
        return str(exc)


@pytest.mark.parametrize(
    "config, dropped, billions",
    [
        # Gemma 7B: 8.54B (Gemma team 2024, arXiv 2403.08295 Table 2: 7,751,248,896 + 786,821,120
        # embedding)
        ("gemma-7b", "head_dim", 8.54),
        # Mixtral 8x22B: 141B (Mistral AI 2024); its 8 key-value heads are MixtralConfig's default
        ("mixtral-8x22b", "num_key_value_heads", 140.6),
        # gpt-oss-20b: 20.9B (OpenAI 2025, gpt-oss model card Table 1: 20.91B)
        ("gpt-oss-20b", "num_key_value_heads", 20.9),
    ],
)
def test_a_released_config_without_a_defaulted_field_counts_its_model_card(
    config, dropped, billions
):
    cfg = {k: v for k, v in _config(config).items() if k != dropped}
    assert an.Model.from_hf(cfg).total_params / 1e9 == pytest.approx(billions, abs=0.05)


def test_configs_of_only_their_distinctive_fields_count_the_released_weights():
    """Mistral-7B-v0.1 without num_key_value_heads or sliding_window: MistralConfig's 8 and 4,096,
    and 7,241,732,096 parameters, the released weights'; Qwen3-0.6B without head_dim: Qwen3Config's
    128, and the card's 0.6B (0.596B with its tied embeddings)."""
    mistral = an.Model.from_hf(
        {
            "model_type": "mistral",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "vocab_size": 32000,
        }
    )
    assert (mistral.kv_heads, mistral.sliding_window, mistral.total_params) == (
        8,
        4096,
        7_241_732_096,
    )
    qwen = an.Model.from_hf(
        {
            "model_type": "qwen3",
            "hidden_size": 1024,
            "intermediate_size": 3072,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "vocab_size": 151936,
            "tie_word_embeddings": True,
        }
    )
    assert qwen.head_dim == 128 and round(qwen.total_params / 1e9, 3) == 0.596


def test_deepseek_v2_lite_is_refused_naming_its_uncompressed_queries():
    """DeepSeek-V2-Lite's released config (deepseek-ai/DeepSeek-V2-Lite) writes q_lora_rank null:
    queries projected without a low-rank step, which MLA's count here does not model."""
    lite = {
        "model_type": "deepseek_v2",
        "vocab_size": 102400,
        "hidden_size": 2048,
        "intermediate_size": 10944,
        "moe_intermediate_size": 1408,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "n_shared_experts": 2,
        "n_routed_experts": 64,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "moe_layer_freq": 1,
        "n_group": 1,
        "topk_group": 1,
    }
    with pytest.raises(InputError, match="q_lora_rank null"):
        an.Model.from_hf(lite)
