"""The cross-entropy losses of production stacks, and the peak memory each holds per logit from the
16-bit logits to their 16-bit gradient: what ``loss_bytes`` of presets/stacks.toml says."""

from __future__ import annotations

import contextlib
import functools

import torch
import torch.nn.functional as F

from .profiling import peak_live_bytes


class VocabParallelCrossEntropy(torch.autograd.Function):
    """Megatron-LM's vocabulary-parallel cross entropy at t = 1 (megatron/core/tensor_parallel/
    cross_entropy.py): an fp32 copy of the logits, the maximum subtracted and exp taken in place,
    the softmax saved, and the gradient written over it in the backward."""

    @staticmethod
    def forward(ctx, logits, target):
        logits = logits.float()
        logits -= logits.max(dim=-1, keepdim=True)[0]
        predicted = logits.gather(-1, target[:, None]).squeeze(-1)
        logits.exp_()
        sum_exp = logits.sum(dim=-1, keepdim=True)
        logits.div_(sum_exp)
        ctx.save_for_backward(logits, target)
        return (torch.log(sum_exp).squeeze(-1) - predicted).mean()

    @staticmethod
    def backward(ctx, grad):
        softmax, target = ctx.saved_tensors
        softmax[torch.arange(softmax.shape[0]), target] -= 1.0
        softmax.mul_(grad / softmax.shape[0])
        return softmax.to(torch.bfloat16), None


def megatron(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return VocabParallelCrossEntropy.apply(logits, target)


def torchtitan(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """pytorch/torchtitan train.py (2024): ``cross_entropy(pred.flatten(0, 1).float(), labels)``."""
    return F.cross_entropy(logits.float(), target)


def torchtitan_loss_parallel(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """TorchTitan's loss under TP: the same call on logits sharded over the vocabulary (a one-rank
    process group of its own), forward and backward inside ``loss_parallel`` (:data:`CONTEXTS`)."""
    return F.cross_entropy(_vocabulary_sharded(logits).float(), target)


@functools.cache
def _compiled(loss):
    return torch.compile(loss)


def torchtitan_compiled(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """TorchTitan's loss compiled, as its training.compile does from 2025 (torchtitan
    components/loss.py build_cross_entropy_loss): Inductor fuses the fp32 copy away."""
    return _compiled(torchtitan)(logits, target)


def torchtitan_compiled_loss_parallel(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The compiled loss on logits sharded over the vocabulary, inside ``loss_parallel``."""
    return _compiled(torchtitan)(_vocabulary_sharded(logits), target)


@functools.cache
def _mesh():
    """A one-rank CPU device mesh, made once: every sharded loss runs on the same mesh, as in
    training (with a fresh mesh per call, torch 2.13's Inductor fails to compile a sharded loss
    after an eager one)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return init_device_mesh("cpu", (1,))


def _vocabulary_sharded(logits: torch.Tensor):
    """``logits`` as a DTensor sharded over the vocabulary on a one-rank process group of its
    own."""
    from torch.distributed.tensor import DTensor, Shard

    return DTensor.from_local(logits, _mesh(), [Shard(1)], run_check=False)


def _loss_parallel():
    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel()


LOSSES = {
    "megatron": megatron,
    "torchtitan": torchtitan,
    "torchtitan_loss_parallel": torchtitan_loss_parallel,
    "torchtitan_compiled": torchtitan_compiled,
    "torchtitan_compiled_loss_parallel": torchtitan_compiled_loss_parallel,
}
#: the context a loss's forward and backward run in (TorchTitan's training step enters
#: loss_parallel)
CONTEXTS = {
    "torchtitan_loss_parallel": _loss_parallel,
    "torchtitan_compiled_loss_parallel": _loss_parallel,
}


def _run(loss, context, hidden: torch.Tensor, target: torch.Tensor) -> None:
    """One loss forward and backward from the output layer's 16-bit logits, as a training step takes
    it."""
    with context():
        # the output layer's result: allocated here, freed once the loss is taken
        logits = hidden * 1
        value = loss(logits, target)
        del logits  # the training loop keeps only the loss
        value.backward()


def peak_bytes_per_logit(name: str, tokens: int = 2048, vocab: int = 4096) -> float:
    """Peak bytes allocated per logit by loss ``name`` of :data:`LOSSES`, on the CPU, from the
    output layer's 16-bit logits through the loss's backward to the 16-bit gradient it hands back (a
    compiled loss is compiled first, outside the measurement)."""
    loss, context = LOSSES[name], CONTEXTS.get(name, contextlib.nullcontext)

    def inputs():
        return (
            torch.randn(tokens, vocab, dtype=torch.bfloat16, requires_grad=True),
            torch.randint(0, vocab, (tokens,)),
        )

    if "compiled" in name:
        _run(loss, context, *inputs())
    hidden, target = inputs()
    return peak_live_bytes(lambda: _run(loss, context, hidden, target)) / (tokens * vocab)


__all__ = [
    "CONTEXTS",
    "LOSSES",
    "VocabParallelCrossEntropy",
    "megatron",
    "peak_bytes_per_logit",
    "torchtitan",
    "torchtitan_compiled",
    "torchtitan_compiled_loss_parallel",
    "torchtitan_loss_parallel",
]
