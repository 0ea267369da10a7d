"""Failures: interruption rates, Young's checkpoint interval, goodput, stragglers."""

from fractions import Fraction

from ..core.algebra import Piecewise, exp, log, sqrt
from ._catalogue import S, define

delta, M, lam, n, R, sigma = S(
    "checkpoint_time", "mtbf", "interruption_rate", "gpus", "restart_time", "sigma"
)
tau, delta_w = S("checkpoint_interval", "checkpoint_write_time")

YOUNG = "Young 1974, A first order approximation to the optimum checkpoint interval, CACM 17(9)"
DALY = (
    "Daly 2006, A higher order estimate of the optimum checkpoint interval for restart dumps, "
    "Future Generation Computer Systems 22(3)"
)

define(
    "reliability.checkpoint_interval",
    sqrt(2 * delta * M),
    "s",
    f"{YOUNG}; derived: derivations/failures.py",
    ("checkpoint cost δ small against the mean time between interruptions M",),
    "optimal time between checkpoints",
)
define(
    "reliability.mtbf",
    1 / (lam * n),
    "s",
    "independent failures: job interruption rate = λ·n; derived: derivations/failures.py",
    ("interruptions independent and proportional to the accelerator count",),
    "mean time between interruptions of a job on n accelerators",
)
#: the first-order waste is a fraction of the wall clock only while it is below one: beyond it,
#: interruptions come faster than a checkpoint and a restart complete, and no step finishes
FIRST_ORDER = (
    (
        sqrt(2 * delta / M) + R / M <= 1,
        (
            "the first-order waste √(2δ/M) + R/M exceeds 1: checkpoint and restart times are not"
            " small against the mean time between interruptions M, and the first-order model does"
            " not hold"
        ),
    ),
)

#: where the first-order model is taken as a good approximation: waste at most 10% (beyond it the
#: first-order and exact models part: 0.098 against 0.38 goodput on 100,000 GPUs at Llama 3's rate,
#: README)
FIRST_ORDER_GOOD = (
    (
        sqrt(2 * delta / M) + R / M <= Fraction(1, 10),
        (
            "the first-order waste √(2δ/M) + R/M exceeds 10%, where the first-order model"
            " departs from the exact one: use reliability.daly.goodput and"
            " reliability.daly.optimal_interval"
        ),
    ),
)

define(
    "reliability.waste_fraction",
    sqrt(2 * delta / M) + R / M,
    "",
    f"{YOUNG} (first-order waste at the optimal interval); derived: derivations/failures.py",
    (
        (
            "checkpoint overhead δ/τ plus expected rework τ/(2M) at τ = √(2δM), plus restart"
            " R per interruption"
        ),
    ),
    "fraction of wall-clock time lost to checkpoints, rework and restarts",
    domain=FIRST_ORDER,
    caveats=FIRST_ORDER_GOOD,
)
define(
    "reliability.goodput",
    1 - sqrt(2 * delta / M) - R / M,
    "",
    "derived: derivations/failures.py",
    ("first-order: valid while the waste fraction is small",),
    "fraction of wall-clock time doing useful steps",
    domain=FIRST_ORDER,
    caveats=FIRST_ORDER_GOOD,
)
define(
    "reliability.optimal_gpus",
    2 / (9 * delta * lam),
    "",
    "derived: derivations/failures.py (maximise n(1 − √(2δλn)))",
    ("restart cost neglected; throughput proportional to n otherwise",),
    "accelerator count beyond which failures make a run slower",
    caveats=(
        (
            False,
            (
                "at N* the first-order waste is 2/3 by construction, far outside the first-order"
                " model; symbolic.failure_optimal_gpus gives the exact optimum (about 3.6 times"
                " larger)"
            ),
        ),
    ),
)
define(
    "reliability.straggler_slowdown",
    1 + sigma * sqrt(2 * log(n)),
    "",
    "expected maximum of n normal variables ≈ μ + σ√(2 ln n); derived:"
    " derivations/failures.py",
    (
        "per-accelerator step times independent and normal with relative spread σ",
        "asymptotic in n",
    ),
    "synchronous step time over the mean step time",
)
define(
    "reliability.daly.goodput",
    tau / (M * exp(R / M) * (exp((tau + delta) / M) - 1)),
    "",
    f"{DALY} (the complete cost function: wall time M·e^(R/M)·(e^((τ+δ)/M) − 1) per τ of"
    " work); derived: derivations/failures.py",
    (
        (
            "interruptions a Poisson process of mean interval M, during work, checkpoints and"
            " restarts alike"
        ),
        (
            "a restart of R and a checkpoint of δ every τ of work; work since the last checkpoint"
            " is lost"
        ),
    ),
    "fraction of wall-clock time doing useful steps, exact for exponential failures",
)
define(
    "reliability.daly.optimal_interval",
    Piecewise(
        (
            sqrt(2 * delta * M) * (1 + sqrt(delta / (2 * M)) / 3 + delta / (18 * M)) - delta,
            delta < 2 * M,
        ),
        (M, True),
    ),
    "s",
    f"{DALY} (perturbation solution of the optimum; τ = M once δ ≥ 2M)",
    ("exponential failures; restart time R does not move the optimum",),
    "checkpoint interval that minimises the expected wall time (higher order than Young's"
    " √(2δM))",
)
define(
    "reliability.async_restart_time",
    R + delta_w,
    "s",
    "derived: derivations/failures.py (a failure within δ_w of a checkpoint's stall falls back to"
    " the checkpoint before it)",
    (
        (
            "asynchronous checkpoints: training stalls δ, the copy becomes durable δ_w later"
            " while work goes on"
        ),
        (
            "first order in δ_w/τ: a failure lands in the window with probability δ_w/(τ + δ)"
            " and then redoes one segment more, τ + δ, so each failure loses δ_w more on"
            " average, as a longer restart would"
        ),
    ),
    "restart time that, in Daly's model, counts what asynchronous checkpoints lose",
    keywords=("checkpoint_interval",),
    domain=(
        (
            delta_w <= tau,
            (
                "the write outlasts the checkpoint interval: checkpoints overlap, and the newest "
                "durable one lags by more than one segment"
            ),
        ),
    ),
)
