"""Pipeline bubbles from the schedules' critical paths, checked against a discrete-event
simulation."""

import sympy

import analytic as an
from analytic.fit.derive import Derivation, S
from analytic.reference.pipeline_sim import simulate


def derive() -> Derivation:
    d = Derivation(
        "Pipeline bubbles",
        "How much of a step do pipeline stages sit idle, and how many microbatches hide it?",
    )
    chain = _bubbles(d)
    _simulated(d, chain)
    _uneven(d)
    return d


def _bubbles(d: Derivation):
    """The bubble of each schedule, and the chain that bounds them."""
    p, m, v, tf, tb, tw, tfb = S("pp", "microbatches", "vpp", "t_f", "t_b", "t_w", "t_fb")
    total = d.step(
        "GPipe and 1F1B with equal stages: the last microbatch's forward enters stage p after (p−1)"
        " forward slots and its backward leaves stage 1 after (p−1) backward slots, so a step"
        " takes",
        (m + p - 1) * (tf + tb + tw),
    )
    ideal = m * (tf + tb + tw)
    bubble = d.check(sympy.expand(total - ideal), "pipeline.bubble_time.1f1b", "Bubble time")
    d.check(sympy.simplify(bubble / ideal), "pipeline.bubble.1f1b", "Bubble over ideal time")
    d.check(sympy.simplify(bubble / ideal), "pipeline.bubble.gpipe")
    d.check(
        sympy.simplify((p - 1) * (tf + tb + tw) / v / ideal),
        "pipeline.bubble.interleaved",
        "Interleaving: each stage holds v chunks of 1/v the layers; the fill and drain run through"
        " chunks, so the bubble is divided by v",
    )
    d.check(
        sympy.simplify(bubble / total), "pipeline.bubble_share.1f1b", "As a share of the whole step"
    )
    d.step(
        "Zero Bubble splits the backward into B (input gradients) and W (weight gradients). ZB-H1"
        " moves W passes into the drain, taking T_W out of each of the p − 1 bubble slots, and"
        " ZB-H2 starts more forwards early (2p − 1 in flight) to take out a second T_W"
    )
    d.check((p - 1) * (tf + tb - tw), "pipeline.bubble_time.zb_h1")
    d.check((p - 1) * (tf + tb - 2 * tw), "pipeline.bubble_time.zb_h2")
    Bfull = tb + tw
    d.check(
        (p / 2 - 1) * (tfb + Bfull - 3 * tw),
        "pipeline.bubble_time.dualpipe",
        "DeepSeek-V3's DualPipe, (PP/2 − 1)(F&B + B − 3W) with its B the full backward",
    )
    chain = d.step(
        "No schedule beats the first microbatch's chain: its forward and input-gradient passes run"
        " one after another through all p·v chunks, then its weight gradient; stage 1 meanwhile has"
        " its own m·v chunks of work, so the bubble is at least",
        p * v * (tf + tb) + tw - m * v * (tf + tb + tw),
    )
    d.check(
        sympy.Max(0, chain),
        "pipeline.bubble_time.critical_path",
        "and a bubble is never negative: once the stage's own work outlasts the chain, the bound is"
        " zero",
    )
    d.number(
        "The zero-bubble formulas hold for enough microbatches only: at p = 16 with equal times"
        " ZB-H2's (p − 1)(T_F + T_B − 2T_W) is 0 for any m, but the chain leaves no bubble only"
        " from m",
        int(
            sympy.ceiling(
                sympy.solve(sympy.Eq(chain.subs({p: 16, v: 1, tf: 1, tb: 1, tw: 1}), 0), m)[0]
            )
        ),
    )
    return chain


def _simulated(d: Derivation, chain):
    """The pipeline simulator against the bounds, and the microbatches for a bubble."""
    p, m, v, tf, tb, tw, tfb = S("pp", "microbatches", "vpp", "t_f", "t_b", "t_w", "t_fb")
    for sched in ("1f1b", "zb-h1", "zb-h2"):
        for p_, m_ in ((4, 1), (4, 2), (8, 1), (8, 3), (8, 16)):
            r = simulate(sched, p_, m_)
            bound = float(chain.subs({p: p_, m: m_, v: 1, tf: 1, tb: 1, tw: 1}))
            assert r.bubble >= bound - 1e-9, (sched, p_, m_, r.bubble, bound)
            if m_ == 1 and sched != "1f1b":
                assert abs(r.bubble - bound) < 1e-9, (sched, p_, r.bubble, bound)
    d.step(
        "The simulator's 1F1B, ZB-H1 and ZB-H2 never go below it (p ∈ {4, 8}, m ∈ {1, 2, 3, 16}),"
        " and with one microbatch the zero-bubble schedules meet it exactly."
    )
    target = sympy.Symbol("x", positive=True)
    need = sympy.solve(sympy.Eq((p - 1) / m, target), m)[0]
    d.step("Microbatches for a 1F1B bubble of at most x", sympy.Eq(m, need))
    d.number("for p = 16 and x = 5%", int(need.subs({p: 16, target: sympy.Rational(5, 100)})))
    # the simulator agrees exactly for equal-time stages
    for sched, v_ in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2)):
        for p_, m_ in ((4, 8), (8, 16)):
            r = simulate(sched, p_, m_, v=v_)
            want = (
                an.formula("pipeline.bubble_time.1f1b").expr.subs({p: p_, tf: 1, tb: 1, tw: 1}) / v_
            )
            assert abs(r.bubble - float(want)) < 1e-9, (sched, p_, m_, r.bubble, want)
    d.step(
        "A discrete-event simulation of GPipe, 1F1B and interleaved 1F1B"
        " (analytic.reference.pipeline_sim) gives exactly these bubbles for p ∈ {4, 8}, m ∈ {8,"
        " 16}."
    )


def _uneven(d: Derivation):
    """Uneven stages: the slowest stage sets the pace."""
    p, m, v, tf, tb, tw, tfb = S("pp", "microbatches", "vpp", "t_f", "t_b", "t_w", "t_fb")
    t_max, t_mean = sympy.symbols("t_max t_mean", positive=True)
    T_max, T = S("slowest_stage_time", "stage_time")
    uneven = d.step(
        "Stages of unequal work, the slowest (t_max a microbatch) the last: once the first"
        " microbatch reaches it, it runs the other m − 1 back to back, so 1F1B's step is (m −"
        " 1)·t_max plus one microbatch through every stage, p·t_mean; over the equal-stage step (m"
        " + p − 1)·t_mean it adds",
        sympy.expand((m - 1) * t_max + p * t_mean - (m + p - 1) * t_mean),
    )
    d.check(
        sympy.simplify(uneven.subs({t_max: T_max / m, t_mean: T / m})),
        "pipeline.imbalance_time",
        "with T_max = m·t_max and T = m·t_mean the stages' compute for the step:",
    )
    r = simulate("1f1b", 4, 8, work=[0.7, 1, 1, 1.6])
    excess = r.makespan - simulate("1f1b", 4, 8).makespan * (0.7 + 1 + 1 + 1.6) / 4
    assert abs(excess - float(uneven.subs({m: 8, t_max: 3 * 1.6, t_mean: 3 * 4.3 / 4}))) < 1e-9
    d.number(
        "The simulator's 1F1B with stages of work 0.7, 1, 1 and 1.6 (p = 4, m = 8, t_F = t_B = t_W"
        " = 1) takes this much over the equal-stage step at the mean pace, as the formula gives",
        round(excess, 6),
    )
    r = simulate("interleaved", 4, 8, v=2)
    factor = an.formula("memory.activations.first_stage_interleaved_factor").expr.subs({p: 4, v: 2})
    assert abs(r.peak_in_flight[0] - 4 * float(factor)) < 1e-9
    d.number(
        "Peak microbatches held by stage 0 of interleaved 1F1B (p = 4, v = 2), simulated;"
        " Korthikanti's p·(1 + (p−1)/(pv)) gives the same",
        r.peak_in_flight[0],
    )
