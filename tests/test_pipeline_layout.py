"""Megatron-Core's pipeline layouts: parsed as its parse_str_to_list parses them, checked as its
PipelineParallelLayerLayout checks them, and a plan of one equal to the plan of the stage split it
makes."""

import pytest

import analytic as an
from analytic.plan.pipeline_layout import MAX_TEXT, chunks, stage_layers

KW = dict(seq_len=4096, global_batch=1024)


def test_megatrons_own_example_unrolls_as_its_docstring_says():
    """megatron/core/transformer/pipeline_parallel_layer_layout.py: 'Ettt|(tt|)*29,m|L' is
    [E,t,t,t] + [t,t]*29 + [m], [L]."""
    assert chunks("Ettt|(tt|)*29,m|L") == ["Ettt"] + ["tt"] * 29 + ["m", "L"]
    assert chunks("E|t*3|L") == ["E", "ttt", "L"]


def test_chunk_i_runs_on_rank_i_mod_pp():
    """DeepSeek-V3's 61 layers on 8 stages × 4 chunks, 'Et|(tt|)*30mL': rank 0 holds chunks 0, 8,
    16, 24 (1 + 2 + 2 + 2 layers), rank 7 chunks 7, 15, 23, 31 (2 + 2 + 2 + 0, and the MTP block and
    the loss)."""
    assert stage_layers(chunks("Et|(tt|)*30mL"), 8, 4) == (7, 8, 6)
    lay = an.Layout(pp=8, vpp=4, dp=32, ep=32, pipeline_layout="Et|(tt|)*30mL")
    assert (lay.first_stage_layers, lay.last_stage_layers, lay.uneven) == (7, 6, True)


def test_a_plan_of_a_layout_is_the_plan_of_its_stage_split():
    """Memory stage by stage and the step of a layout's plan are those of first/last_stage_layers
    given by hand (15 and 14 of DeepSeek-V3's 61 layers on 4 stages); under interleaving the layout
    splits a stage's layers over its chunks as Megatron-Core's even chunks would refuse to."""

    def plan(**layout):
        return an.Plan(
            "deepseek-v3",
            "gb200-nvl72",
            an.Layout(pp=4, dp=64, ep=64, zero=1, **layout),
            dtype="mxfp8",
            **KW,
        )

    given, by_hand = plan(pipeline_layout="Et*15|(t*16|)*2t*14mL"), plan(
        first_stage_layers=15, last_stage_layers=14
    )
    assert [m.total for m in given.memory_by_stage()] == [
        m.total for m in by_hand.memory_by_stage()
    ]
    assert given.step_time() == by_hand.step_time() and "pipeline_layout=Et*15|" in repr(given)
    interleaved = plan(vpp=4, pipeline_layout="Ettt|(tttt|)*14ttmL")
    assert (interleaved.layout.first_stage_layers, interleaved.layout.last_stage_layers) == (15, 14)
    with pytest.raises(an.LayoutError, match="split evenly over its 4 model chunks"):
        plan(vpp=4, first_stage_layers=15, last_stage_layers=14)


@pytest.mark.parametrize(
    "text, pp, vpp, message",
    [
        ("Et|(tt|)*30mL", 4, 4, "32 chunks, not pp 4 × vpp 4 = 16"),
        ("tE|(tt|)*30mL", 8, 4, "the embedding \\(E\\) comes first"),
        (
            "Et|(tt|)*29,m|L",
            8,
            4,
            "MTP blocks \\(m\\) come after every layer, together in the last chunk",
        ),
        ("Et|(tt|)*30Lm", 8, 4, "the embedding \\(E\\) comes first and the loss \\(L\\) last"),
        ("Et|(tt|)*29tmL|", 8, 4, "last chunk of the last stage"),
        ("Ex|(tt|)*30mL", 8, 4, "'x' is no layer"),
        ("Et|ttt|t|tt|(tt|)*27mL", 8, 4, "the middle stages hold"),
        ("(t" * 3000, 8, 4, "'\\(' is no layer"),
    ],
)
def test_a_layout_megatron_would_refuse_is_one_error(text, pp, vpp, message):
    with pytest.raises(an.LayoutError, match=message):
        an.Layout(pp=pp, vpp=vpp, dp=32, ep=32, pipeline_layout=text)


def test_a_layout_must_place_the_models_layers_and_nothing_else():
    with pytest.raises(
        an.LayoutError, match="places 62 layers and 1 MTP blocks; deepseek-v3 has 61 and 1"
    ):
        an.Plan(
            "deepseek-v3",
            "gb200-nvl72",
            an.Layout(pp=8, vpp=4, dp=32, ep=32, pipeline_layout="Ett|(tt|)*30mL"),
            **KW,
        )
    for extra in ({"ends_as_layers": True}, {"first_stage_layers": 8}):
        with pytest.raises(an.LayoutError):
            an.Layout(pp=8, vpp=4, dp=32, ep=32, pipeline_layout="Et|(tt|)*30mL", **extra)


def test_a_layout_of_the_longest_text_is_read():
    """10,000 characters are read; one more is refused."""
    longest = "E" + "t" * (MAX_TEXT - 2) + "L"
    assert chunks(longest) == [longest]
    with pytest.raises(an.LayoutError, match="at most 10,000"):
        chunks(longest + "|")


def test_a_stage_of_empty_chunks_holds_no_layers_activations():
    """Llama 3 8B on 2 stages × 2 chunks, the second stage's chunks empty but for the loss: it holds
    the loss's working set alone, as the last of 2 one-chunk stages holding no layer does under
    1F1B."""

    def last_stage(**layout):
        plan = an.Plan("llama3-8b", "h100-sxm", an.Layout(pp=2, dp=4, **layout), seq_len=4096,
                       global_batch=64)
        assert plan.layers_by_stage() == [32, 0]
        return plan.memory_by_stage()[1].activations

    assert last_stage(vpp=2, pipeline_layout="Et*16||t*16|L") == last_stage(
        schedule="1f1b", pipeline_layout="Et*32|L"
    )
