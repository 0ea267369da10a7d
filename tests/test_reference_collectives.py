"""Collectives on real torch.distributed process groups (gloo, CPU, 127.0.0.1): one spawn per world
size runs every check (the ring implementations, the library collectives, tensor parallelism and the
two-level all-reduce) and each rank reports."""

import pytest

torch = pytest.importorskip("torch", reason="the numeric reference needs the 'torch' extra")
from analytic.reference import collectives  # noqa: E402

WORLDS = (2, 3, 4, 8)


@pytest.fixture(scope="module", params=WORLDS, ids=[f"world{w}" for w in WORLDS])
def ranks(request):
    return collectives.run(request.param)


def test_all_reduce_equals_reduce_scatter_plus_all_gather(ranks):
    """Element for element, float64/float32/int64 and uneven lengths (zero-padded to n chunks), and
    the send/recv rings and pairwise all-to-all agree with the library's collectives."""
    for r in ranks:
        assert r["mismatch"] == [], r["mismatch"]


def test_counted_bytes_equal_the_catalogue(ranks):
    for r in ranks:
        assert r["bytes"], "no collective was counted"
        for b in r["bytes"]:
            # exact: integer bytes against (n−1)/n·S on the padded buffer
            assert b["bytes"] == b["formula"], b


def test_tensor_parallel_message_is_the_activation(ranks):
    for r in ranks:
        assert r["tp_message"] == r["tp_formula"]


def test_hierarchical_all_reduce_levels(ranks):
    world = ranks[0]["world"]
    if world % 2 or world < 4:
        pytest.skip("two-level all-reduce needs an even world of at least 4 (2 ranks per node)")
    for r in ranks:
        h = r["hierarchical"]
        assert (h["up"], h["out"]) == (h["formula_up"], h["formula_out"])


def test_multinode_rings_send_the_catalogues_bytes_on_each_link(ranks):
    """World split into two "nodes": every rank's bytes to its own node and to the other equal
    collectives.multinode.*.bytes_sent_scale_up / _scale_out exactly, and the results are the
    library's."""
    world = ranks[0]["world"]
    if world % 2 or world < 4:
        pytest.skip("two nodes of at least 2 ranks")
    for r in ranks:
        assert r["mismatch"] == [], r["mismatch"]
        assert {m["kind"] for m in r["multinode"]} == {
            "all_reduce",
            "reduce_scatter",
            "all_gather",
            "all_to_all",
        }
        for m in r["multinode"]:
            assert (m["up"], m["out"]) == (m["formula_up"], m["formula_out"]), m
            assert m["out"] > 0
