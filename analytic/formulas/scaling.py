"""Scaling laws: Chinchilla's parametric loss and its compute-optimal allocation; Llama 3's fit."""

from fractions import Fraction

from ..core.terms import evalf, power
from ..core.units import Unit
from ._catalogue import S, define

N, D, C = S("params", "tokens", "flops")

HOFFMANN = "Hoffmann et al. 2022, Chinchilla, arXiv 2203.15556 App. D.2"
E_, A_, B_ = Fraction("1.69"), Fraction("406.4"), Fraction("410.7")
ALPHA, BETA = Fraction("0.34"), Fraction("0.28")
FIT = (
    "parametric fit L = E + A/N^α + B/D^β with E = 1.69, A = 406.4, B = 410.7, α = 0.34, β ="
    " 0.28",
    "C = 6ND",
)
G = evalf(power(ALPHA * A_ / (BETA * B_), 1 / (ALPHA + BETA)), 15)  # (αA/βB)^(1/(α+β))
a_exp, b_exp = BETA / (ALPHA + BETA), ALPHA / (ALPHA + BETA)

define(
    "scaling.chinchilla.loss",
    E_ + A_ / N**ALPHA + B_ / D**BETA,
    "",
    HOFFMANN,
    FIT,
    "Chinchilla's parametric loss (nats per token)",
)
define(
    "scaling.chinchilla.optimal_params",
    G * (C / 6) ** a_exp,
    "parameter",
    f"{HOFFMANN} eq. (4); derived: derivations/scaling.py",
    FIT,
    "compute-optimal parameter count for C FLOPs (exponent β/(α+β))",
    coefficient_unit=Unit.of("parameter") / Unit.of("FLOP") ** float(a_exp),
)
define(
    "scaling.chinchilla.optimal_tokens",
    (C / 6) ** b_exp / G,
    "token",
    f"{HOFFMANN} eq. (4); derived: derivations/scaling.py",
    FIT,
    "compute-optimal token count for C FLOPs (exponent α/(α+β))",
    coefficient_unit=Unit.of("token") / Unit.of("FLOP") ** float(b_exp),
)
define(
    "scaling.llama3.optimal_tokens",
    Fraction("0.29") * C ** Fraction("0.53"),
    "token",
    "Llama 3 Herd of Models, arXiv 2407.21783 §3.2.1 (N*(C) = A·C^α, α = 0.53, A = 0.29)",
    ("fit on IsoFLOPs runs from 6e18 to 1e22 FLOPs",),
    "Llama 3's compute-optimal token count",
    coefficient_unit=Unit.of("token") / Unit.of("FLOP") ** 0.53,
)
