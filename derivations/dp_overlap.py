"""DP overlap: when the gradient reduce-scatter hides behind the backward pass."""

import sympy

import analytic as an
from analytic.fit.derive import Derivation, S


def derive() -> Derivation:
    d = Derivation(
        "Hiding data-parallel communication",
        "When does the gradient reduction hide behind the backward pass?",
    )
    P, e, N, Bw, F, T = sympy.symbols("P_l e N B F T_mb", positive=True)
    d.check(
        S("params") * S("element_bytes"),
        "parallelism.dp.gradient_bytes",
        "A data-parallel rank reduces one gradient per parameter, e bytes each",
    )
    grad = an.formula("parallelism.dp.gradient_bytes").expr.subs(
        {S("params"): P, S("element_bytes"): e}
    )
    sent = d.step(
        "One layer's gradients (P_l parameters in e bytes each) reduce-scattered over N ranks:"
        " bytes each rank sends",
        an.formula("collectives.reduce_scatter.bytes_sent").expr.subs(
            {S("message"): grad, S("ranks"): N}
        ),
    )
    comm = sent / Bw
    back = d.step(
        "The backward of the next layer on T_mb tokens takes 4 FLOPs per parameter per token",
        4 * P * T / F,
    )
    cond = sympy.solve(sympy.Eq(comm, back), T)[0]
    d.step(
        "The reduction hides when the microbatch has at least this many tokens per GPU",
        sympy.Eq(T, cond),
    )
    hw = an.hardware("h100-sxm")
    big = sympy.limit(cond, N, sympy.oo).subs(
        {
            e: 2,
            F: sympy.nsimplify(hw.peak_flops("bf16").to("FLOP/s").magnitude),
            Bw: sympy.nsimplify(hw.scale_out_bandwidth.to("byte/s").magnitude),
        }
    )
    d.number(
        "H100 at full peak over one 400 Gbit/s NIC, large N: tokens per microbatch per GPU",
        float(big),
    )
    d.step(
        "What cannot hide is the last layer's reduction (the tail) and, with ZeRO ≥ 1, the"
        " parameter all-gather unless the next step's first forward covers it: one bucket's time,"
        " sent/B."
    )
    return d
