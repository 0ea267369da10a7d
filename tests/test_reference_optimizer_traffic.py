"""An AdamW step's HBM bytes counted on the operations PyTorch dispatches, against the catalogue's
count of its passes: fp32 master weights, moments and gradients."""

import pytest

torch = pytest.importorskip("torch", reason="the numeric reference needs the 'torch' extra")
import analytic as an  # noqa: E402
from analytic.reference import optimizer_traffic  # noqa: E402


@pytest.mark.parametrize("kernel", ["foreach", "for-loop"])
def test_pytorch_adamw_moves_the_foreach_passes(kernel):
    """PyTorch's AdamW, foreach or a tensor at a time, moves 8 + 14e + 2e_g bytes a parameter (72 in
    fp32) without weight decay, and the decay's pass 8 more."""
    bare = an.formula("compute.optimizer.bytes_per_param_foreach").evaluate(
        moment_bytes=4, grad_bytes=4
    )
    decay = an.formula("compute.optimizer.weight_decay_bytes_per_param").value()
    assert bare.to("B/parameter").magnitude == 72 and decay.to("B/parameter").magnitude == 8
    assert optimizer_traffic.bytes_per_param(kernel, 0.0) == pytest.approx(72, rel=1e-12)
    assert optimizer_traffic.bytes_per_param(kernel, 0.1) == pytest.approx(80, rel=1e-12)


def test_the_count_sees_each_operand_once():
    """A view moves nothing and a scalar is not counted: x.view(-1).mul_(2) on 1,000 fp32 elements
    reads and writes 4,000 bytes each; addcmul_ of one tensor with itself reads it once."""
    x, y = torch.randn(1000), torch.randn(1000)
    with optimizer_traffic.Traffic() as t:
        x.view(-1).mul_(torch.tensor(2.0))
    assert (t.read, t.written) == (4000, 4000)
    with optimizer_traffic.Traffic() as t:
        x.addcmul_(y, y, value=0.5)
    assert (t.read, t.written) == (8000, 4000)
