"""Ring collectives written from point-to-point sends on a real ``torch.distributed`` process group,
counting every byte each rank sends, and the checks that compare them with the library collectives
and with the catalogue's ``bytes_sent`` formulas.

Buffers are split into n equal chunks; a length not divisible by n is zero-padded to the next
multiple (the padding is sent too, so the count is (n−1)·⌈S/n⌉ per ring pass: exactly the
formula when n divides S).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

_rs_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_ag_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class Dispatched(TorchDispatchMode):
    """The elements of each output of ``op`` dispatched inside it, one entry a call."""

    def __init__(self, op):
        super().__init__()
        self.op, self.elements = op, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is self.op:
            self.elements.append(out.numel())
        return out


class Counter:
    """Bytes this rank has sent."""

    def __init__(self):
        self.bytes = 0

    def exchange(self, send: torch.Tensor, to: int, recv: torch.Tensor, frm: int):
        self.bytes += send.numel() * send.element_size()
        reqs = [dist.isend(send.contiguous(), to), dist.irecv(recv, frm)]
        for r in reqs:
            r.wait()


def _pad(x: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
    flat = x.reshape(-1)
    pad = (-flat.numel()) % n
    return (torch.cat([flat, flat.new_zeros(pad)]) if pad else flat.clone()), pad


def ring_reduce_scatter(x: torch.Tensor, ranks: list[int], counter: Counter) -> torch.Tensor:
    """Sum-reduce ``x`` over ``ranks``; this rank ends with chunk ``ranks.index(me)``."""
    n, me = len(ranks), ranks.index(dist.get_rank())
    buf, _ = _pad(x, n)
    chunks = list(buf.chunk(n))
    right, left = ranks[(me + 1) % n], ranks[(me - 1) % n]
    for step in range(n - 1):
        send_i, recv_i = (me - step - 1) % n, (me - step - 2) % n
        incoming = torch.empty_like(chunks[recv_i])
        counter.exchange(chunks[send_i], right, incoming, left)
        chunks[recv_i] = chunks[recv_i] + incoming
    return chunks[me]


def ring_all_gather(chunk: torch.Tensor, ranks: list[int], counter: Counter) -> torch.Tensor:
    """Gather one chunk from every rank of ``ranks`` (in ring order) into one buffer."""
    n, me = len(ranks), ranks.index(dist.get_rank())
    chunks = [torch.empty_like(chunk) for _ in range(n)]
    chunks[me] = chunk.clone()
    right, left = ranks[(me + 1) % n], ranks[(me - 1) % n]
    for step in range(n - 1):
        send_i, recv_i = (me - step) % n, (me - step - 1) % n
        counter.exchange(chunks[send_i], right, chunks[recv_i], left)
    return torch.cat(chunks)


def ring_all_reduce(x: torch.Tensor, ranks: list[int], counter: Counter) -> torch.Tensor:
    full = ring_all_gather(ring_reduce_scatter(x, ranks, counter), ranks, counter)
    return full[: x.numel()].view_as(x)


def pairwise_all_to_all(x: torch.Tensor, ranks: list[int], counter: Counter) -> torch.Tensor:
    """Slice j of ``x`` goes to rank j; returns what every rank sent to this one."""
    n, me = len(ranks), ranks.index(dist.get_rank())
    send = list(x.chunk(n))
    recv = [None] * n
    recv[me] = send[me].clone()
    for step in range(1, n):
        to, frm = (me + step) % n, (me - step) % n
        recv[frm] = torch.empty_like(send[frm])
        counter.exchange(send[to], ranks[to], recv[frm], ranks[frm])
    return torch.cat(recv)


def hierarchical_all_reduce(x: torch.Tensor, per_node: int) -> tuple[torch.Tensor, int, int]:
    """Reduce-scatter inside the node, all-reduce the shard across nodes, all-gather inside the
    node. Returns the result and the bytes sent inside and across nodes."""
    rank, world = dist.get_rank(), dist.get_world_size()
    node, local = divmod(rank, per_node)
    intra = [node * per_node + i for i in range(per_node)]
    inter = [j * per_node + local for j in range(world // per_node)]
    up, out = Counter(), Counter()
    shard = ring_reduce_scatter(x, intra, up)
    shard = ring_all_reduce(shard, inter, out)
    full = ring_all_gather(shard, intra, up)
    return full[: x.numel()].view_as(x), up.bytes, out.bytes


class LinkCounter(Counter):
    """Bytes this rank has sent, split by link: to a rank of its own "node" of ``per_node`` ranks
    (scale-up) or of another (scale-out)."""

    def __init__(self, per_node: int):
        super().__init__()
        self.per_node, self.up, self.out = per_node, 0, 0

    def exchange(self, send: torch.Tensor, to: int, recv: torch.Tensor, frm: int):
        sent = send.numel() * send.element_size()
        if to // self.per_node == dist.get_rank() // self.per_node:
            self.up += sent
        else:
            self.out += sent
        super().exchange(send, to, recv, frm)


def channel_rings(world: int, per_node: int) -> list[list[int]]:
    """NCCL-style rings over every rank, one per channel: channel c visits each node's ranks in an
    order rotated by c, so each rank is the one that leaves its node in exactly one channel."""
    nodes = world // per_node
    return [
        [k * per_node + (c + j) % per_node for k in range(nodes) for j in range(per_node)]
        for c in range(per_node)
    ]


def multinode_all_reduce(
    x: torch.Tensor, per_node: int
) -> tuple[torch.Tensor, LinkCounter, LinkCounter]:
    """All-reduce as reduce-scatter + all-gather over :func:`channel_rings`, the buffer split evenly
    over the channels; returns the result and the reduce-scatter's and the all-gather's counters."""
    rings = channel_rings(dist.get_world_size(), per_node)
    rs, ag = LinkCounter(per_node), LinkCounter(per_node)
    parts = [
        ring_all_gather(ring_reduce_scatter(part, ring, rs), ring, ag)
        for part, ring in zip(x.reshape(-1).chunk(len(rings)), rings, strict=True)
    ]
    return torch.cat(parts)[: x.numel()].view_as(x), rs, ag


def checks(rank: int, world: int) -> dict:
    """Every collective check for one rank (run inside an initialised process group): the mismatches
    against torch.distributed and, for each message, the bytes counted beside the catalogue's."""
    res = {"rank": rank, "world": world, "mismatch": [], "bytes": []}
    gen = torch.Generator().manual_seed(1234 + rank)
    _ring_checks(res, gen)
    _all_to_all_check(res)
    _tensor_parallel_checks(res)
    _bytes_formulas(res)
    if world % 2 == 0 and world >= 4:
        _two_level_checks(res, gen)
    return res


def _ring_checks(res: dict, gen) -> None:
    """All-reduce as the library's reduce-scatter + all-gather, and the send/recv rings with their
    bytes, against torch.distributed, for three dtypes and lengths divisible by the world size or
    not."""
    world = res["world"]
    ranks = list(range(world))
    for dtype in (torch.float64, torch.float32, torch.int64):
        # divisible by the world size, and two uneven lengths
        for length in (world * 6, world * 6 + 1, 7):
            x = (torch.randint(-50, 50, (length,), generator=gen)).to(dtype)
            ref = x.clone()
            dist.all_reduce(ref)
            padded, pad = _pad(x, world)
            shard = torch.empty(padded.numel() // world, dtype=dtype)
            _rs_single(shard, padded)
            gathered = torch.empty_like(padded)
            _ag_single(gathered, shard)
            if not torch.equal(gathered[: x.numel()], ref):
                res["mismatch"].append(f"rs+ag {dtype} {length}")
            for kind, run, want in (
                ("all_reduce", lambda c: ring_all_reduce(x, ranks, c), ref),
                ("reduce_scatter", lambda c: ring_reduce_scatter(x, ranks, c), shard),
                ("all_gather", lambda c: ring_all_gather(shard, ranks, c), gathered),
            ):
                c = Counter()
                if not torch.equal(run(c), want):
                    res["mismatch"].append(f"ring {kind} {dtype} {length}")
                res["bytes"].append(
                    {
                        "kind": kind,
                        "bytes": c.bytes,
                        "message": padded.numel() * x.element_size(),
                        "exact": pad == 0,
                    }
                )


def _all_to_all_check(res: dict) -> None:
    """The pairwise all-to-all against torch.distributed's, its bytes counted."""
    rank, world = res["rank"], res["world"]
    y = torch.arange(world * 4, dtype=torch.float32) + 100 * rank
    ref = torch.empty_like(y)
    dist.all_to_all_single(ref, y)
    c = Counter()
    if not torch.equal(pairwise_all_to_all(y, list(range(world)), c), ref):
        res["mismatch"].append("pairwise all_to_all")
    res["bytes"].append(
        {
            "kind": "all_to_all",
            "bytes": c.bytes,
            "message": y.numel() * y.element_size(),
            "exact": True,
        }
    )


def _tensor_parallel_checks(res: dict) -> None:
    """A column- then row-parallel MLP and an attention with its heads split over the ranks, each
    summed by an all-reduce, against the unsplit computation; the all-reduce's message beside the
    catalogue's."""
    from ..formulas import formula

    rank, world = res["rank"], res["world"]
    torch.manual_seed(7)  # the same full weights on every rank
    s_, b_, h_, f_ = 6, 2, 8, 8 * world
    xin = torch.randn(b_, s_, h_, dtype=torch.float64)
    w1, w2 = torch.randn(f_, h_, dtype=torch.float64), torch.randn(h_, f_, dtype=torch.float64)
    full = torch.nn.functional.gelu(xin @ w1.t()) @ w2.t()
    cols = slice(rank * f_ // world, (rank + 1) * f_ // world)
    partial = torch.nn.functional.gelu(xin @ w1[cols].t()) @ w2[:, cols].t()
    res["tp_message"] = partial.numel() * partial.element_size()
    dist.all_reduce(partial)
    if not torch.allclose(partial, full, rtol=1e-10, atol=1e-10):
        res["mismatch"].append("tensor-parallel MLP")
    res["tp_formula"] = float(
        formula("parallelism.tp.allreduce_bytes")
        .evaluate(seq_len=s_, microbatch_size=b_, hidden=h_, element_bytes="8 byte")
        .to("byte")
        .magnitude
    )
    a_, d_ = 2 * world, 4
    wq, wk, wv = (torch.randn(a_ * d_, h_, dtype=torch.float64) for _ in range(3))
    wo = torch.randn(h_, a_ * d_, dtype=torch.float64)

    def attention(heads):
        idx = torch.cat([torch.arange(hd * d_, (hd + 1) * d_) for hd in heads])
        q, k, v = (
            (xin @ w[idx].t()).view(b_, s_, len(heads), d_).transpose(1, 2) for w in (wq, wk, wv)
        )
        o = torch.softmax(q @ k.transpose(-1, -2) / d_**0.5, -1) @ v
        return o.transpose(1, 2).reshape(b_, s_, -1) @ wo[:, idx].t()

    part = attention(range(rank * a_ // world, (rank + 1) * a_ // world))
    dist.all_reduce(part)
    if not torch.allclose(part, attention(range(a_)), rtol=1e-10, atol=1e-10):
        res["mismatch"].append("tensor-parallel attention")


def _bytes_formulas(res: dict) -> None:
    """The catalogue's bytes sent beside each counted message (here, so the parent reads only
    numbers)."""
    from ..formulas import formula

    for b in res["bytes"]:
        want = formula(f"collectives.{b['kind']}.bytes_sent").evaluate(
            message=f"{b['message']} byte", ranks=res["world"]
        )
        b["formula"] = float(want.to("byte").magnitude)


def _two_level_checks(res: dict, gen) -> None:
    """The two-level all-reduce (2 ranks a "node") and NCCL-style rings and all-to-all over two
    "nodes" of world/2 ranks, against the flat collectives, their bytes on each link beside the
    catalogue's."""
    from ..formulas import formula

    rank, world = res["rank"], res["world"]
    z = torch.randn(world * 10, generator=gen, dtype=torch.float64)
    flat = z.clone()
    dist.all_reduce(flat)
    got, up, out = hierarchical_all_reduce(z, 2)
    if not torch.allclose(got, flat, rtol=1e-12, atol=1e-12):
        res["mismatch"].append("hierarchical all_reduce")
    size = z.numel() * z.element_size()
    res["hierarchical"] = {
        "up": up,
        "out": out,
        "formula_up": float(
            formula("collectives.hierarchical_all_reduce.bytes_sent_scale_up")
            .evaluate(message=f"{size} byte", gpus_per_node=2)
            .to("byte")
            .magnitude
        ),
        "formula_out": float(
            formula("collectives.hierarchical_all_reduce.bytes_sent_scale_out")
            .evaluate(message=f"{size} byte", gpus_per_node=2, nodes=world // 2)
            .to("byte")
            .magnitude
        ),
    }
    per_node = world // 2  # one channel per rank of a node
    z = torch.randn(world * per_node * 5, generator=gen, dtype=torch.float64)
    flat = z.clone()
    dist.all_reduce(flat)
    got, rs, ag = multinode_all_reduce(z, per_node)
    if not torch.allclose(got, flat, rtol=1e-12, atol=1e-12):
        res["mismatch"].append("multinode all_reduce")
    a2a = LinkCounter(per_node)
    y = torch.arange(world * 4, dtype=torch.float32) + 100 * rank
    ref = torch.empty_like(y)
    dist.all_to_all_single(ref, y)
    if not torch.equal(pairwise_all_to_all(y, list(range(world)), a2a), ref):
        res["mismatch"].append("multinode all_to_all")
    shape = {"gpus_per_node": per_node, "nodes": 2}
    size = z.numel() * z.element_size()
    res["multinode"] = [
        {
            "kind": kind,
            "up": up,
            "out": out,
            **{
                f"formula_{link}": float(
                    formula(f"collectives.multinode.{kind}.bytes_sent_scale_{link}")
                    .evaluate(message=f"{message} byte", **shape)
                    .to("byte")
                    .magnitude
                )
                for link in ("up", "out")
            },
        }
        for kind, up, out, message in (
            ("all_reduce", rs.up + ag.up, rs.out + ag.out, size),
            ("reduce_scatter", rs.up, rs.out, size),
            ("all_gather", ag.up, ag.out, size),
            ("all_to_all", a2a.up, a2a.out, y.numel() * y.element_size()),
        )
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _quiet():
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")


def _worker(rank, world, port, outdir, check):
    _quiet()
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        Path(outdir, f"{rank}.json").write_text(json.dumps(check(rank, world)))
    finally:
        dist.destroy_process_group()


def start(fn, args: tuple, ranks: int) -> None:
    """``fn(rank, *args)`` in ``ranks`` new processes, until each returns (an exception in one is
    raised here). They start from multiprocessing's fork server, as from a fresh interpreter; what
    the server preloads (``multiprocessing.set_forkserver_preload``, torch for the tests) each
    process has without importing it again."""
    import torch.multiprocessing as mp

    mp.start_processes(fn, args=args, nprocs=ranks, join=True, start_method="forkserver")


def run(world: int, check=checks) -> list[dict]:
    """Start ``world`` gloo ranks on 127.0.0.1 (:func:`start`), run ``check(rank, world)`` (a
    module-level function returning JSON-ready data) on each, return their results."""
    with tempfile.TemporaryDirectory() as outdir:
        start(_worker, (world, free_port(), outdir, check), world)
        return [json.loads(Path(outdir, f"{r}.json").read_text()) for r in range(world)]
