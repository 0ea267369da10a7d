import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import analytic as an
from analytic import strategies as ast


@given(ast.layouts(gpus=64, model="llama3-70b"))
@settings(max_examples=50)
def test_layouts_are_valid(layout):
    assert layout.gpus == 64
    assert 64 % layout.tp == 0 and an.model("llama3-70b").heads % layout.tp == 0
    assert layout.pp <= 80


@given(st.from_type(an.Layout))
@settings(max_examples=20)
def test_from_type_is_registered(layout):
    assert isinstance(layout, an.Layout)


@pytest.mark.parametrize(
    "first", ["from analytic import strategies", "import hypothesis", "import analytic"]
)
def test_any_import_order_registers_the_types(first):
    """Hypothesis runs the entry point while it is imported, possibly from inside
    ``analytic.strategies``: every import order must work and leave from_type registered."""
    import subprocess
    import sys

    code = (
        f"{first}\nimport analytic as an\nfrom analytic import strategies\nfrom hypothesis import"
        " strategies as st\nfor t in (an.Layout, an.Model, an.Hardware, an.Plan):\n    assert"
        " isinstance(st.from_type(t).example(), t)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


@given(ast.collective_calls(max_ranks=64))
@settings(max_examples=50)
def test_collective_calls_evaluate(kwargs):
    t = an.formula("collectives.all_reduce.time").evaluate(**kwargs)
    assert t.magnitude >= 0


@pytest.mark.parametrize(
    "bad",
    [
        dict(gpus=0),
        dict(gpus=2.5),
        dict(max_tp=0),
        dict(model="no-such-model"),
        dict(schedules=("bogus",)),
        dict(schedules=()),
    ],
)
def test_impossible_requests_raise_invalid_argument(bad):
    with pytest.raises(InvalidArgument):
        ast.layouts(**bad).example()
    with pytest.raises(InvalidArgument, match="hardware"):
        ast.plans(hardware="no-such-gpu")


def test_collective_calls_validate():
    with pytest.raises(InvalidArgument):
        ast.collective_calls(min_ranks=8, max_ranks=2).example()


@given(ast.plans(model="llama3-8b", hardware="h100-sxm", gpus=8))
@settings(max_examples=10)
def test_downstream_sharding_example(plan):
    """What a downstream project would write: its own bytes per GPU of the model states (ZeRO's
    accounting, written out independently, with the stack's 4-byte gradient buffers where the plan
    keeps them, sharded over the dp·cp ranks that hold the same weights) must agree with Plan: over
    the pipeline's stages they hold the model once (Llama 3 8B's embedding is untied, so no stage
    holds a second copy). DualPipe holds two copies of the weights and gradients, which this count
    leaves out."""
    lay = plan.layout
    assume(lay.schedule != "dualpipe")
    psi = plan.model.total_params / lay.tp
    n = lay.dp * lay.cp  # CP ranks hold the same weights: ZeRO shards over dp·cp
    shard = {0: (1, 1, 1), 1: (1, 1, n), 2: (1, n, n), 3: (n, n, n)}[lay.zero]
    grad = 4 if plan.grad_dtype == "fp32" else 2
    mine = 2 * psi / shard[0] + grad * psi / shard[1] + 12 * psi / shard[2]
    stages = sum(
        (m.weights + m.gradients + m.optimizer).to("byte").magnitude for m in plan.memory_by_stage()
    )
    assert stages == pytest.approx(mine, rel=1e-12)


@given(
    st.sampled_from(["tpu-v6e", "trn2", "mi300x"]).flatmap(
        lambda hw: ast.plans(hardware=hw, gpus=8, seq_lens=[2048])
    )
)
@settings(max_examples=50)
def test_plans_on_every_platform_are_ones_its_stack_runs(plan):
    """On a TPU or Trainium, plans are drawn as the platform's stack runs them (MaxText models no
    selective recomputation, NeuronX Distributed runs ZeRO-1 at most): each is a Plan its default
    stack accepts."""
    assert (
        plan.stack == {"tpu": "maxtext", "neuron": "neuronx-distributed", "rocm": "megatron-core"}[
            plan.hardware.platform
        ]
    )
    assert plan.memory().total.magnitude > 0
