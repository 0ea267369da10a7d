"""Collectives: ring reduce-scatter and all-gather step by step, all-reduce as their sum, the
bandwidth lower bound, nccl-tests bus bandwidth, and when a two-level all-reduce wins."""

import sympy

from analytic.fit.derive import Derivation, S


def derive() -> Derivation:
    d = Derivation(
        "Collectives on a ring", "How many bytes does each rank send, and how long does it take?"
    )
    _ring(d)
    N = _across_nodes(d)
    _two_level(d, N)
    _switchless(d)
    return d


def _ring(d: Derivation):
    """Ring collectives on one level: bytes each rank sends, time and bus bandwidth."""
    Sz, n, Bw, alpha = S("message", "ranks", "bandwidth", "latency")
    k = sympy.Symbol("k", integer=True, positive=True)
    d.step(
        "Reduce-scatter: the buffer is cut into n chunks; in each of n − 1 steps a rank sends one"
        " chunk of S/n to its neighbour, which adds it to its own",
        sympy.Eq(sympy.Symbol("step_k"), Sz / n),
    )
    rs_bytes = d.step("Bytes each rank sends", sympy.summation(Sz / n, (k, 1, n - 1)))
    d.check(rs_bytes, "collectives.reduce_scatter.bytes_sent")
    d.check(
        (n - 1) * (alpha + Sz / (n * Bw)),
        "collectives.reduce_scatter.time",
        "Each step costs a latency α and S/(nB):",
    )
    d.step("All-gather runs the same ring in reverse: each rank forwards the chunk it received")
    d.check(sympy.summation(Sz / n, (k, 1, n - 1)), "collectives.all_gather.bytes_sent")
    d.check((n - 1) * (alpha + Sz / (n * Bw)), "collectives.all_gather.time")
    d.check(
        2 * (n - 1) * (alpha + Sz / (n * Bw)),
        "collectives.all_reduce.time",
        "All-reduce = reduce-scatter (each rank ends with one reduced chunk) + all-gather:",
    )
    lower = d.step(
        "Lower bound: a rank must receive (n−1)/n·S of other ranks' data to reduce its chunk, and"
        " the other n−1 reduced chunks, (n−1)/n·S more; by symmetry it sends as much",
        2 * (n - 1) / n * Sz,
    )
    d.check(lower, "collectives.all_reduce.bytes_sent", "The ring meets it:")
    d.check(
        lower / Sz,
        "collectives.all_reduce.busbw_factor",
        "nccl-tests' bus bandwidth = algbw × bytes sent per rank / S:",
    )
    d.check(rs_bytes / Sz, "collectives.reduce_scatter.busbw_factor")
    d.check(rs_bytes / Sz, "collectives.all_gather.busbw_factor")
    d.step(
        "All-to-all, pairwise: in each of n − 1 steps a rank sends the S/n slice meant for one"
        " other rank"
    )
    d.check(sympy.summation(Sz / n, (k, 1, n - 1)), "collectives.all_to_all.bytes_sent")
    d.check((n - 1) * (alpha + Sz / (n * Bw)), "collectives.all_to_all.time")
    d.check(rs_bytes / Sz, "collectives.all_to_all.busbw_factor")
    d.check(
        (n - 1) * alpha + Sz / Bw,
        "collectives.broadcast.time",
        "Broadcast pipelined along a chain of n ranks: the first piece needs n − 1 hops of latency,"
        " then the whole message streams through every link at B (large messages, pieces small)",
    )


def _across_nodes(d: Derivation):
    """Collectives spanning nodes: the bytes on each level and the slower link's pace."""
    Sz, n, Bw, alpha = S("message", "ranks", "bandwidth", "latency")
    g, nn, Bup, Bout = S("gpus_per_node", "nodes", "scale_up_bandwidth", "scale_out_bandwidth")
    N = g * nn
    d.step(
        "Spanning nodes: N = g·n_n ranks on n_n nodes of g (a node here is one scale-up domain),"
        " one NIC per rank. NCCL builds one ring per channel through all N ranks; in channel c it"
        " visits each node's ranks in an order rotated by c, so over g channels the ring leaves"
        " every node once through each rank's NIC",
        sympy.Eq(sympy.Symbol("N"), N),
    )
    d.step(
        "In one ring pass (reduce-scatter or all-gather) every position sends (N−1)/N of its"
        " channel's share. Of the g positions a node holds in a channel, g − 1 hand on inside the"
        " node and one to the next node; a rank is the leaving one in exactly one of the g"
        " channels, so its NIC carries this fraction of its bytes",
        sympy.Rational(1, 1) / g,
    )
    for part, volume in (
        ("all_reduce", 2 * (N - 1) / N * Sz),
        ("reduce_scatter", (N - 1) / N * Sz),
        ("all_gather", (N - 1) / N * Sz),
    ):
        up = d.check(
            (g - 1) / g * volume,
            f"collectives.multinode.{part}.bytes_sent_scale_up",
            f"{part.replace('_', '-')}: bytes a rank sends inside its node",
        )
        out = d.check(
            volume / g, f"collectives.multinode.{part}.bytes_sent_scale_out", "and through its NIC"
        )
        steps = 2 * (N - 1) if part == "all_reduce" else N - 1
        d.check(
            steps * alpha + sympy.Max(up / Bup, out / Bout),
            f"collectives.multinode.{part}.time",
            "Chunks are pipelined, so both links carry their share at once and the slower one sets"
            " the time; every rank of the ring is a step of latency",
        )
    ring_bw = (
        2
        * (N - 1)
        / N
        * Sz
        / (2 * (N - 1) / N * Sz * sympy.Max((g - 1) / (g * Bup), 1 / (g * Bout)))
    )
    d.step(
        "The all-reduce's bus bandwidth 2(N−1)/N·S/t for large messages (α = 0): the smaller of the"
        " node's NICs together and the scale-up link over its (g−1)/g share",
        sympy.Min(g * Bout, g * Bup / (g - 1)),
    )
    d.number(
        "For H100 nodes (g = 8, B_up = 450 GB/s, B_out = 50 GB/s), in GB/s",
        float(ring_bw.subs({g: 8, Bup: 450, Bout: 50})),
    )
    d.step(
        "All-to-all, pairwise over N ranks: a rank sends S/N to each of the g − 1 others in its"
        " node and to each of the N − g ranks elsewhere"
    )
    up = d.check((g - 1) * Sz / N, "collectives.multinode.all_to_all.bytes_sent_scale_up")
    out = d.check((N - g) * Sz / N, "collectives.multinode.all_to_all.bytes_sent_scale_out")
    d.check(
        (N - 1) * alpha + sympy.Max(up / Bup, out / Bout), "collectives.multinode.all_to_all.time"
    )
    return N


def _two_level(d: Derivation, N):
    """The explicit two-level all-reduce against the flat ring, and where it wins."""
    Sz, n, Bw, alpha = S("message", "ranks", "bandwidth", "latency")
    g, nn, Bup, Bout = S("gpus_per_node", "nodes", "scale_up_bandwidth", "scale_out_bandwidth")
    hier = d.step(
        "Two-level all-reduce, an explicit hierarchical algorithm: reduce-scatter inside the node, "
        "all-reduce of the S/g shard across nodes, all-gather inside the node, one after the other",
        2 * ((g - 1) * alpha + (g - 1) / g * Sz / Bup)
        + 2 * (nn - 1) * (alpha + (Sz / g) / (nn * Bout)),
    )
    d.check(hier, "collectives.hierarchical_all_reduce.time")
    d.check(
        2 * (g - 1) / g * Sz,
        "collectives.hierarchical_all_reduce.bytes_sent_scale_up",
        "Each rank sends a reduce-scatter's and an all-gather's worth inside the node",
    )
    d.check(
        2 * (nn - 1) / nn * Sz / g,
        "collectives.hierarchical_all_reduce.bytes_sent_scale_out",
        "and an all-reduce of its S/g shard across nodes",
    )
    for part in ("reduce_scatter", "all_gather"):
        d.check(
            (g - 1) * (alpha + Sz / (g * Bup)) + (nn - 1) * (alpha + (Sz / g) / (nn * Bout)),
            f"collectives.hierarchical_{part}.time",
            f"The two-level {part.replace('_', '-')} alone: one level after the other",
        )
    nic_bound = 2 * (N - 1) * alpha + 2 * (N - 1) / (g * N) * Sz / Bout
    d.step(
        "Where the NICs are the bottleneck (g·B_out ≤ g·B_up/(g−1), as on every system in the"
        " presets), the ring takes",
        nic_bound,
    )
    bw = sympy.factor(sympy.simplify(((hier - nic_bound) / Sz).subs(alpha, 0)))
    d.step(
        "Two-level − ring, per byte (α = 0): positive whenever B_up < g·n_n·B_out, so the pipelined"
        " ring wins on bandwidth: the two-level algorithm pays its two links one after the other,"
        " the ring both at once",
        bw,
    )
    lat = sympy.factor(sympy.simplify(((nic_bound - hier) / alpha).subs(Sz, 0)))
    d.step("and the two-level algorithm takes fewer steps of latency (ring − two-level, in α)", lat)
    crossover = sympy.factor(sympy.solve(sympy.Eq(hier, nic_bound), Sz)[0])
    d.step("so it is faster below the message size", sympy.Eq(sympy.Symbol("S^*"), crossover))
    d.number(
        "For 8 H100 nodes (g = 8, n_n = 8, B_up = 450 GB/s, B_out = 50 GB/s) and α = 10 µs, S*"
        " in MB",
        float(crossover.subs({g: 8, nn: 8, Bup: 450e9, Bout: 50e9, alpha: 10e-6})) / 1e6,
    )
    d.step(
        "A flat ring through ONE NIC per node (every byte of the node crossing one 50 GB/s link)"
        " would be bound by B_out alone; spreading the channels over the node's g NICs is what"
        " gives the ring g·B_out"
    )


def _switchless(d: Derivation):
    """A fully connected domain without a switch."""
    Sz, n, Bw, alpha = S("message", "ranks", "bandwidth", "latency")
    g, nn, Bup, Bout = S("gpus_per_node", "nodes", "scale_up_bandwidth", "scale_out_bandwidth")
    L = S("scale_up_links")
    d.step(
        "A scale-up domain without a switch (AMD's 8-GPU nodes): each accelerator has n_up direct"
        " links, one to each peer, B_up/n_up each way. A group of n ranks of the domain touches"
        " only the n − 1 links to its own ranks; an algorithm that sends each peer its share over"
        " the link to it (a direct reduce-scatter or all-to-all, or several rings at once) keeps"
        " all n − 1 busy, and none can use more",
        sympy.Eq(sympy.Symbol("links_used"), sympy.Min(n - 1, L)),
    )
    d.check(
        Bup * sympy.Min(sympy.Max(n - 1, 1), L) / L,
        "collectives.mesh.scale_up_bandwidth",
        "so the group reaches this share of B_up (a group of one, which sends nothing, is given one"
        " link); a switch (NVLink) gives every group all of it",
    )
    d.number(
        "MI300X (n_up = 7, B_up = 448 GB/s): a TP group of 2, in GB/s",
        float((Bup * (n - 1) / L).subs({Bup: 448, n: 2, L: 7})),
    )
