"""tanh from sigmoid (modules/pointwise.py) against torch.tanh."""

import torch

from fairseq_speaker.modules import pointwise


def test_tanh_is_torch_tanh_to_float_rounding_with_its_gradient():
    x = torch.cat([torch.linspace(-30, 30, 2001), torch.tensor([0.0, 1e-8, -1e-8, 1e-30, 88.0, -88.0])])
    x = x.requires_grad_()
    plain = x.detach().clone().requires_grad_()
    out, expected = pointwise.tanh(x), torch.tanh(plain)
    assert (out - expected).abs().max().item() < 3e-7
    assert out.abs().max().item() <= 1.0
    grad = torch.randn_like(out)
    out.backward(grad)
    expected.backward(grad)
    assert torch.allclose(x.grad, plain.grad, atol=1e-6)


def test_without_grad_and_in_a_batch_shape():
    x = torch.randn(5, 3, 1, 7)
    with torch.no_grad():
        out = pointwise.tanh(x)
    assert out.shape == x.shape and torch.allclose(out, torch.tanh(x), atol=3e-7)


def test_other_dtypes_and_the_switch_take_torch_tanh_exactly(fast_path_switch):
    x = torch.randn(50, dtype=torch.float64)
    assert torch.equal(pointwise.tanh(x), torch.tanh(x))
    y = torch.randn(50)
    fast_path_switch(False)
    assert torch.equal(pointwise.tanh(y), torch.tanh(y))
