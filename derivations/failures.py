"""Failures and goodput: interruption rate, Young's interval, goodput, the largest useful cluster,
and stragglers."""

import math
import warnings

import sympy

import analytic as an
from analytic.fit.derive import Derivation, S


def derive() -> Derivation:
    d = Derivation(
        "Failures, checkpoints and goodput",
        "How often does a large job stop, how often should it checkpoint, and what does it lose?",
    )
    _young(d)
    _daly(d)
    _stragglers(d)
    return d


def _young(d: Derivation):
    """Interruptions at scale, Young's checkpoint interval, goodput and the GPU count where
    throughput peaks."""
    lam, n, delta, M, R = S("interruption_rate", "gpus", "checkpoint_time", "mtbf", "restart_time")
    tau = sympy.Symbol("tau", positive=True)
    rate = an.Q_(419, "1") / (an.Q_(54, "day") * 16384)
    d.number(
        "Llama 3: 419 unexpected interruptions in 54 days on ≈16,384 GPUs: per GPU per hour",
        rate.to("1/hour"),
    )
    d.check(
        1 / (lam * n), "reliability.mtbf", "Independent failures add up: the job stops at rate λn"
    )
    for gpus in (8192, 16384, 100_000):
        d.number(
            f"  mean time between interruptions on {gpus:,} GPUs",
            an.formula("reliability.mtbf")
            .evaluate(interruption_rate=rate.to("1/s"), gpus=gpus)
            .to("hour"),
        )
    waste = d.step(
        "Checkpointing every τ costs δ/τ of the time; an interruption loses τ/2 of work on average",
        delta / tau + tau / (2 * M),
    )
    tau_opt = [r for r in sympy.solve(sympy.diff(waste, tau), tau) if r.is_positive][0]
    d.check(tau_opt, "reliability.checkpoint_interval", "Minimising over τ (Young 1974)")
    w = sympy.simplify(waste.subs(tau, tau_opt))
    d.check(
        w + R / M,
        "reliability.waste_fraction",
        "Waste at the optimum, plus a restart R per interruption",
    )
    d.check(1 - w - R / M, "reliability.goodput")
    thr = d.step(
        "With M = 1/(λn) and R neglected, throughput is proportional to",
        n * (1 - sympy.sqrt(2 * delta * lam * n)),
    )
    n_opt = [r for r in sympy.solve(sympy.diff(thr, n), n) if r.is_positive][0]
    d.check(n_opt, "reliability.optimal_gpus", "It peaks at")
    for minutes in (1, 5, 30):
        # the first-order optimum lies outside the first-order range, as it says
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", an.errors.ApproximationWarning)
            d.number(
                f"  with Llama 3's rate and δ = {minutes} min",
                round(
                    an.formula("reliability.optimal_gpus")
                    .evaluate(
                        checkpoint_time=an.Q_(minutes, "min"), interruption_rate=rate.to("1/s")
                    )
                    .magnitude
                ),
            )


def _daly(d: Derivation):
    """Daly's exact expected wall time, its optimum against the first-order one."""
    delta, M, R = S("checkpoint_time", "mtbf", "restart_time")
    tau = sympy.Symbol("tau", positive=True)
    w, D, E, t = sympy.symbols("w D E t", positive=True)
    renewal = sympy.Eq(
        E, w * sympy.exp(-w / M) + sympy.integrate((t + D + E) * sympy.exp(-t / M) / M, (t, 0, w))
    )
    segment = d.step(
        "Exactly, with failures a Poisson process of mean interval M: a segment of w of work, each "
        "failure costing a downtime D before the segment starts again, takes on average (solving "
        "E = w·e^(−w/M) + ∫₀ʷ (t + D + E) e^(−t/M)/M dt)",
        sympy.factor(sympy.solve(renewal, E)[0]),
    )
    downtime = d.step(
        "A restart of R is itself such a segment, with no downtime of its own",
        sympy.factor(segment.subs({w: R, D: 0})),
    )
    wall = sympy.simplify(segment.subs({w: tau + delta, D: downtime}))
    d.check(
        tau / wall,
        "reliability.daly.goodput",
        "A checkpoint δ after every τ of work: goodput is τ over that segment's expected wall time"
        " (Daly 2006)",
    )
    dw = S("checkpoint_write_time")
    lost = d.step(
        "Asynchronous checkpoints stall training δ and become durable δ_w later, while the next"
        " segment runs. A failure in that window falls back to the checkpoint before, redoing τ + δ"
        " more; it lands there with probability δ_w/(τ + δ), so to first order in δ_w/τ each"
        " failure loses on average",
        sympy.simplify(dw / (tau + delta) * (tau + delta)),
    )
    d.check(
        R + lost,
        "reliability.async_restart_time",
        "which Daly's model counts as a restart longer by δ_w (tests/test_symbolic.py holds it"
        " against an event simulation)",
    )
    from scipy.optimize import minimize_scalar

    # R scales it, and does not move the optimum
    wall_per_work = sympy.lambdify((tau, delta, M), (wall / tau).subs(R, 0))
    daly = an.formula("reliability.daly.optimal_interval")
    for hours in (24, 6, 0.25):
        best = minimize_scalar(
            lambda x: wall_per_work(x, 5.0, 60.0 * hours), bounds=(0.1, 600), method="bounded"
        ).x
        series = daly.evaluate(checkpoint_time="5 min", mtbf=f"{hours} hour").to("min").magnitude
        d.number(
            f"  δ = 5 min, M = {hours:g} h: the exact optimum of that wall time, in minutes (Daly's"
            f" series: {series:.2f})",
            round(best, 2),
        )


def _stragglers(d: Derivation):
    """The slowest of n GPUs: the leading term against the exact expected maximum."""
    n, sigma = S("gpus", "sigma")
    d.check(
        1 + sigma * sympy.sqrt(2 * sympy.log(n)),
        "reliability.straggler_slowdown",
        "Stragglers: a synchronous step waits for the slowest of n GPUs. For n independent normal"
        " step times the expected maximum is μ + σ·√(2 ln n) to leading order",
    )
    from scipy import integrate, stats

    for gpus in (1000, 10000):
        exact = integrate.quad(
            lambda x: x * gpus * stats.norm.pdf(x) * stats.norm.cdf(x) ** (gpus - 1), -10, 10
        )[0]
        d.number(
            f"  n = {gpus:,}: exact expected maximum of standard normals {exact:.3f}, leading term",
            round(math.sqrt(2 * math.log(gpus)), 3),
        )
