"""Whole FSDP2 training steps of a tiny Llama on the CPU: their model states and their peak of live
bytes (the allocated peak's counterpart) against the count of the same plan."""

import pytest

from analytic.reference import step_memory as sm

S, B = 1024, 2
#: the tiny Llama's parameters by hand: a block's 4 · 256² + 3 · 256 · 704 + 2 · 256; embedding and
#: output 2 · 4,096 · 256, four blocks, the final norm 256
BLOCK = 4 * 256**2 + 3 * 256 * 704 + 2 * 256
PARAMS = 2 * 4096 * 256 + 4 * BLOCK + 256


def test_the_blocked_kernels_give_autograds_gradients():
    """The norm and SwiGLU kernels compute a block of rows at a time; over 300 rows (two full blocks
    and a part) their gradients are float64 autograd's of the plain expressions (``F.layer_norm``
    for LayerNorm), to fp32 rounding."""
    import torch
    import torch.nn.functional as F

    from analytic.reference.kernels import BLOCK_ROWS, LayerNormFn, RMSNormFn, SwiGLUFn

    assert 300 % BLOCK_ROWS and 300 > 2 * BLOCK_ROWS
    torch.manual_seed(0)
    x, w, g = (
        torch.randn(3, 100, 64, dtype=torch.float64, requires_grad=True),
        torch.randn(64, dtype=torch.float64, requires_grad=True),
        torch.randn(3, 100, 64, dtype=torch.float64),
    )

    def same_gradients(ours, plain, inputs):
        for got, want in zip(
            torch.autograd.grad(ours, inputs, g), torch.autograd.grad(plain, inputs, g)
        ):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)

    same_gradients(
        RMSNormFn.apply(x, w, 1e-5),
        x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w,
        (x, w),
    )
    b = torch.randn(64, dtype=torch.float64, requires_grad=True)
    same_gradients(LayerNormFn.apply(x, w, b, 1e-5), F.layer_norm(x, (64,), w, b, 1e-5), (x, w, b))
    gate, up = (torch.randn(3, 100, 64, dtype=torch.float64, requires_grad=True) for _ in range(2))
    same_gradients(SwiGLUFn.apply(gate, up), F.silu(gate) * up, (gate, up))


def test_the_record_of_live_bytes_misses_a_free_on_another_thread():
    """The profiler's record by hand: 4,000 bytes kept and 16,000 freed give a peak of 20,000 and
    4,000 kept; the same 4,000 freed on another thread still read as kept (why a step whose record
    ends holding more than its gradients is measured again)."""
    import threading

    import torch

    from analytic.reference.profiling import live_bytes

    held = []

    def kept_and_transient():
        held.append(torch.empty(1000, dtype=torch.float32))
        torch.empty(2000, dtype=torch.float64)  # freed at once

    assert live_bytes(kept_and_transient) == (20_000, 4_000)
    held.clear()

    def freed_elsewhere():
        held.append(torch.empty(1000, dtype=torch.float32))
        worker = threading.Thread(target=held.clear)
        worker.start()
        worker.join()

    assert live_bytes(freed_elsewhere) == (4_000, 4_000) and not held


def test_the_record_counts_a_free_only_for_a_block_it_saw_allocated():
    """Events by hand, (address, bytes): a free of an address never allocated under the profile (an
    older tensor's) is not counted, and an address allocated again was freed before, unrecorded."""
    from analytic.reference.profiling import fold

    assert fold([(1, 100), (2, 1), (9, -500), (1, -100), (3, 30)]) == (101, 31)
    assert fold([(1, 100), (1, 40), (2, 10)]) == (100, 50)


def counted(model, **kw) -> float:
    """The plan's count of the measured run, in bytes."""
    return sm.plan(model, **kw).memory().total.to("byte").magnitude


_MEASURED: dict = {}


def measured(model, *, recompute="none", stack="torchtitan", wrapping="2024", **kw) -> dict:
    """``sm.measure`` of a run, each distinct run measured once in this module (a step takes
    seconds)."""
    key = (repr(model), recompute, stack, wrapping, tuple(sorted(kw.items())))
    if key not in _MEASURED:
        _MEASURED[key] = sm.measure(
            model, recompute=recompute, stack=stack, wrapping=wrapping, **kw
        )
    return _MEASURED[key]


def run(vocab: int, microbatches: int, recompute: str = "none"):
    model = sm.tiny(vocab, S)
    kw = dict(seq_len=S, microbatch_size=B, microbatches=microbatches, recompute=recompute)
    mem = sm.plan(model, **kw).memory()
    return {
        part: getattr(mem, part).to("byte").magnitude
        for part in ("weights", "gradients", "optimizer", "total")
    }, measured(model, **kw)


@pytest.mark.parametrize(
    "vocab, recompute", [(4096, "none"), (512, "none"), (4096, "full"), (512, "full")]
)
def test_the_count_of_an_accumulating_step_is_its_peak(vocab, recompute):
    """Two microbatches a step, so the fp32 gradient shards are live at the second one's peak, as
    the count has them. The states are 16 bytes a parameter exactly (fp32 shards, fp32 gradients,
    AdamW's two fp32 moments against ZeRO's 2 + 2 + 12); the peak, mostly the loss's with a
    vocabulary of 4,096 and mostly the blocks' activations with 512, is the count within 2.5%."""
    ours, got = run(vocab, 2, recompute)
    assert (
        got["weights"] + got["gradients"] + got["optimizer"]
        == ours["weights"] + ours["gradients"] + ours["optimizer"]
    )
    assert ours["total"] / got["peak"] - 1 == pytest.approx(0, abs=0.025)


def test_a_step_of_one_microbatch_peaks_before_its_gradients_exist():
    """With one microbatch a step, FSDP2 allocates the gradient shards in the backward, after the
    loss's peak: the step peaks lower than the same step with two microbatches by exactly their
    bytes, 4 a parameter. (On a GPU their blocks stay cached for the reduce-scatter stream that
    allocated them, so the reserved peak keeps them, as the count does.)"""
    _, one = run(4096, 1)
    _, two = run(4096, 2)
    assert two["peak"] - one["peak"] == one["gradients"] == 4 * PARAMS


def test_the_compiled_loss_of_2025_in_a_whole_step():
    """TorchTitan's loss compiled (the stack torchtitan-2025: 4 bytes a logit against 12): two
    microbatches a step peak at the torchtitan-2025 plan's count within 2.5%."""
    model = sm.tiny(4096, S)
    kw = dict(seq_len=S, microbatch_size=B, microbatches=2, stack="torchtitan-2025")
    assert counted(model, **kw) / sm.measure(model, **kw)["peak"] - 1 == pytest.approx(0, abs=0.025)


def test_a_short_step_peaks_in_a_foreach_optimizer_step():
    """With 64 tokens a step the activations are small. TorchTitan's foreach AdamW of 2024 then
    peaks in its step: the model states and the square roots of the second moments, 4 bytes a
    parameter more. The count has that phase, its activations freed, and is the measured peak within
    0.1% (the rotary tables and AdamW's step counters are not counted). The fused AdamW of 2025
    allocates nothing of that size: its step peaks lower, in the forward and backward, at that
    phase's count within 5%."""
    model = sm.tiny(4096, 64)
    kw = dict(seq_len=64, microbatch_size=1, microbatches=1)
    mem = sm.plan(model, **kw).memory()
    assert round(mem.optimizer_step.m_as("byte")) == 4 * PARAMS and mem.activations.magnitude == 0
    foreach = sm.measure(model, **kw)["peak"]
    assert mem.total.to("byte").magnitude / foreach - 1 == pytest.approx(0, abs=0.001)
    counted_fused = sm.plan(model, stack="torchtitan-2025", **kw).memory()
    fused = sm.measure(model, stack="torchtitan-2025", **kw)["peak"]
    assert counted_fused.optimizer_step.magnitude == 0 and fused < foreach
    assert counted_fused.total.to("byte").magnitude / fused - 1 == pytest.approx(0, abs=0.05)


def test_the_2024_units_hold_the_embedding_and_the_last_block_through_the_loss():
    """TorchTitan's FSDP2 units of 2024 keep the root (embedding, final norm, output layer) and the
    last block unsharded through the loss; those of 2025 keep only the final norm and the output
    layer. The step peaks higher by exactly the embedding's and one block's bf16 parameters."""
    model = sm.tiny(4096, S)
    kw = dict(seq_len=S, microbatch_size=B, microbatches=2)
    peaks = [measured(model, wrapping=w, **kw)["peak"] for w in ("2024", "2025")]
    assert peaks[0] - peaks[1] == 2 * (4096 * 256 + BLOCK)


def test_a_wrapping_is_one_of_torchtitans():
    """An unknown year, or the 2025 units' own output layer asked of a model with tied embeddings,
    is an InputError naming the argument."""
    import torch

    from analytic.core.errors import InputError

    with pytest.raises(InputError, match="wrapping: expected one of '2024', '2025', got '2026'"):
        sm.build(sm.tiny(), 64, torch.device("cpu"), "2026")
    with pytest.raises(InputError, match="wrapping: .* tied embeddings"):
        sm.build(sm.tiny().replace(tied_embeddings=True), 64, torch.device("cpu"), "2025")


def test_two_ranks_hold_half_the_states_and_the_counts_peak():
    """FSDP2 over two gloo processes: each holds exactly half of the 16 bytes a parameter, and its
    peak, a step of two microbatches, is the dp = 2 plan's count within 2.5%."""
    model = sm.tiny(4096, S)
    kw = dict(seq_len=S, microbatch_size=B, microbatches=2)
    ranks = sm.measure_ranks(model, 2, **kw)
    total = counted(model, ranks=2, **kw)
    for got in ranks:
        assert got["weights"] + got["gradients"] + got["optimizer"] == 16 * PARAMS // 2
        assert total / got["peak"] - 1 == pytest.approx(0, abs=0.025)


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--vocab", "0"], "--vocab: expected an integer ≥ 1"),
        (["--microbatches", "2.5"], "--microbatches: expected an integer, got '2.5'"),
        (
            ["--stack", "megatron-core"],
            (
                "python -m analytic.reference.step_memory: "
                "argument --stack: invalid choice: 'megatron-core'"
            ),
        ),
        (
            ["--wrapping", "2026"],
            "python -m analytic.reference.step_memory: argument --wrapping: invalid choice: '2026'",
        ),
    ],
)
def test_the_script_says_what_is_wrong_with_a_flag(argv, said, capsys):
    """A bad count or choice is one line naming the flag, and exit status 2."""
    with pytest.raises(SystemExit) as exc:
        sm.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(said) and "\n" not in err


def test_the_script_says_the_cuda_device_is_missing(capsys):
    """Asked for a GPU where there is none, the script says so in one line and exits 2."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(SystemExit) as exc:
        sm.main(["--device", "cuda"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == "--device: cuda is not available here"


def test_the_script_writes_its_comparison_where_asked(tmp_path, capsys):
    """``--json FILE`` writes the printed rows: the states, measured to the byte as the count has
    them."""
    import json

    out = tmp_path / "step.json"
    assert sm.main(["--seq", "128", "--vocab", "512", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["what"] for r in rows] == [
        line.strip().split("  ")[0] for line in capsys.readouterr().out.splitlines()[1:]
    ]
    assert (
        rows[0]["library_bytes"] == rows[0]["measured_bytes"] and rows[2]["measured_bytes"] is None
    )
