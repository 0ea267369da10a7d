"""TorchTitan's Qwen3 attention block under its TP plan of 2025, on a real gloo process group: the
QK norms under NoParallel all-gather the normalised queries and keys in the forward and their
gradients (the keys' repeated) in the backward, as the catalogue's parallelism.tp.qk_gather_bytes
and _backward count; under SequenceParallel(sequence_dim=2), the fix of pytorch/torchtitan issue
#1867, only the sequence-parallel input and output gathers remain."""

import pytest

torch = pytest.importorskip("torch", reason="the numeric reference needs the 'torch' extra")
from analytic.reference import collectives, qk_gather  # noqa: E402


@pytest.fixture(scope="module")
def ranks():
    return collectives.run(2, qk_gather.checks)


def test_the_qk_norms_under_no_parallel_gather_queries_and_keys(ranks):
    """Beside the block's input gather (forward) and its output gradient's (backward), b·s·h
    elements each, NoParallel gathers b·s·(a + a_kv)·d_h elements in the forward and b·s·2a·d_h in
    the backward: the catalogue's two messages at one byte an element."""
    b, s, a, a_kv, d = (
        qk_gather.BATCH,
        qk_gather.SEQUENCE,
        qk_gather.HEADS,
        qk_gather.KV_HEADS,
        qk_gather.HEAD_DIM,
    )
    stream = b * s * qk_gather.HIDDEN
    for r in ranks:
        assert r["sequence_parallel"] == [stream, stream]
        extra = list(r["no_parallel"])
        for x in r["sequence_parallel"]:
            extra.remove(x)
        assert sorted(extra) == sorted(
            [b * s * a * d, b * s * a_kv * d, b * s * a * d, b * s * a * d]
        )
        assert sum(extra) == r["catalogue_forward"] + r["catalogue_backward"]
        assert (
            r["catalogue_forward"] == b * s * (a + a_kv) * d
            and r["catalogue_backward"] == b * s * 2 * a * d
        )
