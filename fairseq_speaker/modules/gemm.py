"""Matrix products of the LSTM's layers through oneDNN's GEMM on CPU.

PyTorch multiplies float32 matrices on CPU with the BLAS it was built with (MKL in the x86 wheels).
oneDNN, also in those wheels, has its own GEMM, which on some CPUs is faster: on the AMD EPYC this
project is measured on, 8-25% on the products of a training step, and over 30% on the thin
``[batch, 4H] x [4H, in]`` products of the recurrences' backward passes. :func:`linear` is
``F.linear`` computed there, forward and the input's gradient; the weight's gradient stays with the
BLAS, as fast for those shapes. It falls back to ``F.linear`` where oneDNN cannot serve (another
device or dtype, a build without oneDNN) and everywhere when the fast paths are off
(:mod:`fairseq_speaker.fast_paths`: ``FAIRSEQ_SPEAKER_PLAIN=1``; ``fairseq-speaker-benchmark --plain``
measures both).
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq_speaker import fast_paths
from fairseq_speaker.fairseq_patches import onednn_linear

#: torch's private oneDNN operator (read through the patch ledger), None where this torch lacks it
_onednn_op = onednn_linear()
_AVAILABLE = _onednn_op is not None


def serves(*tensors: Optional[Tensor]) -> bool:
    """Whether :func:`linear` multiplies these tensors by oneDNN (CPU, float32, strided, the switch on)."""
    return fast_paths.enabled() and _AVAILABLE and all(
        t is None or (t.device.type == "cpu" and t.dtype == torch.float32 and t.layout == torch.strided)
        for t in tensors)


def _onednn(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """``x weight^T (+ bias)`` by oneDNN; ``x`` ``[..., in]``, ``weight`` ``[out, in]``.

    The operator copies an ``x`` that is not contiguous; a ``weight`` is read in place when it is laid
    out row by row or column by column (``weight.t()`` of a contiguous matrix, the backward pass's
    case). Other strides (a slice of a matrix's columns) it multiplies by a reference loop, a thousand
    times slower: such a weight is copied first."""
    if not (weight.is_contiguous() or weight.t().is_contiguous()):
        weight = weight.contiguous()
    op = _onednn_op
    assert op is not None  # serves() is False without it
    return op(x, weight, bias, "none", [], "")


def mm_t(a: Tensor, b: Tensor) -> Tensor:
    """``a b^T`` for 2-d ``a`` ``[m, k]`` (best contiguous) and ``b`` ``[n, k]``, without autograd: oneDNN
    where it serves."""
    if serves(a, b):
        return _onednn(a, b)
    return a.mm(b.t())


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
        flat = x.reshape(-1, x.size(-1))
        ctx.save_for_backward(flat, weight)
        ctx.has_bias, ctx.x_shape = bias is not None, x.shape
        return _not_a_view(_onednn(flat, weight, bias), (*x.shape[:-1], weight.size(0)))

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        grad = grad.reshape(-1, grad.size(-1))
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _onednn(grad, weight.t()).view(ctx.x_shape)  # grad W: weight^T's [in, out] view, no copy
        if ctx.needs_input_grad[1]:
            # grad^T x by the BLAS: as fast here, and oneDNN would copy grad^T (its first operand must be
            # contiguous), a fresh [out, rows] buffer per product
            grad_w = grad.t().mm(x)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum(0)
        return grad_x, grad_w, grad_b


def _not_a_view(out: Tensor, shape) -> Tensor:
    """The contiguous ``out`` in ``shape``, as a tensor of its own for autograd (``out.view`` would be a
    view: a caller adding to it in place, as the speaker plumbing adds the bias to the logits, would make
    autograd copy the whole gradient in backward, and a custom function may not return a view at all)."""
    # torch takes set_(storage, offset, size) with contiguous strides; its type stubs know the 1- and 4-argument forms
    return out.new_empty(0).set_(out.untyped_storage(), out.storage_offset(), shape)  # type: ignore[call-overload]


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """``F.linear(x, weight, bias)``, through oneDNN on CPU for float32 (see the module's text)."""
    if not serves(x, weight, bias):
        return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        return _Linear.apply(x, weight, bias)
    return _onednn(x.reshape(-1, x.size(-1)), weight, bias).view(*x.shape[:-1], weight.size(0))


def _linear_flop(x_shape, w_shape, *args, out_shape=None, **kwargs) -> int:
    rows = 1
    for size in x_shape[:-1]:
        rows *= size
    return 2 * rows * x_shape[-1] * w_shape[0]


def flop_formulas() -> dict:
    """The products of this module for ``torch.utils.flop_counter.FlopCounterMode(custom_mapping=...)``,
    which counts only PyTorch's own operators by itself."""
    return {_onednn_op: _linear_flop} if _onednn_op is not None else {}
