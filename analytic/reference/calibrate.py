"""Calibrate the α–β model on a real ``torch.distributed`` backend.

Each rank times the library's collectives over a range of message sizes; the catalogue's ring
formula gives, for n ranks, time = steps·α + factor·S/B, a straight line in S. The fit uses every
other size and predicts the rest (held out). Runs on gloo over 127.0.0.1 by spawning ranks, or
unchanged under ``torchrun`` on a cluster with ``--backend nccl`` (each rank uses its local GPU).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import sympy

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")


def _time_collectives(rank: int, world: int, sizes: list[int], reps: int, device) -> dict:
    import torch
    import torch.distributed as dist

    rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    out = {}
    for name in COLLECTIVES:
        out[name] = []
        for size in sizes:
            # float32 elements, divisible by the world size
            n = max(
                world, size // 4 // world * world
            )
            x = torch.ones(n, device=device)
            if name == "all_reduce":
                op = lambda: dist.all_reduce(x)  # noqa: E731
                message = n * 4
            elif name == "reduce_scatter":
                shard = torch.empty(n // world, device=device)
                op = lambda: rs(shard, x)  # noqa: E731
                message = n * 4
            elif name == "all_gather":
                shard = torch.ones(n // world, device=device)
                op = lambda: ag(x, shard)  # noqa: E731
                message = n * 4
            else:
                y = torch.empty_like(x)
                op = lambda: dist.all_to_all_single(y, x)  # noqa: E731
                message = n * 4
            op()
            times = []
            for _ in range(reps):
                dist.barrier()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                op()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            out[name].append([message, statistics.median(times)])
    return out


def _coefficients(name: str, ranks: int) -> tuple[float, float]:
    """(steps multiplying α, factor multiplying S/B) of the catalogue's ring formula at
    ``ranks``."""
    from ..core.symbols import sym
    from ..formulas import formula

    expr = formula(f"collectives.{name}.time").expr.subs(sym("ranks"), ranks)
    steps = float(sympy.diff(expr, sym("latency")))
    factor = float(sympy.diff(expr, sym("message")) * sym("bandwidth"))
    return steps, factor


def fit(measurements: dict, ranks: int) -> dict:
    """α and B per collective from even-indexed sizes (least squares on relative error, since the
    sizes span three decades); held-out error on the odd-indexed ones."""
    result = {}
    for name, points in measurements.items():
        pts = np.array(points, dtype=float)
        train, test = pts[::2], pts[1::2]
        slope, intercept = np.polyfit(train[:, 0], train[:, 1], 1, w=1 / train[:, 1])
        steps, factor = _coefficients(name, ranks)
        alpha = max(intercept, 0.0) / steps
        bandwidth = factor / slope if slope > 0 else math.inf
        fitted = intercept + slope * train[:, 0]
        r2 = 1 - np.sum((train[:, 1] - fitted) ** 2) / np.sum(
            (train[:, 1] - train[:, 1].mean()) ** 2
        )
        pred = intercept + slope * test[:, 0]
        held = float(np.mean(np.abs(pred - test[:, 1]) / test[:, 1])) if len(test) else float("nan")
        result[name] = {
            "alpha_us": alpha * 1e6,
            "bandwidth_GBps": bandwidth / 1e9,
            "r2": float(r2),
            "held_out_error": held,
            "points": len(pts),
        }
    return result


def _quiet():
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")


def _worker(rank, world, port, outdir, backend, sizes, reps):
    import torch
    import torch.distributed as dist

    _quiet()
    if port is not None:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group(backend, rank=rank, world_size=world)
    device = (
        torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        if backend == "nccl"
        else torch.device("cpu")
    )
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        data = _time_collectives(rank, world, sizes, reps, device)
        if rank == 0:
            Path(outdir, "times.json").write_text(json.dumps(data))
    finally:
        dist.destroy_process_group()


def measure(backend: str, ranks: int, sizes: list[int], reps: int = 5) -> dict:
    """Time the collectives; start ``ranks`` local processes unless launched by torchrun."""
    with tempfile.TemporaryDirectory() as outdir:
        # torchrun: this process is one rank
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            import torch.distributed as dist

            dist.init_process_group(backend)
            rank, world = dist.get_rank(), dist.get_world_size()
            _worker(rank, world, None, outdir, backend, sizes, reps)
            if rank != 0:
                return {}
            ranks = world
        else:
            from .collectives import free_port, start

            start(_worker, (ranks, free_port(), outdir, backend, sizes, reps), ranks)
        return {"ranks": ranks, "times": json.loads(Path(outdir, "times.json").read_text())}


def profile_overrides(path) -> dict:
    """Plan keyword overrides from a written profile: the all-reduce fit's α and bandwidth (used
    for the scale-up link, with link efficiency 1 since the bandwidth is measured)."""
    import tomllib

    from ..core.errors import PresetError
    from ..core.units import Q

    try:
        ar = tomllib.loads(Path(path).read_text())["all_reduce"]
        alpha, bandwidth = float(ar["alpha_us"]), float(ar["bandwidth_GBps"])
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise PresetError(
            f"{path}: not a profile written by 'analytic calibrate --backend' ({exc})"
        ) from None
    if not (math.isfinite(bandwidth) and bandwidth > 0 and math.isfinite(alpha)):
        raise PresetError(
            f"{path}: the all-reduce fit found no bandwidth (its times did not grow with the"
            f" message size: {bandwidth} GB/s); measure again on a quieter machine or with larger"
            " messages"
        )
    return {
        "latency": Q(alpha, "µs"),
        "scale_up_bandwidth": Q(bandwidth, "GB/s"),
        "link_efficiency": 1.0,
    }


#: most ranks spawned on this machine (each is a process with its own torch)
MAX_LOCAL_RANKS = 64


def _check(backend: str, ranks: int) -> None:
    """Refuse what cannot run before spawning anything: too few ranks, no torch, NCCL without
    GPUs."""
    from ..core.errors import InputError, install_hint

    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if not torchrun and not 2 <= ranks <= MAX_LOCAL_RANKS:
        raise InputError(
            "--ranks: expected an integer from 2 (a collective needs two ranks) to"
            f" {MAX_LOCAL_RANKS} (local processes), got {ranks}"
        )
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise InputError(f"calibrate --backend: needs torch ({install_hint('torch')})") from None
    if backend == "nccl":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not dist.is_nccl_available() or gpus < (1 if torchrun else ranks):
            raise InputError(
                f"--backend nccl: needs NCCL and {1 if torchrun else ranks} GPU(s) on this machine"
                f" (this torch: NCCL {'available' if dist.is_nccl_available() else 'missing'},"
                f" {gpus} GPU(s)); use --backend gloo on CPUs"
            )


def main(args) -> int:
    _check(args.backend, args.ranks)
    sizes = [2**k for k in range(12, 23)]
    data = measure(args.backend, args.ranks, sizes)
    if not data:
        return 0
    result = fit(data["times"], data["ranks"])
    if args.json:
        print(json.dumps({"backend": args.backend, "ranks": data["ranks"], "fit": result}))
    else:
        print(
            f"{args.backend}, {data['ranks']} ranks, {len(sizes)} message sizes from {sizes[0]:,}"
            f" to {sizes[-1]:,} bytes; fit on every other size, error on the rest"
        )
        print(
            f"{'collective':<16} {'α (µs)':>10} {'B (GB/s)':>10} {'R²':>8}"
            f" {'held-out error':>15}"
        )
        for name, r in result.items():
            print(
                f"{name:<16} {r['alpha_us']:>10.2f} {r['bandwidth_GBps']:>10.3f} {r['r2']:>8.4f} "
                f"{100 * r['held_out_error']:>14.1f}%"
            )
    if args.write:
        lines = [
            f"# measured by analytic calibrate --backend {args.backend} --ranks {data['ranks']}",
            "",
        ]
        for name, r in result.items():
            lines += [
                f"[{name}]",
                f"alpha_us = {r['alpha_us']:.4f}",
                f"bandwidth_GBps = {r['bandwidth_GBps']:.6f}",
                f"r2 = {r['r2']:.6f}",
                f"held_out_error = {r['held_out_error']:.6f}",
                "",
            ]
        Path(args.write).write_text("\n".join(lines))
        print(f"wrote {args.write}", file=sys.stderr)
    return 0
