"""Experts with a capacity and no padding (Megatron-Core's --moe-expert-capacity-factor without
--moe-pad-expert-input-to-capacity): the tokens beyond it dropped, so the busiest expert-parallel
rank takes its routed share up to the capacity and no more."""

import json

import pytest

import analytic as an
from analytic.cli.main import main

KW = dict(seq_len=4096, global_batch=64)
EP8 = an.Layout(dp=8, ep=8, zero=1)
CAPPED = dict(expert_capacity=1.25, pad_to_capacity=False)


def _plan(layout=EP8, **kw):
    return an.Plan("qwen3-235b-a22b", "h100-sxm", layout, **KW, **kw)


def test_the_busiest_rank_holds_its_share_up_to_the_capacity():
    """Qwen3-235B-A22B at EP 8: each of its 94 MoE layers saves 2k·h bytes of a token's routed
    copies and 6k·h_e of its experts' gate, up and product, so at imbalance 2 and capacity 1.25 the
    busiest rank holds 94 · 4,096 · (6 · 1,536 + 2 · 4,096) · 8 · 0.25 bytes over a balanced plan
    (hand count) and its all-to-alls move 1.25 times the bytes; under the capacity (imbalance 1.1)
    nothing is dropped; the FLOPs are the dropless plan's (no padded rows)."""
    balanced = _plan()
    capped = _plan(**CAPPED, routing_imbalance=2)
    extra = (round(capped.memory().activations.m_as("byte"))
             - round(balanced.memory().activations.m_as("byte")))
    assert extra == 94 * 4096 * (6 * 1536 + 2 * 4096) * 8 // 4
    ep = (capped.communication()["ep"] / balanced.communication()["ep"]).to("").magnitude
    assert ep == pytest.approx(1.25, rel=1e-12)
    assert capped.hardware_flops() == balanced.hardware_flops()
    under = _plan(**CAPPED, routing_imbalance=1.1)
    assert under.step_time() == _plan(routing_imbalance=1.1).step_time()
    assert _plan(**CAPPED).step_time() == balanced.step_time()


def test_a_capacity_of_one_pads_nothing_and_drops_all_beyond_the_share():
    """Megatron-Core's common capacity factor 1.0: padded, it adds no rows; with drops, the busiest
    rank at imbalance 2 takes its balanced share."""
    balanced = _plan()
    assert _plan(expert_capacity=1).step_time() == balanced.step_time()
    dropped = _plan(expert_capacity=1, pad_to_capacity=False, routing_imbalance=2)
    assert dropped.step_time() == balanced.step_time()


def test_a_symbolic_imbalance_is_capped_as_the_numbers_are():
    """The imbalance left a symbol: the step time at 1.1 and at 2 is the numeric plans'."""
    free = _plan(**CAPPED, routing_imbalance=an.sym("routing_imbalance")).expr("step_time")
    for rho in (1.1, 2):
        numeric = _plan(**CAPPED, routing_imbalance=rho).step_time().to("s").magnitude
        got = free.evaluate(routing_imbalance=rho).to("s").magnitude
        assert got == pytest.approx(numeric, rel=1e-12)


@pytest.mark.parametrize("kw, message", [
    (dict(pad_to_capacity=False), "pad_to_capacity: drops the tokens beyond an expert_capacity"),
    (dict(expert_capacity=1.25, pad_to_capacity="no"), "pad_to_capacity: expected True or False"),
    (dict(expert_capacity=1.25, routing_imbalance=2), "or pad_to_capacity=False"),
    (dict(expert_capacity=0.9, pad_to_capacity=False), "expert_capacity: expected a number ≥ 1"),
])
def test_a_capacity_that_cannot_be_is_refused(kw, message):
    with pytest.raises(an.InputError, match=message):
        _plan(**kw)


def test_the_command_line_and_search_drop_beyond_the_capacity(capsys):
    """``--drop-beyond-capacity`` with ``--expert-capacity``: the plan's step is the API's, a
    search's rows carry the options and build their plans with them; without a capacity it is one
    line and exit 2."""
    flags = ["--model", "qwen3-235b-a22b", "--hardware", "h100-sxm", "--gpus", "8", "--ep", "8",
             "--zero", "1", "--seq", "4096", "--global-batch", "64", "--routing-imbalance", "2"]
    capacity = ["--expert-capacity", "1.25", "--drop-beyond-capacity"]
    assert main(["step", *flags, *capacity, "--json"]) == 0
    lines = json.loads(capsys.readouterr().out)["lines"]
    expected = _plan(**CAPPED, routing_imbalance=2).step_time().to("s").magnitude
    step = next(x["value"] for x in lines if x["key"] == "step_time")
    assert step == pytest.approx(expected, rel=1e-12)
    found = an.search("qwen3-235b-a22b", "h100-sxm", gpus=64, progress=False, **KW, **CAPPED,
                      routing_imbalance=2)
    best = next(r for r in found.ranked if r.layout.ep > 1)
    assert best.options["pad_to_capacity"] is False and best.options["expert_capacity"] == 1.25
    plan = best.plan("qwen3-235b-a22b", "h100-sxm", **KW)
    assert plan.step_time().to("s").magnitude == pytest.approx(best.step_time, rel=1e-12)
    at_share = best.plan("qwen3-235b-a22b", "h100-sxm", routing_imbalance=1.25, **KW,
                         expert_capacity=None, pad_to_capacity=True)
    assert plan.step_time() == at_share.step_time()
    assert main(["step", *flags, "--drop-beyond-capacity"]) == 2
    said = capsys.readouterr().err
    assert "--drop-beyond-capacity: drops the tokens beyond --expert-capacity" in said
