"""The gradient norm, clipping and scaling of fairseq's trainer, over row-sparse gradients too.

A speaker table marked row-sparse gets a sparse gradient (only the rows of the batch's speakers), which fairseq's own
``clip_grad_norm_`` leaves out of the norm and its ``multiply_grads`` scales through a detached alias that does not
reach it. Both are replaced in fairseq by :mod:`fairseq_speaker.fairseq_patches` with the functions here, which treat
the dense gradients as fairseq does and the rows' gradients as part of them.
"""

from collections import defaultdict
from typing import Callable, List

import torch
from torch import Tensor


def clip_grad_norm_(params, max_norm, aggregate_norm_fn=None, *, dense_clip_grad_norm_,
                    multiply_: Callable[[List[Tensor], object], None]) -> Tensor:
    """``dense_clip_grad_norm_`` (fairseq's ``clip_grad_norm_``), also over row-sparse gradients (the norm of
    their rows). ``multiply_(tensors, factor)`` scales the dense gradients of one device in place (the patch
    module's :func:`~fairseq_speaker.fairseq_patches.foreach_mul_`)."""
    params = [params] if isinstance(params, Tensor) else list(params)
    sparse = [p for p in params if getattr(p, "grad", None) is not None and p.grad.is_sparse]
    if not sparse:
        return dense_clip_grad_norm_(params, max_norm, aggregate_norm_fn)
    sparse_ids = {id(p) for p in sparse}
    dense = [p for p in params if id(p) not in sparse_ids]
    for p in sparse:
        p.grad = p.grad.coalesce()
    norms = [p.grad.values().float().norm() for p in sparse]
    if any(getattr(p, "grad", None) is not None for p in dense):
        norms.append(dense_clip_grad_norm_(dense, 0).float().to(norms[0].device))
    total = torch.stack(norms).norm()
    if aggregate_norm_fn is not None:
        total = aggregate_norm_fn(total)
    if max_norm > 0:
        coef = (float(max_norm) / (total + 1e-6)).clamp_(max=1)
        grads = [p.grad.detach() for p in dense if getattr(p, "grad", None) is not None]
        if grads:
            multiply_(grads, coef.to(grads[0].device))
        for p in sparse:
            p.grad.values().mul_(coef.to(p.grad.device))
    return total


def multiply_grads(params, c, *, multiply_: Callable[[List[Tensor], object], None]) -> None:
    """Multiply every gradient of ``params`` by ``c``, row-sparse ones included (see
    :mod:`fairseq_speaker.fairseq_patches` for why fairseq's own scaling misses them); ``multiply_(tensors,
    factor)`` scales the dense ones of one device and dtype in place."""
    dense = defaultdict(list)
    for p in params:
        if p.grad is None:
            continue
        if p.grad.is_sparse:
            p.grad.mul_(c.to(p.grad.device) if torch.is_tensor(c) else c)
        else:
            dense[(p.grad.device, p.grad.dtype)].append(p.grad)
    for (device, _), grads in dense.items():
        multiply_(grads, c.to(device) if torch.is_tensor(c) else c)
