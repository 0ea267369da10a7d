"""Collectives: ring α–β cost, bytes each rank sends, and nccl-tests bus-bandwidth factors.

S is the full buffer: the input of all-reduce and reduce-scatter, the gathered output of all-gather,
each rank's whole send buffer for all-to-all. Bandwidth is per rank, one direction."""

from ._catalogue import S, define

Sz, n, Bw, alpha = S("message", "ranks", "bandwidth", "latency")
g, nn, Bup, Bout = S("gpus_per_node", "nodes", "scale_up_bandwidth", "scale_out_bandwidth")

THAKUR = "Thakur, Rabenseifner & Gropp 2005, Optimization of Collective Communication Operations in MPICH (ring algorithms)"
NCCL = "NVIDIA/nccl-tests doc/PERFORMANCE.md (commit 03a204a)"
RING = ("ring algorithm, bandwidth-bound, each step costs α + (bytes sent)/B",)

_steps = {"all_reduce": 2 * (n - 1), "reduce_scatter": n - 1, "all_gather": n - 1, "all_to_all": n - 1}
_volume = {"all_reduce": 2 * (n - 1) / n * Sz, "reduce_scatter": (n - 1) / n * Sz,
           "all_gather": (n - 1) / n * Sz, "all_to_all": (n - 1) / n * Sz}
_busbw = {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "all_gather": (n - 1) / n,
          "all_to_all": (n - 1) / n, "broadcast": n / n}
_what = {"all_reduce": "all-reduce", "reduce_scatter": "reduce-scatter", "all_gather": "all-gather",
         "all_to_all": "all-to-all (pairwise exchange)"}

for _name, _vol in _volume.items():
    define(f"collectives.{_name}.time", _steps[_name] * alpha + _vol / Bw, "s",
           f"{THAKUR}; derived: derivations/collectives.py", RING, f"time of a ring {_what[_name]}")
    define(f"collectives.{_name}.bytes_sent", _vol, "byte", f"{THAKUR}; derived: derivations/collectives.py",
           RING, f"bytes each rank sends in a ring {_what[_name]}")
for _name, _factor in _busbw.items():
    define(f"collectives.{_name}.busbw_factor", _factor, "", NCCL,
           ("busbw = algbw × factor, algbw = S / t",), f"nccl-tests bus-bandwidth factor of {_name}",
           keywords=("ranks",))

define("collectives.broadcast.time", (n - 1) * alpha + Sz / Bw, "s", f"{THAKUR} (pipelined chain, large messages)",
       ("the message is pipelined along a chain of n ranks; bandwidth term independent of n",),
       "time of a pipelined broadcast")
define("collectives.broadcast.bytes_sent", Sz, "byte", f"{THAKUR} (pipelined chain)",
       ("every rank but the last forwards the whole message",), "bytes a forwarding rank sends in a broadcast")

_HIER = ("two levels: reduce-scatter over the g ranks of a node (scale-up), all-reduce of the S/g shard over "
         "the n_n nodes (scale-out), all-gather over the node",)
define("collectives.hierarchical_all_reduce.time",
       2 * ((g - 1) * alpha + (g - 1) / g * Sz / Bup) + 2 * (nn - 1) * alpha + 2 * (nn - 1) / nn * (Sz / g) / Bout,
       "s", f"{THAKUR}; NCCL tree/ring two-level algorithms; derived: derivations/collectives.py", _HIER,
       "time of a two-level all-reduce")
define("collectives.hierarchical_all_reduce.bytes_sent_scale_up", 2 * (g - 1) / g * Sz, "byte",
       "derived: derivations/collectives.py", _HIER, "bytes each rank sends inside its node")
define("collectives.hierarchical_all_reduce.bytes_sent_scale_out", 2 * (nn - 1) / nn * Sz / g, "byte",
       "derived: derivations/collectives.py", _HIER, "bytes each rank sends across nodes")
for _name in ("reduce_scatter", "all_gather"):
    define(f"collectives.hierarchical_{_name}.time",
           (g - 1) * alpha + (g - 1) / g * Sz / Bup + (nn - 1) * alpha + (nn - 1) / nn * (Sz / g) / Bout, "s",
           f"{THAKUR}; derived: derivations/collectives.py",
           (f"two levels: {_what[_name]} over the g ranks of a node (scale-up) and over the n_n nodes (scale-out) "
            "of the S/g shard",), f"time of a two-level {_what[_name]}")

for _name in ("reduce_scatter", "all_gather"):
    define(f"collectives.ring_across_nodes_{_name}.time",
           (g * nn - 1) * alpha + (g - 1) / g * Sz / Bup + (nn - 1) / nn * (Sz / g) / Bout, "s",
           f"{THAKUR}; NVIDIA/nccl: rings over every rank, one channel per NIC; derived: derivations/collectives.py",
           (f"NCCL's ring {_what[_name]} over all g·n_n ranks of n_n nodes: a step of latency per rank",
            "bytes as the two-level algorithm: (g−1)/g·S over the scale-up link, the S/g shard's (n_n−1)/n_n over "
            "each of the node's g NICs"),
           f"time of a ring {_what[_name]} spanning nodes")
