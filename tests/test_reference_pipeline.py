"""The discrete-event pipeline simulator against the catalogue's closed forms."""

import pytest

import analytic as an
from analytic.plan.pipeline_layout import chunks
from analytic.reference.pipeline_sim import simulate

GRID = [(p, m) for p in (2, 4, 8) for m in (8, 16, 24)]


def closed(name, p, tf=1, tb=1, tw=1):
    f = an.formula(f"pipeline.bubble_time.{name}")
    return float(
        f.expr.subs({an.sym("pp"): p, an.sym("t_f"): tf, an.sym("t_b"): tb, an.sym("t_w"): tw})
    )


@pytest.mark.parametrize("p,m", GRID)
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_gpipe_and_1f1b_bubble_and_fraction(schedule, p, m):
    r = simulate(schedule, p, m, t_f=1, t_b=2, t_w=1.5)
    assert r.bubble == pytest.approx(closed("1f1b", p, 1, 2, 1.5), abs=1e-9)
    frac = an.formula(f"pipeline.bubble.{schedule}").evaluate(pp=p, microbatches=m).magnitude
    assert r.bubble / (m * 4.5) == pytest.approx(frac, abs=1e-12)


@pytest.mark.parametrize("p,m", [(p, m) for p, m in GRID if m % p == 0])
@pytest.mark.parametrize("v", [2, 3])
def test_interleaved_bubble_and_memory_factor(p, m, v):
    r = simulate("interleaved", p, m, v=v)
    frac = an.formula("pipeline.bubble.interleaved").evaluate(pp=p, microbatches=m, vpp=v).magnitude
    assert r.bubble / (3 * m) == pytest.approx(frac, abs=1e-12)
    factor = (
        an.formula("memory.activations.first_stage_interleaved_factor")
        .evaluate(pp=p, vpp=v)
        .magnitude
    )
    # Korthikanti's factor holds while the batch is large enough; the first stage never holds more
    # than m
    assert r.peak_in_flight[0] == pytest.approx(min(p * factor, m), abs=1e-12)


@pytest.mark.parametrize("p,m", GRID)
def test_1f1b_holds_p_microbatches_and_gpipe_all(p, m):
    peak = simulate("1f1b", p, m).peak_in_flight
    assert peak[0] == min(an.formula("pipeline.in_flight.1f1b").evaluate(pp=p).magnitude, m)
    assert peak == [min(p - i, m) for i in range(p)]
    assert simulate("gpipe", p, m).peak_in_flight == [m] * p


@pytest.mark.parametrize("p,m", GRID)
def test_zb_h1_equal_times(p, m):
    """With T_F = T_B = T_W the greedy B-before-F-before-W schedule under ZB-H1's memory limit
    reaches Qi et al.'s (p−1)(T_F + T_B − T_W) exactly."""
    r = simulate("zb-h1", p, m)
    assert r.bubble == pytest.approx(closed("zb_h1", p), abs=1e-9)
    assert r.peak_in_flight[0] == p


@pytest.mark.parametrize("p,m", GRID)
def test_zb_h2_greedy_is_an_upper_bound(p, m):
    """The handcrafted ZB-H2 reaches zero bubble with equal times; a greedy scheduler under the same
    2p − 1 in-flight limit does not (it still waits (p−1)·T_F to fill), so the simulated bubble is
    an upper bound here, not the closed form."""
    r = simulate("zb-h2", p, m)
    assert closed("zb_h2", p) <= r.bubble <= closed("zb_h1", p) + 1e-9
    assert r.peak_in_flight[0] == min(
        an.formula("pipeline.in_flight.zb_h2").evaluate(pp=p).magnitude, m
    )


def test_layers_of_the_chunks_in_flight_by_hand():
    """Four stages of two chunks of two layers, the first chunk of the first stage and the last of
    the last a layer fewer, eight microbatches. Megatron's order warms stage 0 up with 2·3 + 4 = 10
    chunk forwards and runs one more before its first backward: chunk 0 on microbatches 0–3, chunk 1
    on 0–3, chunk 0 on 4–6, so it holds 7 × 1 + 4 × 2 = 15 layer-microbatches. Stage 1 holds 9
    chunks of 2."""
    layers = [1, 2, 2, 2, 2, 2, 2, 1]
    r = simulate("interleaved", 4, 8, v=2, layers=layers)
    assert r.peak_layers[0] == 15 and r.peak_layers[1] == 18
    # one layer a chunk: the chunk count
    assert simulate("interleaved", 4, 8, v=2).peak_layers == [11, 9, 7, 5]
    with pytest.raises(ValueError, match="8 chunks"):
        simulate("interleaved", 4, 8, v=2, layers=layers[:-1])


@pytest.mark.parametrize(
    "p,m,v,s",
    [(4, 4, 2, 2), (4, 8, 2, 2), (4, 12, 3, 2), (8, 16, 2, 3), (16, 32, 8, 1), (16, 16, 8, 1)],
)
def test_lighter_end_chunks_in_flight(p, m, v, s):
    """With the ends counted as layers (Megatron-Core's account-for-embedding/loss split) the first
    chunk of the first stage and the last of the last hold s − 1 layers, every other chunk s; each
    end stage then holds s layers a chunk in flight less pipeline.in_flight.interleaved_end_chunk,
    the lighter chunk's microbatches at the peak, as the simulator finds."""
    layers = [s] * (p * v)
    layers[0] = layers[-1] = s - 1
    peak = simulate("interleaved", p, m, v=v, layers=layers).peak_layers
    for k in (0, p - 1):
        chunks = min(
            an.formula("pipeline.in_flight.interleaved_stage")
            .evaluate(pp=p, vpp=v, stage=k)
            .magnitude,
            m * v,
        )
        light = (
            an.formula("pipeline.in_flight.interleaved_end_chunk")
            .evaluate(pp=p, vpp=v, stage=k, microbatches=m)
            .magnitude
        )
        assert chunks * s - light == peak[k]


def test_the_lighter_end_chunk_needs_whole_rounds_of_microbatches():
    """The count holds where interleaved 1F1B runs: m a multiple of p. With fewer microbatches than
    stages (m = 1, p = 2, v = 3) its warm-up term p + (m − p)·v would be −1, so the formula refuses
    it."""
    f = an.formula("pipeline.in_flight.interleaved_end_chunk")
    with pytest.raises(an.InputError, match="multiple of p"):
        f.evaluate(pp=2, vpp=3, stage=0, microbatches=1)
    assert f.evaluate(pp=2, vpp=3, stage=0, microbatches=2).magnitude == 2


@pytest.mark.parametrize("p,m", [(4, 8), (4, 16), (8, 16)])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2"])
def test_uneven_stages_add_the_slowest_stage_excess(schedule, p, m):
    """Stages of unequal work: the simulator's step over the equal-stage step (at the average
    stage's pace) is pipeline.imbalance_time, exactly for GPipe and 1F1B and within one microbatch's
    excess for the others."""
    work = [0.7] + [1.0] * (p - 2) + [1.6]
    v = 2 if schedule == "interleaved" else 1
    uneven = simulate(schedule, p, m, v=v, work=work * v)
    even = simulate(schedule, p, m, v=v)
    mean = sum(work) / p
    excess = uneven.makespan - even.makespan * mean
    closed = (
        an.formula("pipeline.imbalance_time")
        .evaluate(
            slowest_stage_time=f"{3 * m * max(work)} s",
            stage_time=f"{3 * m * mean} s",
            microbatches=m,
        )
        .to("s")
        .magnitude
    )
    if schedule in ("gpipe", "1f1b"):
        assert excess == pytest.approx(closed, rel=1e-12)
    else:
        assert closed <= excess <= closed + 3 * (max(work) - mean)


@pytest.mark.parametrize(
    "first,last,work,exact",
    [(10, 30, [0.5, 1, 1, 1.5], True), (10, 10, [0.5, 1.5, 1.5, 0.5], False)],
)
def test_a_plan_with_uneven_stages_moves_its_step_as_the_simulator(first, last, work, exact):
    """Llama 3 70B at PP 4 split unevenly (an output layer of a vocabulary of 8, so the layers alone
    set the stages' work): the step grows over the even split by what the simulator's 1F1B gives for
    those stages against 20 layers each; exactly where the last stage is the slowest, and by at most
    one microbatch's excess more where a middle one is."""
    tiny = an.model("llama3-70b").replace(vocab=8)
    m = 16

    def plan(**split):
        layout = an.Layout(tp=8, pp=4, dp=1, **split)
        return an.Plan(tiny, "h100-sxm", layout, seq_len=8192, global_batch=m)

    even, uneven = plan(), plan(first_stage_layers=first, last_stage_layers=last)
    compute = (
        (even.time_breakdown()["compute"] - even.time_breakdown(ops=True)["optimizer"])
        .to("s")
        .magnitude
    )
    sim_even = simulate("1f1b", 4, m).makespan
    sim_uneven = simulate("1f1b", 4, m, work=work).makespan
    want = compute * (sim_uneven - sim_even) / (3 * m)
    got = (uneven.step_time() - even.step_time()).to("s").magnitude
    if exact:
        assert got == pytest.approx(want, rel=2e-3)
    else:
        assert want <= got <= want + compute / m * (max(work) - 1) * 1.01
    assert uneven.time_breakdown()["imbalance"] > 10 * even.time_breakdown()["imbalance"]


@pytest.mark.parametrize(
    "pp, vpp, layout",
    [
        (8, 4, "Et|(tt|)*30mL"),
        (4, 2, "Et|t*14|t*4|t*12|t*12|t*4|t*14|mL"),
        (4, 2, "Et|t*16|t*4|t*12|t*10|t*4|t*14|mL"),  # middle stages of 20 and 18 layers
    ],
)
def test_a_layouts_stages_hold_the_chunks_in_flight_the_simulator_finds(pp, vpp, layout):
    """DeepSeek-V3 in Megatron-Core's layouts, chunks of their own sizes: every stage but the last
    (whose loss adds a working set of its own) holds the layer-microbatches the simulator finds in
    flight on it at its peak, times one layer's kept activations (read off two stages)."""
    plan = an.Plan("deepseek-v3", "gb200-nvl72",
                   an.Layout(pp=pp, vpp=vpp, dp=32, ep=32, zero=1, pipeline_layout=layout),
                   dtype="mxfp8", seq_len=4096, global_batch=1024)
    layers = [c.count("t") for c in chunks(layout)]
    layers[-1] += 1  # the MTP module's block
    peak = simulate("interleaved", pp, plan.microbatches, v=vpp, layers=layers).peak_layers
    held = [m.activations.to("byte").magnitude for m in plan.memory_by_stage()]
    kept = (held[1] - held[2]) / (peak[1] - peak[2])
    for k in range(pp - 1):
        assert held[k] - held[1] == pytest.approx(kept * (peak[k] - peak[1]), rel=1e-12, abs=1)
