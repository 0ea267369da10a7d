"""Memory wall: why model states cost 16 bytes per parameter, what each ZeRO stage keeps, and how
many H100s or H200s 405B needs."""

import sympy

import analytic as an
from analytic.fit.derive import Derivation, S


def derive() -> Derivation:
    d = Derivation(
        "The memory wall",
        "How many bytes does each parameter cost in training, and how many devices does 405B need?",
    )
    Psi, Nd = S("params", "dp")
    # mixed-precision Adam (ZeRO §3.1): what one rank holds per parameter
    p16, g16 = d.step(
        "16-bit parameters and 16-bit gradients: 2 bytes each", sympy.Tuple(2 * Psi, 2 * Psi)
    ).args
    K = d.step(
        "Adam in fp32: master parameter, momentum and variance, 4 bytes each: K =",
        sympy.Integer(4 + 4 + 4),
    )
    opt = K * Psi
    d.check(
        p16 + g16 + opt, "memory.model_states.zero0", "Every data-parallel rank holds all of it:"
    )
    d.check(
        p16 + g16 + opt / Nd,
        "memory.model_states.zero1",
        "ZeRO-1 shards the optimizer state over the N_d ranks:",
    )
    d.check(p16 + (g16 + opt) / Nd, "memory.model_states.zero2", "ZeRO-2 shards the gradients too:")
    d.check(
        (p16 + g16 + opt) / Nd, "memory.model_states.zero3", "ZeRO-3 shards the parameters as well:"
    )
    states = an.formula("memory.model_states.zero0").evaluate(params=405e9)
    d.number("Model states of 405B parameters", states.to("TB"), "states_405b")
    for name in ("h100-sxm", "h200"):
        hbm = an.hardware(name).hbm
        n = int(sympy.ceiling(sympy.nsimplify((states / hbm).to("").magnitude)))
        d.number(
            f"Smallest number of {hbm.to('GB'):.4g~P} devices ({name}) that can hold them at all"
            " (ZeRO-3, nothing else)",
            n,
            f"min_{name}",
        )
    # with TP·PP the states split t·p ways before ZeRO touches them: 16Ψ/(t·p) must fit
    tp_pp = sympy.Symbol("tp_pp", positive=True)
    h100 = an.hardware("h100-sxm").hbm
    need = sympy.solve(sympy.Eq(16 * 405e9 / tp_pp, h100.to("byte").magnitude), tp_pp)[0]
    d.step(
        "Without ZeRO, TP·PP alone must split them at least this many ways to fit in an H100's"
        f" {h100.to('GB'):.4g~P} (weights, gradients, optimizer; no activations)",
        sympy.Eq(tp_pp, sympy.ceiling(need)),
    )
    return d
