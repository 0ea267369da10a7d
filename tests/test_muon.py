"""Muon beside Adam: its state (an fp32 master weight and one momentum buffer a parameter, AdamW on
the embedding and the output layer), its Newton-Schulz steps counted by hand on Llama 3 8B's
matrices, and where it runs."""

import pytest

import analytic as an
from analytic.plan.ops import muon_matrices, muon_time

KW = dict(seq_len=4096, global_batch=64)


def _ns(m, n):
    """Muon's 5 Newton-Schulz steps on an m×n matrix (m ≤ n), by hand: XXᵀ, A², (bA + cA²)X."""
    m, n = min(m, n), max(m, n)
    return 5 * (2 * m * m * n + 2 * m**3 + 2 * m * m * n)


def test_llama3_8b_has_seven_matrices_a_layer_and_their_steps_are_counted_by_hand():
    """Q 4096×4096, K and V 4096×1024, O 4096×4096, gate and up 4096×14336, down 14336×4096, 32
    layers; 8 GPUs share them evenly, at the H100's BF16 peak and GEMM ceiling."""
    shapes = [
        (4096, 4096),
        (4096, 1024),
        (4096, 1024),
        (4096, 4096),
        (4096, 14336),
        (4096, 14336),
        (14336, 4096),
    ]
    assert sorted(
        (r, c) for r, c, n in muon_matrices(an.model("llama3-8b")) for _ in range(n // 32)
    ) == sorted(shapes)
    plan = an.Plan("llama3-8b", "h100-sxm", an.Layout(dp=8, zero=1), optimizer="muon", **KW)
    flops = 32 * sum(_ns(r, c) for r, c in shapes) / 8
    eta = plan.inputs["matmul_efficiency"]
    assert muon_time(plan._in).value().to("s").magnitude == pytest.approx(
        flops / (989.4e12 * eta), rel=1e-12
    )


def test_muons_state_is_eight_bytes_a_matrix_parameter_and_adams_twelve_on_the_ends():
    """Llama 3 8B on 8 GPUs, ZeRO-1: 8,030,261,248 parameters, of which the embedding and the output
    layer hold 2 × 128,256 × 4,096; Muon keeps 4 + 4 bytes of the others, AdamW 12 of the ends,
    sharded over 8."""
    ends = 2 * 128256 * 4096
    want = (8 * (8_030_261_248 - ends) + 12 * ends) / 8
    plan = an.Plan("llama3-8b", "h100-sxm", an.Layout(dp=8, zero=1), optimizer="muon", **KW)
    assert plan.memory().optimizer.to("byte").magnitude == pytest.approx(want, rel=1e-12)
    bf16 = an.Plan(
        "llama3-8b", "h100-sxm", an.Layout(dp=8, zero=1), optimizer="muon", moment_dtype="bf16",
        **KW,
    )
    # bf16 momentum; AdamW's bf16 moments on the ends
    in_bf16 = (6 * (8_030_261_248 - ends) + 8 * ends) / 8
    assert bf16.memory().optimizer.to("byte").magnitude == pytest.approx(in_bf16, rel=1e-12)
    assert (
        plan.step_time()
        > an.Plan("llama3-8b", "h100-sxm", an.Layout(dp=8, zero=1), **KW).step_time()
    )


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"stack": "torchtitan"}, "stack torchtitan runs adam, not muon"),
        ({"stack": "llama3-meta"}, "stack llama3-meta runs adam, not muon"),
        ({"layout": an.Layout(dp=8, zero=0)}, "ZeRO-1 on the device"),
        ({"optimizer": "sgd"}, "optimizer"),
    ],
)
def test_muon_runs_where_its_stack_and_distributed_optimizer_do(kw, message):
    layout = kw.pop("layout", an.Layout(dp=8, zero=1))
    with pytest.raises(an.InputError, match=message):
        an.Plan("llama3-8b", "h100-sxm", layout, **{"optimizer": "muon", **KW, **kw})


def test_kimi_k2_with_muon_on_the_command_line():
    """Kimi K2 as NVIDIA's Megatron-Core measured it with Muon: 256 GB300, PP 4, DP 64, EP 64; and
    the layouts around it searched with Muon."""
    from analytic.cli.main import main

    assert (
        main(
            (
                "step --model kimi-k2 --hardware gb300-nvl72 --gpus 256 --pp 4 --ep 64 --zero 1"
                " --recompute full --seq 4096 --global-batch 1024 --optimizer muon --json"
            ).split()
        )
        == 0
    )
    assert (
        main(
            (
                "search --model kimi-k2 --hardware gb300-nvl72 --gpus 256 --seq 4096"
                " --global-batch 1024 --pp 4 --ep 64 --recompute full --optimizer muon"
            ).split()
        )
        == 0
    )
