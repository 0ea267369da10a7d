"""Megatron-Core's pipeline layouts: parsed as its parse_str_to_list parses them, checked as its
PipelineParallelLayerLayout checks them, and a plan of one equal to the plan of the stage split it
makes."""

import pytest

import analytic as an
from analytic.plan.pipeline_layout import MAX_TEXT, chunks, rank_layers

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
    assert rank_layers(chunks("Et|(tt|)*30mL"), 8, 4) == [7, 8, 8, 8, 8, 8, 8, 6]
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
        ("(t" * 3000, 8, 4, "'\\(' is no layer"),
    ],
)
def test_a_layout_megatron_would_refuse_is_one_error(text, pp, vpp, message):
    with pytest.raises(an.LayoutError, match=message):
        an.Layout(pp=pp, vpp=vpp, dp=32, ep=32, pipeline_layout=text)


#: Llama 3 8B's layer: Q and O 4096², K and V 4096 × 1024, a SwiGLU MLP 3 × 4096 × 14336, two
#: RMSNorms of 4096 (its config.json)
LLAMA3_8B_LAYER = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096


def test_a_layouts_middle_stages_hold_their_own_layers():
    """Llama 3 8B's 32 layers as 8, 10, 6 and 8 on 4 stages (1F1B): each middle stage holds its
    own layers' BF16 weights (hand count) and the layer-microbatches 1F1B keeps in flight on it, p −
    k of them (against the even layout's 8 a stage); the 10-layer stage sets the pace, at 10/8 of
    an even middle stage's compute."""

    def plan(text):
        return an.Plan("llama3-8b", "h100-sxm", an.Layout(pp=4, dp=4, pipeline_layout=text),
                       seq_len=4096, global_batch=64)

    even, uneven = plan("Et*8|t*8|t*8|t*8L"), plan("Et*8|t*10|t*6|t*8L")
    assert uneven.layers_by_stage() == [8, 10, 6, 8]
    stages = uneven.memory_by_stage()
    for k, layers in ((1, 10), (2, 6)):
        assert stages[k].weights.to("byte").magnitude == 2 * layers * LLAMA3_8B_LAYER

    def held(p):  # stage 1's activations over stage 2's
        one, two = p.memory_by_stage()[1:3]
        return (one.activations - two.activations).to("byte").magnitude

    assert held(uneven) / held(even) == pytest.approx((3 * 10 - 2 * 6) / (3 * 8 - 2 * 8), 1e-12)
    slowest = uneven.slowest_stage()
    assert slowest["stage"] == 1
    middle = even.value("time.stage.middle").to("s").magnitude
    assert slowest["compute"].to("s").magnitude == pytest.approx(middle * 10 / 8, rel=1e-12)
    assert uneven.step_time() > even.step_time()


@pytest.mark.parametrize(
    "model, layout, layers",
    [
        ("llama3-8b", "Et*8|t*6|t*10|t*8L", [8, 6, 10, 8]),
        ("deepseek-v3", "Et*13|t*14|t*20|t*14mL", [13, 14, 20, 14]),
    ],
)
def test_the_fullest_middle_stage_sets_the_pace_wherever_it_is(model, layout, layers):
    """A layout's fullest middle stage, here the third, sets the pace: its compute is its layers'
    share of the first stage's (DeepSeek-V3's first stage holds all three dense layers)."""
    plan = an.Plan(model, "h100-sxm", an.Layout(pp=4, dp=8, pipeline_layout=layout),
                   seq_len=4096, global_batch=64)
    assert plan.layers_by_stage() == layers and plan.slowest_stage()["stage"] == 2
    first, middle = (plan.value(f"time.stage.{k}").to("s").magnitude for k in ("first", "middle"))
    assert middle / first == pytest.approx(layers[2] / layers[0], rel=1e-12)


@pytest.mark.parametrize(
    "layout, layers",
    [
        ("Et|t|t|t*12|t*13|t*13|t*13|t*7mL", [14, 14, 14, 19]),
        ("Et|t|t|t*12|t*13|t*12|t*14|t*7mL", [14, 13, 15, 19]),
    ],
)
def test_a_layouts_stages_hold_the_dense_layers_their_chunks_hold(layout, layers):
    """DeepSeek-V3's three dense layers in the first three chunks of 4 × 2, one on each of ranks
    0, 1 and 2: the stages' weights (BF16, no TP or EP) add up to the model's parameters and its
    MTP module's, and where ranks 0, 1 and 2 hold 14 layers each the first holds the embedding
    (129,280 × 7,168, config.json) more than the second, which holds what the third does. The
    fullest middle stage's compute is its layers' share of the first's."""
    m = an.model("deepseek-v3")
    plan = an.Plan(m, "h100-sxm", an.Layout(pp=4, vpp=2, dp=8, pipeline_layout=layout),
                   seq_len=4096, global_batch=64)
    assert plan.layers_by_stage() == layers
    weights = [s.weights.to("byte").magnitude for s in plan.memory_by_stage()]
    mtp = m.mtp_params_formula().value().to("parameter").magnitude
    assert sum(weights) == pytest.approx(2 * (m.total_params + mtp), rel=1e-12)
    if layers[:3] == [14, 14, 14]:
        assert weights[0] - weights[1] == pytest.approx(2 * 129_280 * 7_168, rel=1e-12)
        assert weights[1] == pytest.approx(weights[2], rel=1e-12)
    first, middle = (plan.value(f"time.stage.{k}").to("s").magnitude for k in ("first", "middle"))
    assert middle / first == pytest.approx(max(layers[1:-1]) / layers[0], rel=1e-12)


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


def test_a_layouts_dense_layers_a_symbol():
    """DeepSeek-V3 with its count of dense layers a symbol: each stage's weights are an expression
    in it, equal at 3 to the plan of the preset, and its numbers name the free symbol."""
    layout = an.Layout(pp=4, vpp=2, dp=8, pipeline_layout="Et|t|t|t*12|t*13|t*12|t*14|t*7mL")
    dense = an.sym("layers")
    free = an.Plan(an.model("deepseek-v3").replace(dense_layers=dense), "h100-sxm", layout,
                   seq_len=4096, global_batch=64)
    preset = an.Plan("deepseek-v3", "h100-sxm", layout, seq_len=4096, global_batch=64)
    for k in range(4):
        expr = free.expr("memory.weights", stage=k).expr
        assert expr.free_symbols <= {dense}
        want = preset.memory(stage=k).weights.to("byte").magnitude
        assert float(expr.subs(dense, 3)) == pytest.approx(want, rel=1e-12)
    with pytest.raises(an.FreeSymbolError, match="layers"):
        free.memory()
