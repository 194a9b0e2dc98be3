"""The products of the LSTM through oneDNN (modules/gemm.py) against PyTorch's own."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from fairseq_speaker.modules import gemm

needs_onednn = pytest.mark.skipif(not gemm._AVAILABLE, reason="this PyTorch build has no oneDNN linear")


def _cases():
    torch.manual_seed(0)
    wide = torch.randn(12, 30)
    yield "2-d", torch.randn(7, 10), torch.randn(12, 10), torch.randn(12)
    yield "3-d, no bias", torch.randn(4, 5, 10), torch.randn(12, 10), None
    yield "time-major view", torch.randn(5, 4, 10).transpose(0, 1), torch.randn(12, 10), torch.randn(12)
    yield "a slice of a weight's columns", torch.randn(6, 10), wide[:, 10:20], torch.randn(12)
    yield "a transposed weight", torch.randn(6, 10), torch.randn(10, 12).t(), None


@needs_onednn
@pytest.mark.parametrize("case", list(_cases()), ids=lambda case: case[0])
def test_linear_gives_f_linear_and_its_gradients(case):
    _, x, weight, bias = case
    leaves = [t.clone().requires_grad_() if t is not None else None for t in (x, weight, bias)]
    plain = [t.clone().requires_grad_() if t is not None else None for t in (x, weight, bias)]
    out = gemm.linear(*leaves)
    expected = F.linear(*plain)
    assert out.shape == expected.shape
    assert torch.allclose(out, expected, atol=1e-5)
    grad = torch.randn_like(out)
    out.backward(grad)
    expected.backward(grad)
    for mine, theirs in zip(leaves, plain):
        if mine is not None:
            assert torch.allclose(mine.grad, theirs.grad, atol=1e-4), (mine.shape, theirs.shape)


@needs_onednn
def test_linear_goes_through_onednn_and_the_switch_turns_it_off(monkeypatch, fast_path_switch):
    x, weight = torch.randn(3, 8), torch.randn(5, 8)
    calls = []
    real = torch.ops.mkldnn._linear_pointwise

    def spy(*args):
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(gemm, "_onednn_op", spy)
    gemm.linear(x, weight)
    assert calls == [torch.Size([3, 8])]
    fast_path_switch(False)
    assert torch.equal(gemm.linear(x, weight), F.linear(x, weight))
    assert len(calls) == 1


def test_other_dtypes_take_f_linear_exactly():
    x, weight, bias = torch.randn(3, 8, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64), None
    assert torch.equal(gemm.linear(x, weight, bias), F.linear(x, weight, bias))
    assert torch.equal(gemm.mm_t(x, weight), x.mm(weight.t()))


@needs_onednn
def test_mm_t_is_a_times_b_transposed():
    a, b = torch.randn(4, 9), torch.randn(6, 9)
    assert torch.allclose(gemm.mm_t(a, b), a.mm(b.t()), atol=1e-5)
    assert torch.allclose(gemm.mm_t(a, b.t().contiguous().t()), a.mm(b.t()), atol=1e-5)


@needs_onednn
def test_the_flop_counter_counts_the_onednn_products():
    x, weight = torch.randn(2, 7, 16), torch.randn(32, 16)
    with FlopCounterMode(display=False, custom_mapping=gemm.flop_formulas()) as counter:
        gemm.linear(x, weight)
    assert counter.get_total_flops() == 2 * 2 * 7 * 16 * 32


@needs_onednn
def test_an_in_place_addition_to_the_output_is_an_ordinary_one():
    """The speaker plumbing adds the bias to the logits in place: the output must not be a view (autograd
    would copy the whole gradient through CopySlices) and the gradients must be F.linear's."""
    x, weight = torch.randn(2, 3, 4, requires_grad=True), torch.randn(5, 4, requires_grad=True)
    bias = torch.randn(2, 1, 5, requires_grad=True)
    out = gemm.linear(x, weight)
    assert out._base is None
    out += bias
    assert type(out.grad_fn).__name__ == "AddBackward0"
    plain = [t.detach().clone().requires_grad_() for t in (x, weight, bias)]
    expected = F.linear(plain[0], plain[1]) + plain[2]
    grad = torch.randn_like(out)
    out.backward(grad)
    expected.backward(grad)
    for mine, theirs in zip((x, weight, bias), plain):
        assert torch.allclose(mine.grad, theirs.grad, atol=1e-5)
