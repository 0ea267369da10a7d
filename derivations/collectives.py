"""Collectives: ring reduce-scatter and all-gather step by step, all-reduce as their sum, the
bandwidth lower bound, nccl-tests bus bandwidth, and when a two-level all-reduce wins."""

import sympy

from analytic.derive import Derivation, S


def derive() -> Derivation:
    d = Derivation("Collectives on a ring", "How many bytes does each rank send, and how long does it take?")
    Sz, n, Bw, alpha = S("message", "ranks", "bandwidth", "latency")
    k = sympy.Symbol("k", integer=True, positive=True)
    d.step("Reduce-scatter: the buffer is cut into n chunks; in each of n − 1 steps a rank sends one chunk of S/n "
           "to its neighbour, which adds it to its own", sympy.Eq(sympy.Symbol("step_k"), Sz / n))
    rs_bytes = d.step("Bytes each rank sends", sympy.summation(Sz / n, (k, 1, n - 1)))
    d.check(rs_bytes, "collectives.reduce_scatter.bytes_sent")
    d.check((n - 1) * (alpha + Sz / (n * Bw)), "collectives.reduce_scatter.time",
            "Each step costs a latency α and S/(nB):")
    d.step("All-gather runs the same ring in reverse: each rank forwards the chunk it received")
    d.check(sympy.summation(Sz / n, (k, 1, n - 1)), "collectives.all_gather.bytes_sent")
    d.check((n - 1) * (alpha + Sz / (n * Bw)), "collectives.all_gather.time")
    d.check(2 * (n - 1) * (alpha + Sz / (n * Bw)), "collectives.all_reduce.time",
            "All-reduce = reduce-scatter (each rank ends with one reduced chunk) + all-gather:")
    lower = d.step("Lower bound: a rank must receive (n−1)/n·S of other ranks' data to reduce its chunk, and the other "
                   "n−1 reduced chunks, (n−1)/n·S more; by symmetry it sends as much",
                   2 * (n - 1) / n * Sz)
    d.check(lower, "collectives.all_reduce.bytes_sent", "The ring meets it:")
    d.check(lower / Sz, "collectives.all_reduce.busbw_factor", "nccl-tests' bus bandwidth = algbw × bytes sent per rank / S:")
    d.check(rs_bytes / Sz, "collectives.reduce_scatter.busbw_factor")
    d.check(rs_bytes / Sz, "collectives.all_gather.busbw_factor")
    d.step("All-to-all, pairwise: in each of n − 1 steps a rank sends the S/n slice meant for one other rank")
    d.check(sympy.summation(Sz / n, (k, 1, n - 1)), "collectives.all_to_all.bytes_sent")
    d.check((n - 1) * (alpha + Sz / (n * Bw)), "collectives.all_to_all.time")
    d.check(rs_bytes / Sz, "collectives.all_to_all.busbw_factor")
    d.check((n - 1) * alpha + Sz / Bw, "collectives.broadcast.time",
            "Broadcast pipelined along a chain of n ranks: the first piece needs n − 1 hops of latency, then the "
            "whole message streams through every link at B (large messages, pieces small)")
    # two levels: g ranks per node, n_n nodes
    g, nn, Bup, Bout = S("gpus_per_node", "nodes", "scale_up_bandwidth", "scale_out_bandwidth")
    hier = d.step("Two-level all-reduce: reduce-scatter inside the node, all-reduce of the S/g shard across nodes, "
                  "all-gather inside the node",
                  2 * ((g - 1) * alpha + (g - 1) / g * Sz / Bup) + 2 * (nn - 1) * (alpha + (Sz / g) / (nn * Bout)))
    d.check(hier, "collectives.hierarchical_all_reduce.time")
    d.check(2 * (g - 1) / g * Sz, "collectives.hierarchical_all_reduce.bytes_sent_scale_up",
            "Each rank sends a reduce-scatter's and an all-gather's worth inside the node")
    d.check(2 * (nn - 1) / nn * Sz / g, "collectives.hierarchical_all_reduce.bytes_sent_scale_out",
            "and an all-reduce of its S/g shard across nodes")
    for part in ("reduce_scatter", "all_gather"):
        d.check((g - 1) * (alpha + Sz / (g * Bup)) + (nn - 1) * (alpha + (Sz / g) / (nn * Bout)),
                f"collectives.hierarchical_{part}.time", f"The two-level {part.replace('_', '-')} alone: one level after the other")
    for part in ("reduce_scatter", "all_gather"):
        d.check((g * nn - 1) * alpha + (g - 1) / g * Sz / Bup + (nn - 1) / nn * (Sz / g) / Bout,
                f"collectives.ring_across_nodes_{part}.time",
                f"NCCL's {part.replace('_', '-')} is one ring over all g·n_n ranks (a ring per NIC): the same bytes "
                "per link, but every rank is a step of latency")
    flat = d.step("A flat ring over all g·n_n ranks, each crossing at the NIC's bandwidth",
                  2 * (g * nn - 1) * (alpha + Sz / (g * nn * Bout)))
    big = sympy.limit((hier - flat).subs(alpha, 0) / Sz, nn, sympy.oo)
    d.step("Bandwidth terms per byte, for many nodes (hierarchical − flat)", sympy.simplify(big))
    crossover = sympy.solve(sympy.Eq(big, 0), Bup)[0]
    d.step("The two-level algorithm wins on bandwidth whenever the scale-up link is faster than", sympy.Eq(Bup, crossover))
    lat = sympy.simplify(((hier - flat) / alpha).subs(Sz, 0))
    d.step("and on latency it always takes fewer steps (flat − hierarchical, in α)", sympy.simplify(-lat))
    return d
