"""A weight used at every step of a recurrent loop, with its gradient as one matrix product.

Autograd computes the gradient of a weight used at T steps as T products of
``[out, batch] x [batch, in]`` (a thin inner dimension: the batch) and T additions
of ``[out, in]`` matrices into the gradient. :class:`StepWeight` keeps each step's
input and output gradient instead, and makes the weight's gradient once, when the
backward pass has gone through every step: ``[out, T*batch] x [T*batch, in]``.
The gradients with respect to the inputs are autograd's, unchanged.
"""

from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_speaker import fast_paths
from fairseq_speaker.modules.gemm import linear, mm_t


class StepWeight:
    """``weight`` ``[out, in]`` shared by the steps of one forward pass: call :meth:`linear` at every step.

    Without gradients (evaluation, ``torch.no_grad``), or with the fast paths off
    (:mod:`fairseq_speaker.fast_paths`), it is :func:`~fairseq_speaker.modules.gemm.linear` itself
    (autograd's gradients, step by step).
    """

    def __init__(self, weight: Tensor):
        self.weight = weight
        self.inputs: List[Tensor] = []
        self.output_grads: Dict[int, Tensor] = {}
        self.deferred = fast_paths.enabled() and torch.is_grad_enabled() and weight.requires_grad
        self.alias = _Collect.apply(weight, self) if self.deferred else weight

    def linear(self, x: Tensor, bias: Optional[Tensor] = None) -> Tensor:
        """``x W^T (+ bias)`` for one step, ``x`` ``[batch, in]``."""
        if not self.deferred:
            return linear(x, self.weight, bias)
        step = len(self.inputs)
        self.inputs.append(x.detach())
        out = _StepLinear.apply(x, self.alias, self, step)
        return out if bias is None else out + bias


class _Collect(torch.autograd.Function):
    """Identity on the weight; its backward runs after every step's and makes the weight's gradient."""

    @staticmethod
    def forward(ctx, weight: Tensor, owner: StepWeight) -> Tensor:
        ctx.owner = owner
        ctx.set_materialize_grads(False)
        return weight.view_as(weight)

    @staticmethod
    def backward(ctx, grad: Optional[Tensor]):
        owner = ctx.owner
        steps = sorted(owner.output_grads)
        total = grad
        if steps:
            grads = torch.cat([owner.output_grads[s] for s in steps])
            inputs = torch.cat([owner.inputs[s] for s in steps]).to(grads)
            product = grads.t().mm(inputs)  # the BLAS: oneDNN would copy grads^T first (see gemm.linear)
            total = product if total is None else total + product
        owner.inputs, owner.output_grads = [], {}
        ctx.owner = None
        return total, None


class _StepLinear(torch.autograd.Function):
    """``x W^T`` at one step: the gradient for ``x`` now, the output gradient kept for the weight's."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, owner: StepWeight, step: int) -> Tensor:
        ctx.save_for_backward(weight)
        ctx.owner, ctx.step = owner, step
        return linear(x, weight)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (weight,) = ctx.saved_tensors
        ctx.owner.output_grads[ctx.step] = grad
        ctx.owner = None
        grad_x = mm_t(grad, weight.to(grad).t()) if ctx.needs_input_grad[0] else None  # grad W
        return grad_x, None, None, None
