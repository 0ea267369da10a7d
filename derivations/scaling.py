"""Scaling laws: the compute-optimal split of C = 6ND under Chinchilla's parametric loss."""

import sympy

import analytic as an
from analytic.fit.derive import Derivation, S


def derive() -> Derivation:
    d = Derivation(
        "Compute-optimal models",
        "Given C FLOPs, how large a model and how many tokens minimise the loss?",
    )
    N, D, C = S("params", "tokens", "flops")
    E, A, B, alpha, beta = sympy.symbols("E A B alpha beta", positive=True)
    loss = d.step("Chinchilla's parametric loss", E + A / N**alpha + B / D**beta)
    on_budget = d.step("On the budget C = 6ND, D = C/(6N)", loss.subs(D, C / (6 * N)))
    crit = sympy.solve(sympy.diff(on_budget, N), N)[0]
    n_opt = d.step("Setting dL/dN = 0", sympy.simplify(crit))
    G = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
    closed = G * (C / 6) ** (beta / (alpha + beta))
    assert sympy.simplify(sympy.log(n_opt) - sympy.log(closed)).equals(0)
    d.step(
        "that is N_opt = G·(C/6)^(β/(α+β)) with G = (αA/(βB))^(1/(α+β)); and D_opt ="
        " (C/6)^(α/(α+β))/G",
        closed,
    )
    fit = {
        E: sympy.Rational("1.69"),
        A: sympy.Rational("406.4"),
        B: sympy.Rational("410.7"),
        alpha: sympy.Rational("0.34"),
        beta: sympy.Rational("0.28"),
    }
    d.check(
        loss.subs(fit),
        "scaling.chinchilla.loss",
        "With the fitted constants of App. D.2 (E = 1.69, A = 406.4, B = 410.7, α = 0.34, β ="
        " 0.28)",
    )
    d.check_numeric(closed.subs(fit), "scaling.chinchilla.optimal_params", {"flops": 5.76e23})
    d.check_numeric(
        ((C / 6) ** (alpha / (alpha + beta)) / G).subs(fit),
        "scaling.chinchilla.optimal_tokens",
        {"flops": 5.76e23},
    )
    d.number(
        "Exponent β/(α+β) with the fitted α = 0.34, β = 0.28",
        float((beta / (alpha + beta)).subs(fit)),
    )
    d.number(
        "For Chinchilla's budget 5.76e23 FLOPs: N_opt",
        an.formula("scaling.chinchilla.optimal_params")
        .evaluate(flops="5.76e23 FLOP")
        .to("Gparameter"),
    )
    d.number(
        "and D_opt",
        an.formula("scaling.chinchilla.optimal_tokens").evaluate(flops="5.76e23 FLOP").to("Ttoken"),
    )
    return d
