"""Sequence-parallel collectives on the sequence dimension (TorchTitan's DTensor plans) on real gloo
process groups: each copies its whole tensor beside the transfer, eager and under torch.compile, as
the catalogue's compute.memory_bound.sp_relayout counts."""

import pytest

torch = pytest.importorskip("torch", reason="the numeric reference needs the 'torch' extra")
from analytic.reference import collectives, sequence_parallel  # noqa: E402


@pytest.fixture(scope="module")
def ranks():
    return collectives.run(2, sequence_parallel.checks)


def test_each_collective_on_the_sequence_dimension_copies_its_whole_tensor(ranks):
    """Eager, an all-gather and a reduce-scatter on dim 1 concatenate the whole [b, s, h] tensor
    once each: 2h elements per token of the microbatch each (read and write), 4h for the pair, the
    catalogue's count for a block's four collectives halved."""
    b, s, h = sequence_parallel.BATCH, sequence_parallel.SEQUENCE, sequence_parallel.HIDDEN
    for r in ranks:
        assert r["gathered"] == [b, s, h] and r["scattered"] == [b, s // 2, h]
        assert r["moved_per_token"] == 4 * h == r["catalogue_per_token"]


def test_compiled_the_copies_are_kernels_of_their_own(ranks):
    """Under torch.compile, Inductor makes the concatenation a kernel between the all-gather and the
    matmul after it, and between the matmul and the reduce-scatter after it: the matmul cannot take
    it in."""
    for r in ranks:
        assert any("cat" in k for k in r["after_gather"]), r["after_gather"]
        assert any("cat" in k for k in r["before_scatter"]), r["before_scatter"]
