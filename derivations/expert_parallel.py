"""Expert parallelism: all-to-all volume per MoE layer and DeepSeek-V3's node-limited routing."""

import sympy

import analytic as an
from analytic.fit.derive import Derivation, S


def derive() -> Derivation:
    d = Derivation(
        "Expert parallelism",
        "How many bytes does an MoE layer move, and why limit each token to M nodes?",
    )
    D, k, h, e, M, Bup, Bout, n = S(
        "tokens", "topk", "hidden", "element_bytes", "nodes_per_token", "scale_up_bandwidth",
        "scale_out_bandwidth", "ranks",
    )
    disp = d.check(
        D * k * h * e,
        "parallelism.ep.dispatch_bytes",
        "Each of D tokens goes to k experts as an h-vector",
    )
    d.step(
        "With experts spread evenly over n ranks, a fraction (n−1)/n of it leaves the rank",
        an.formula("collectives.all_to_all.bytes_sent").expr.subs(S("message"), disp),
    )
    d.step(
        "The combine returns the same volume; backward repeats both: 4 all-to-alls per MoE layer"
        " per microbatch."
    )
    d.check(
        D * M * h * e,
        "parallelism.ep.node_limited_dispatch_bytes",
        "Node-limited routing: a token crosses the scale-out link once per destination node (at"
        " most M), then NVLink forwards it to the experts inside",
    )
    x = sympy.Symbol("x", positive=True)
    per_node = sympy.solve(sympy.Eq(h * e / Bout, x * h * e / Bup), x)[0]
    d.check(
        per_node,
        "parallelism.ep.experts_per_node_at_same_cost",
        "While one copy crosses IB, NVLink can forward x copies inside the node:",
    )
    d.check(M * per_node, "parallelism.ep.experts_at_same_cost")
    N = S("nodes")
    miss = d.step(
        "A token's k experts each sit on one of N nodes, drawn uniformly (balanced routing): a"
        " given node receives none of them with probability",
        (1 - 1 / N) ** k,
    )
    reached = d.check(
        N * (1 - miss),
        "parallelism.ep.nodes_reached",
        "By linearity of expectation the token reaches on average (DeepEP's flex dispatcher sends"
        " it once to each)",
    )
    for nodes, topk in ((2, 2), (4, 3), (8, 8)):  # the mean over every placement, counted
        import itertools

        placements = list(itertools.product(range(nodes), repeat=topk))
        mean = sympy.Rational(sum(len(set(p)) for p in placements), len(placements))
        assert reached.subs({N: nodes, k: topk}) == mean
    d.number(
        "Qwen3-235B-A22B's 8 experts over 8 nodes: nodes a token reaches",
        reached.subs({N: 8, k: 8}),
    )
    hw = an.hardware("h800")
    d.number(
        "H800 (NVLink 160 GB/s, IB 50 GB/s): experts per node at one IB copy's cost",
        an.formula("parallelism.ep.experts_per_node_at_same_cost").evaluate(
            scale_up_bandwidth=hw.scale_up_bandwidth, scale_out_bandwidth=hw.scale_out_bandwidth
        ),
    )
    d.number(
        "over M = 4 nodes (DeepSeek-V3 routes to 8 of them)",
        an.formula("parallelism.ep.experts_at_same_cost").evaluate(
            nodes_per_token=4,
            scale_up_bandwidth=hw.scale_up_bandwidth,
            scale_out_bandwidth=hw.scale_out_bandwidth,
        ),
    )
    return d
