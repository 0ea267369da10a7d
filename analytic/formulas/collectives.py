"""Collectives: ring α–β cost, bytes each rank sends, and nccl-tests bus-bandwidth factors.

S is the full buffer: the input of all-reduce and reduce-scatter, the gathered output of all-gather,
each rank's whole send buffer for all-to-all. Bandwidth is per rank, one direction."""

from ..core.algebra import Max, Min
from ..core.terms import subs
from ._catalogue import S, define

Sz, n, Bw, alpha = S("message", "ranks", "bandwidth", "latency")
g, nn, Bup, Bout = S("gpus_per_node", "nodes", "scale_up_bandwidth", "scale_out_bandwidth")

THAKUR = (
    "Thakur, Rabenseifner & Gropp 2005, Optimization of Collective Communication Operations in"
    " MPICH (ring algorithms)"
)
NCCL = "NVIDIA/nccl-tests doc/PERFORMANCE.md (commit 03a204a)"
RING = ("ring algorithm, bandwidth-bound, each step costs α + (bytes sent)/B",)

_steps = {
    "all_reduce": 2 * (n - 1),
    "reduce_scatter": n - 1,
    "all_gather": n - 1,
    "all_to_all": n - 1,
}
_volume = {
    "all_reduce": 2 * (n - 1) / n * Sz,
    "reduce_scatter": (n - 1) / n * Sz,
    "all_gather": (n - 1) / n * Sz,
    "all_to_all": (n - 1) / n * Sz,
}
_busbw = {
    "all_reduce": 2 * (n - 1) / n,
    "reduce_scatter": (n - 1) / n,
    "all_gather": (n - 1) / n,
    "all_to_all": (n - 1) / n,
    "broadcast": n / n,
}
_what = {
    "all_reduce": "all-reduce",
    "reduce_scatter": "reduce-scatter",
    "all_gather": "all-gather",
    "all_to_all": "all-to-all (pairwise exchange)",
}

for _name, _vol in _volume.items():
    define(
        f"collectives.{_name}.time",
        _steps[_name] * alpha + _vol / Bw,
        "s",
        f"{THAKUR}; derived: derivations/collectives.py",
        RING,
        f"time of a ring {_what[_name]}",
    )
    define(
        f"collectives.{_name}.bytes_sent",
        _vol,
        "byte",
        f"{THAKUR}; derived: derivations/collectives.py",
        RING,
        f"bytes each rank sends in a ring {_what[_name]}",
    )
for _name, _factor in _busbw.items():
    define(
        f"collectives.{_name}.busbw_factor",
        _factor,
        "",
        NCCL,
        ("busbw = algbw × factor, algbw = S / t",),
        f"nccl-tests bus-bandwidth factor of {_name}",
        keywords=("ranks",),
    )

define(
    "collectives.broadcast.time",
    (n - 1) * alpha + Sz / Bw,
    "s",
    f"{THAKUR} (pipelined chain, large messages)",
    ("the message is pipelined along a chain of n ranks; bandwidth term independent of n",),
    "time of a pipelined broadcast",
)
define(
    "collectives.transfer.time",
    Sz / Bw,
    "s",
    "definition (bytes over the link's bandwidth)",
    (
        (
            "one rank sends the message to another over one link at its full bandwidth; the latency"
            " left out"
        ),
    ),
    "bandwidth time of a point-to-point transfer",
)
define(
    "collectives.broadcast.bytes_sent",
    Sz,
    "byte",
    f"{THAKUR} (pipelined chain)",
    ("every rank but the last forwards the whole message",),
    "bytes a forwarding rank sends in a broadcast",
)

_links = S("scale_up_links")
define(
    "collectives.mesh.scale_up_bandwidth",
    Bup * Min(Max(n - 1, 1), _links) / _links,
    "byte/s",
    "AMD CDNA 3 architecture white paper, Figure 9 (seven Infinity Fabric links fully connect 8"
    " MI300X); ROCm documentation, MI300X workload optimization, 'Use all eight GPUs' (collectives"
    " over fewer GPUs reach a fraction of the node's bandwidth); derived:"
    " derivations/collectives.py",
    (
        (
            "a fully connected domain without a switch: each accelerator has n_up links of"
            " B_up/n_up, one to each peer"
        ),
        (
            "a group of n ranks of the domain sends each peer its share over the link to it (direct"
            " exchanges, or several rings at once), keeping its n − 1 links busy; links to"
            " accelerators outside the group stay idle"
        ),
        (
            "a group of one sends nothing; it is given one link, so that its time is 0/B rather"
            " than 0/0"
        ),
    ),
    "scale-up bandwidth per rank of a group of n ranks on a fully connected domain",
    keywords=("scale_up_bandwidth", "ranks", "scale_up_links"),
)

_HIER = (
    (
        "two levels: reduce-scatter over the g ranks of a node (scale-up), all-reduce of the S/g"
        " shard over the n_n nodes (scale-out), all-gather over the node"
    ),
)
define(
    "collectives.hierarchical_all_reduce.time",
    2 * ((g - 1) * alpha + (g - 1) / g * Sz / Bup)
    + 2 * (nn - 1) * alpha
    + 2 * (nn - 1) / nn * (Sz / g) / Bout,
    "s",
    f"{THAKUR}; NCCL tree/ring two-level algorithms; derived: derivations/collectives.py",
    _HIER,
    "time of a two-level all-reduce",
)
define(
    "collectives.hierarchical_all_reduce.bytes_sent_scale_up",
    2 * (g - 1) / g * Sz,
    "byte",
    "derived: derivations/collectives.py",
    _HIER,
    "bytes each rank sends inside its node",
)
define(
    "collectives.hierarchical_all_reduce.bytes_sent_scale_out",
    2 * (nn - 1) / nn * Sz / g,
    "byte",
    "derived: derivations/collectives.py",
    _HIER,
    "bytes each rank sends across nodes",
)
for _name in ("reduce_scatter", "all_gather"):
    define(
        f"collectives.hierarchical_{_name}.time",
        (g - 1) * alpha
        + (g - 1) / g * Sz / Bup
        + (nn - 1) * alpha
        + (nn - 1) / nn * (Sz / g) / Bout,
        "s",
        f"{THAKUR}; derived: derivations/collectives.py",
        (
            (
                f"two levels: {_what[_name]} over the g ranks of a node (scale-up) and over the n_n"
                " nodes (scale-out) of the S/g shard"
            ),
        ),
        f"time of a two-level {_what[_name]}",
    )

_N = g * nn  # ranks of a collective spanning n_n nodes of g
_MULTI = (
    "n_n nodes of g ranks each (a node: one scale-up domain), one NIC per rank",
    (
        "large messages, as NCCL runs them (NCCL_ALGO=Ring): one ring per channel through every"
        " rank, the g channels entering and leaving each node through different NICs, so each"
        " rank's NIC carries 1/g of its ring traffic and its scale-up link the other (g−1)/g"
    ),
    (
        "pipelined: chunks stream through every link at once, so the slower of the two links sets"
        " the time"
    ),
)
_MULTI_SRC = (
    "NVIDIA/nccl src/graph/rings.cc, search.cc (rings over every rank, one NIC per channel);"
    " Jeaugey 2019, Massively Scale Your Deep Learning Training with NCCL 2.4 (NVIDIA technical"
    f" blog); {THAKUR}; derived: derivations/collectives.py"
)
_aup, _aout = S("scale_up_latency", "scale_out_latency")
define(
    "collectives.multinode.step_latency",
    ((_N - nn) * _aup + (nn - 1) * _aout) / (_N - 1),
    "s",
    "NVIDIA/nccl src/graph/tuning.cc (commit b6475625), ncclTopoTuneModel: a ring's latency is "
    "(nsteps − nInterSteps)·intraLat + nInterSteps·interLat",
    (
        (
            "a ring over N = g·n_n ranks: of its N − 1 hops, n_n − 1 leave a node (a NIC's"
            " latency), the rest stay inside one (the scale-up link's)"
        ),
    ),
    "mean latency per step of a ring spanning nodes",
    keywords=("gpus_per_node", "nodes", "scale_up_latency", "scale_out_latency"),
)
_ring_volume = {k: subs(v, n, _N) for k, v in _volume.items() if k != "all_to_all"}
_ring_steps = {k: subs(v, n, _N) for k, v in _steps.items() if k != "all_to_all"}
_split = {k: ((g - 1) / g * v, v / g) for k, v in _ring_volume.items()}
# pairwise all-to-all: S/N to each of the g − 1 ranks of its node and to each of the N − g
# others
_split["all_to_all"] = ((g - 1) / _N * Sz, (nn - 1) / nn * Sz)
_ring_steps["all_to_all"] = _N - 1
for _name, (_up, _out) in _split.items():
    _alg = (
        (
            _MULTI[0],
            (
                "pairwise exchange: a rank sends S/N to every other rank, g − 1 of them in its"
                " node; in N − 1 steps of a latency each, the sends of a step to peers in the"
                " node over the scale-up link and to peers elsewhere through the rank's NIC"
            ),
            _MULTI[2],
        )
        if _name == "all_to_all"
        else _MULTI
    )
    define(
        f"collectives.multinode.{_name}.bytes_sent_scale_up",
        _up,
        "byte",
        _MULTI_SRC,
        _alg,
        f"bytes each rank sends over its scale-up link in a {_what[_name]} spanning nodes",
        keywords=("message", "gpus_per_node", "nodes"),
    )
    define(
        f"collectives.multinode.{_name}.bytes_sent_scale_out",
        _out,
        "byte",
        _MULTI_SRC,
        _alg,
        f"bytes each rank sends through its NIC in a {_what[_name]} spanning nodes",
        keywords=("message", "gpus_per_node", "nodes"),
    )
    define(
        f"collectives.multinode.{_name}.time",
        _ring_steps[_name] * alpha + Max(_up / Bup, _out / Bout),
        "s",
        _MULTI_SRC,
        _alg,
        f"time of a {_what[_name]} over n_n nodes of g ranks, as NCCL runs it for large messages",
        keywords=(
            "message",
            "gpus_per_node",
            "nodes",
            "scale_up_bandwidth",
            "scale_out_bandwidth",
            "latency",
        ),
    )
