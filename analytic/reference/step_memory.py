"""Whole training steps of a tiny Llama under FSDP2 on one device (or several CPU processes), their
peak memory measured against the library's count of the same plan (``Plan.memory``).

The run is TorchTitan's: its units (:data:`WRAPPINGS`) wrapped by ``fully_shard`` with
``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``, fp32 parameter shards, AdamW (foreach
in 2024, fused in 2025: :data:`KERNELS`), the loss ``cross_entropy(logits.float(), labels)``
(compiled for the stack of 2025, :data:`STACKS`), gradients accumulated over the step's
microbatches. On a GPU the peak is the caching allocator's (``torch.cuda.max_memory_allocated``, and
its reserve ``max_memory_reserved``); on the CPU, which has no such allocator, it is the most bytes
live at once by the profiler's record of every allocation and free, the allocated peak's
counterpart. The reference's norm and SwiGLU kernels compute a block of rows at a time, as fused
kernels do, so their fp32 working set stays small; what the CPU's attention kernel and FSDP2's
collectives allocate is theirs.

``python -m analytic.reference.step_memory [--device cuda]`` prints the comparison.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from ..core.errors import InputError
from ..core.values import choice
from ..presets import stack as preset
from ..presets.model import Model
from . import loss
from .profiling import live_bytes
from .transformer import Transformer

#: a Llama of four blocks that a CPU runs in seconds; its vocabulary is given to :func:`tiny`
TINY = dict(
    layers=4, hidden=256, heads=4, kv_heads=4, ffn_hidden=704, mlp="swiglu", position="rope",
    norm="rmsnorm", bias=False,
)


def tiny(vocab: int = 4096, seq_len: int = 1024) -> Model:
    """The :data:`TINY` Llama with ``vocab`` tokens and rotary positions up to ``seq_len``."""
    return Model(**TINY, vocab=vocab, max_seq_len=seq_len)


@functools.cache
def _mesh(device_type: str):
    """A device mesh over the process group's ranks: the one :func:`measure_ranks` started, or else
    one rank on a group of its own (gloo on the CPU, NCCL on a GPU)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.is_initialized():
        dist.init_process_group(
            "gloo" if device_type == "cpu" else "nccl", store=dist.HashStore(), rank=0, world_size=1
        )
    return init_device_mesh(device_type, (dist.get_world_size(),))


#: TorchTitan's FSDP2 units without a pipeline, by the version of its apply_fsdp
#: (torchtitan/parallelisms/parallelize_llama.py at 6b03ffa32, Dec 2024;
#: torchtitan/models/llama3/infra/ parallelize.py from 83e694105, July 2025)
WRAPPINGS = {
    "2024": (
        "every block resharded after its forward but the last; the embedding, final norm and output"
        " layer in the root, which FSDP2 never reshards after its forward"
    ),
    "2025": (
        "the embedding and every block resharded after their forward; the final norm and output"
        " layer one unit kept unsharded"
    ),
}


def build(model: Model, seq_len: int, device: torch.device, wrapping: str = "2024") -> Transformer:
    """The reference transformer of ``model`` (flash attention), sharded by FSDP2 in TorchTitan's
    units (:data:`WRAPPINGS`) with its mixed precision, its rotary tables in bf16."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    choice("wrapping", wrapping, tuple(WRAPPINGS))
    if wrapping == "2025" and model.tied_embeddings:
        raise InputError(
            "wrapping: TorchTitan's units of 2025 put the output layer beside the final norm; "
            "a model with tied embeddings has none of its own"
        )
    net = Transformer(model, dtype=torch.float32, attention="flash", seq_len=seq_len).to(device)
    net.causal = torch.empty(0, 0, device=device)  # flash attention masks by itself
    mesh, policy = _mesh(device.type), MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32
    )
    shard = functools.partial(fully_shard, mesh=mesh, mp_policy=policy)
    if wrapping == "2025":
        shard(net.embed)
    # 2024: the last stays unsharded for the backward, which needs it next
    for i, block in enumerate(net.blocks):
        shard(block, reshard_after_forward=wrapping == "2025" or i < len(net.blocks) - 1)
    if wrapping == "2025":
        shard([net.norm, net.head], reshard_after_forward=False)
    shard(net)
    net.cos, net.sin = net.cos.bfloat16(), net.sin.bfloat16()
    return net


#: the loss each stack of the library takes on the output layer's bf16 logits (:mod:`.loss`):
#: TorchTitan's ``cross_entropy(logits.float(), labels)``, eager (2024, and 2025 without
#: torch.compile) or compiled (2025)
STACKS = {
    "torchtitan": loss.torchtitan,
    "torchtitan-2025": loss.torchtitan_compiled,
    "torchtitan-2025-eager": loss.torchtitan,
}


#: AdamW's arguments for each of the stacks' kernels (presets/stacks.toml optimizer_kernel)
KERNELS = {"foreach": {"foreach": True}, "fused": {"fused": True}}


def _step(net, optimizer, batches, recompute: str, stack: str) -> None:
    """One step as TorchTitan's: gradients freed, each microbatch's forward, loss and backward,
    gradients accumulating, then AdamW."""
    optimizer.zero_grad()
    for tokens, labels in batches:
        logits = net(tokens, checkpoint=recompute)
        value = STACKS[stack](logits.flatten(0, 1), labels.flatten(0, 1))
        del logits  # the training loop keeps only the loss
        value.backward()
    optimizer.step()


def _bytes(tensors) -> int:
    """Bytes of the distinct storages under ``tensors`` (FSDP2's gradients of a block are views of
    one)."""
    local = (t.to_local() if hasattr(t, "to_local") else t for t in tensors)  # a DTensor's shard
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in local}
    return sum(storages.values())


def _everywhere(flag: bool) -> bool:
    """Whether ``flag`` holds on every rank of the process group (so that all ranks step again
    together)."""
    import torch.distributed as dist

    held = torch.tensor(int(flag))
    dist.all_reduce(held, op=dist.ReduceOp.MIN)
    return bool(held)


#: steps measured at most on the CPU. Gloo's worker thread can free a collective's buffer after
#: FSDP2 lets go of it, unrecorded; such a step's record ends holding more than the gradients it
#: leaves.
TRIES = 10


def measure(
    model: Model,
    *,
    seq_len: int,
    microbatch_size: int,
    microbatches: int,
    recompute: str = "none",
    stack: str = "torchtitan",
    device: str = "cpu",
    wrapping: str = "2024",
) -> dict:
    """Bytes of a step after a first one: ``weights`` (the fp32 parameter shards), ``gradients`` (as
    the step leaves them, before they are zeroed), ``optimizer`` (AdamW's two moments), ``peak``
    (allocated at the step's peak) and, on a GPU, ``reserved`` (the allocator's peak)."""
    choice("stack", stack, tuple(STACKS))
    dev = torch.device(device)
    torch.manual_seed(0)
    net = build(model, seq_len, dev, wrapping)
    optimizer = torch.optim.AdamW(
        net.parameters(), lr=1e-4, **KERNELS[preset(stack)["optimizer_kernel"]]
    )
    batches = [
        (
            torch.randint(0, model.vocab, (microbatch_size, seq_len), device=dev),
            torch.randint(0, model.vocab, (microbatch_size, seq_len), device=dev),
        )
        for _ in range(microbatches)
    ]
    # the optimizer's state (and a compiled loss) exist from here on
    _step(net, optimizer, batches, recompute, stack)
    # freed before the measurement starts: what it holds is the states and buffers
    optimizer.zero_grad()
    params = list(net.parameters())
    gradients = lambda: _bytes(p.grad for p in params)  # noqa: E731
    moments = [v for state in optimizer.state.values() for k, v in state.items() if k != "step"]
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
        _step(net, optimizer, batches, recompute, stack)
        torch.cuda.synchronize()
        peak, reserved = torch.cuda.max_memory_allocated(dev), torch.cuda.max_memory_reserved(dev)
    else:
        # a record missing a free reads high; it is known by what it ends holding
        for _ in range(TRIES):
            top, kept = live_bytes(lambda: _step(net, optimizer, batches, recompute, stack))
            if _everywhere(kept == gradients()):
                break
            optimizer.zero_grad()
        else:
            raise RuntimeError(
                f"no step of {TRIES} was recorded whole: each ended holding more than its gradients"
            )
        # AdamW's counters, 4 bytes a tensor
        steps = [state["step"] for state in optimizer.state.values()]
        # before the profile
        held = _bytes(params) + _bytes(moments) + _bytes(steps) + _bytes(net.buffers())
        peak, reserved = held + top, None
    return {
        "weights": _bytes(params),
        "gradients": gradients(),
        "optimizer": _bytes(moments),
        "peak": peak,
        "reserved": reserved,
    }


def _rank(rank: int, ranks: int, port: int, outdir: str, fields: dict, kw: dict) -> None:
    import os

    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    # an error exits non-zero
    Path(outdir, f"{rank}.json").write_text(json.dumps(measure(Model(**fields), **kw)))
    dist.barrier()  # every rank is past its last collective
    # the process ends here: tearing down gloo's and the profiler's threads at exit can abort it
    # ("terminate called without an active exception") after its result is written
    os._exit(0)


def measure_ranks(model: Model, ranks: int, **kw) -> list[dict]:
    """:func:`measure` on each of ``ranks`` CPU processes (gloo), FSDP2 sharding over all of
    them."""
    import dataclasses
    import tempfile

    from .collectives import free_port, start

    with tempfile.TemporaryDirectory() as outdir:
        start(_rank, (ranks, free_port(), outdir, dataclasses.asdict(model), kw), ranks)
        return [json.loads(Path(outdir, f"{r}.json").read_text()) for r in range(ranks)]


def plan(
    model: Model,
    *,
    seq_len: int,
    microbatch_size: int,
    microbatches: int,
    recompute: str = "none",
    stack: str = "torchtitan",
    ranks: int = 1,
):
    """The library's plan of the measured run: ZeRO-3 (FSDP2) over ``ranks``, the given TorchTitan
    stack, bf16 (on an H100 preset: the hardware sets the verdict, not the bytes compared)."""
    from .. import Layout, Plan
    from ..presets import hardware

    return Plan(
        model,
        hardware("h100-sxm"),
        Layout(dp=ranks, zero=3, recompute=recompute),
        seq_len=seq_len,
        global_batch=microbatch_size * microbatches * ranks,
        microbatch_size=microbatch_size,
        stack=stack,
    )


def compare(
    model: Model,
    *,
    seq_len: int,
    microbatch_size: int,
    microbatches: int,
    recompute: str = "none",
    stack: str = "torchtitan",
    device: str = "cpu",
    ranks: int = 1,
    wrapping: str = "2024",
) -> list[tuple[str, float, float | None]]:
    """(what, the library's bytes, the measured bytes of rank 0) for the model states, the allocated
    peak and, on a GPU, the reserved peak against the count times the allocator's fitted reserve.
    The count has one ZeRO-3 working set for every wrapping: two blocks' parameters and one's
    gradients."""
    kw = dict(
        seq_len=seq_len, microbatch_size=microbatch_size, microbatches=microbatches,
        recompute=recompute, stack=stack,
    )
    got = (
        measure(model, device=device, wrapping=wrapping, **kw)
        if ranks == 1
        else measure_ranks(model, ranks, wrapping=wrapping, **kw)[0]
    )
    p = plan(model, ranks=ranks, **kw)
    mem = p.memory()
    states = sum(
        getattr(mem, part).to("byte").magnitude for part in ("weights", "gradients", "optimizer")
    )
    return [
        (
            "model states (weights, gradients, optimizer)",
            states,
            got["weights"] + got["gradients"] + got["optimizer"],
        ),
        ("peak allocated (the count)", mem.total.to("byte").magnitude, got["peak"]),
        (
            "peak reserved (the count times the reserve)",
            p.memory_peak().to("byte").magnitude,
            got["reserved"],
        ),
    ]


def main(argv=None) -> int:
    """The command line: one step's comparison printed, and written as JSON where ``--json``
    says."""
    from ..cli.flags import CLIError, count_flag

    counts = {"vocab": 4096, "seq": 1024, "microbatch-size": 2, "microbatches": 2, "ranks": 1}
    ap = _parser(counts)
    try:
        a = ap.parse_args(argv)
        vocab, seq, size, count, ranks = (
            count_flag(getattr(a, flag.replace("-", "_")), flag) for flag in counts
        )
    except CLIError as exc:
        ap.exit(2, f"{exc}\n")
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.exit(2, "--device: cuda is not available here\n")
    if a.device == "cuda" and ranks > 1:
        ap.exit(2, f"--ranks: the GPU check runs on one device, got {ranks}\n")
    rows = compare(
        tiny(vocab, seq), seq_len=seq, microbatch_size=size, microbatches=count,
        recompute=a.recompute, stack=a.stack, device=a.device, ranks=ranks, wrapping=a.wrapping,
    )
    where = a.device if ranks == 1 else f"{ranks} CPU processes (rank 0's)"
    print(
        f"a tiny Llama ({TINY['layers']} blocks, hidden {TINY['hidden']}, vocabulary {vocab}) under"
        f" FSDP2 on {where} in TorchTitan's units of {a.wrapping}: {count}"
        f" microbatch{'es' if count > 1 else ''} of {size} × {seq} tokens, recompute"
        f" {a.recompute}, stack {a.stack}"
    )
    for what, ours, measured in rows:
        if measured is None:
            print(f"  {what:46s} {ours / 1e6:9.2f} MB   (no caching allocator on the {a.device})")
        else:
            print(
                f"  {what:46s} {ours / 1e6:9.2f} MB   measured {measured / 1e6:9.2f} MB  "
                f" {ours / measured - 1:+.1%}"
            )
    if a.json:
        _write(a, rows, ranks, vocab, seq, size, count)
    return 0


def _parser(counts: dict):
    """The command's flags, ``counts`` (flag → default) among them."""
    from ..cli.flags import Parser

    ap = Parser(
        prog="python -m analytic.reference.step_memory",
        description="Measure a tiny Llama's training step under FSDP2 against the count.",
    )
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    for flag, default in counts.items():
        ap.add_argument(f"--{flag}", default=str(default))
    ap.add_argument("--recompute", default="none", choices=("none", "full"))
    ap.add_argument(
        "--stack",
        default="torchtitan",
        choices=tuple(STACKS),
        help="the stack: its loss (eager or compiled) and its AdamW (foreach or fused)",
    )
    ap.add_argument(
        "--wrapping",
        default="2024",
        choices=tuple(WRAPPINGS),
        help="TorchTitan's FSDP2 units: " + "; ".join(f"{k}, {v}" for k, v in WRAPPINGS.items()),
    )
    ap.add_argument("--json", metavar="FILE", help="also write the comparison to FILE")
    return ap


def _write(a, rows, ranks, vocab, seq, size, count) -> None:
    """The comparison and its configuration, as JSON to the file ``--json`` names."""
    config = dict(
        device=a.device, ranks=ranks, vocab=vocab, seq_len=seq, microbatch_size=size,
        microbatches=count, recompute=a.recompute, stack=a.stack, wrapping=a.wrapping, model=TINY,
    )
    Path(a.json).write_text(
        json.dumps(
            {
                "config": config,
                "rows": [
                    {"what": what, "library_bytes": ours, "measured_bytes": measured}
                    for what, ours, measured in rows
                ],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "KERNELS",
    "STACKS",
    "TINY",
    "TRIES",
    "WRAPPINGS",
    "build",
    "compare",
    "main",
    "measure",
    "measure_ranks",
    "plan",
    "tiny",
]
