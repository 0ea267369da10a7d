"""PyTorch's context-parallel attention backward on gloo ranks of the CPU: the bytes it holds beyond
a plain flash-attention backward of the rank's tokens, what
memory.activations.backward.cp_ring_attention counts.

The rotaters write into outputs allocated once, as NCCL's collectives do (gloo's all-gather holds a
second copy of its output, which a CUDA run does not)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.tensor.experimental._context_parallel import _attention as ring

from .profiling import peak_live_bytes

HEADS, TOKENS, HEAD_DIM = 4, 256, 64  # a rank's Q, K and V: [1, HEADS, TOKENS, HEAD_DIM] in bf16


def _flash_backward(query, key, value, out, logsumexp, is_causal, grad_out, **_):
    """The CPU's flash-attention backward, called as the ring calls a kernel."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, query, key, value, out, logsumexp, 0.0, bool(is_causal)
    )


class _AllGather(ring._AllGatherRotater):
    """All-gathers K and V once into one preallocated output."""

    def exchange_buffers(self, curr_buffer: torch.Tensor) -> None:
        self._idx += 1
        if self._aggregated_buffer is None:
            out = curr_buffer.new_empty(dist.get_world_size(self._pg) * curr_buffer.numel())
            dist.all_gather_into_tensor(out, curr_buffer.contiguous(), group=self._pg)
            self._aggregated_buffer = out


class _PassOn(ring._AllToAllRotater):
    """Sends the buffer to the next rank and receives the previous rank's into a new tensor."""

    def exchange_buffers(self, curr_buffer: torch.Tensor) -> None:
        send = curr_buffer.contiguous()
        recv, rank, size = (torch.empty_like(send), dist.get_rank(self._pg),
                            dist.get_world_size(self._pg))
        for request in (dist.isend(send, (rank + 1) % size), dist.irecv(recv, (rank - 1) % size)):
            request.wait()
        self._buffer = recv


def _rotater(pg, seq_dim, method=None):
    kind = method or ring._cp_options.rotate_method
    return (
        _PassOn(pg, seq_dim) if kind == ring._RotateMethod.ALL_TO_ALL else _AllGather(pg, seq_dim)
    )


def extra_bytes(rank: int, world: int) -> dict:
    """This rank's peak bytes in the ring backward less a plain backward's, with the elements of its
    Q."""
    torch.manual_seed(rank)
    torch.set_num_threads(1)  # the CPU kernel's buffers are per thread
    q, k, v = (torch.randn(1, HEADS, TOKENS, HEAD_DIM, dtype=torch.bfloat16) for _ in range(3))
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)[:2]
    grad = torch.randn_like(out)
    kw = dict(query=q, key=k, value=v, out=out, logsumexp=lse, is_causal=True)
    saved, ring._create_rotater = ring._create_rotater, _rotater
    try:
        dist.barrier()
        ringed = peak_live_bytes(
            lambda: ring._templated_ring_attention_backward(
                dist.group.WORLD, 2, _flash_backward, grad, "grad_out", **kw
            )
        )
    finally:
        ring._create_rotater = saved
    plain = peak_live_bytes(lambda: _flash_backward(grad_out=grad, **kw))
    return {"rank": rank, "world": world, "extra": ringed - plain, "elements": q.numel()}


__all__ = ["HEADS", "HEAD_DIM", "TOKENS", "extra_bytes"]
