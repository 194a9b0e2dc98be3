"""Optimizer steps on speaker tables: rows updated only when their speaker is in the batch.

A speaker table has one row per speaker (``full``: S x V; ``fact``: S x r). Trained as a
dense parameter, every update reads and writes all S rows, their gradient and their two
Adam moments, and the rows of speakers absent from the batch keep moving with their old
momentum: the cost of an update grows with S. Here, as the authors'
DyNet lookup parameters did, a table marked row-sparse (a variant's
``row_sparse_parameter_names``) gets a row-sparse gradient, and the optimizer updates
only the rows of the batch's speakers and their state ("lazy" updates):

- Adam (fairseq's ``adam``): the rows' moments decay only when their speaker is seen,
  and each row keeps its own step count for the bias correction (``row_step`` in the
  optimizer state, beside fairseq's ``step``, ``exp_avg`` and ``exp_avg_sq``; torch's
  ``load_state_dict`` gives it the parameter's dtype, exact up to 2^24 steps in fp32). A row
  seen at every update follows fairseq's Adam exactly.
- SGD (fairseq's ``sgd``; with momentum, the momentum of the seen rows).

It is wired into fairseq's own machinery: the state lives in the optimizer's state
(saved in checkpoints, restored by ``--restore-file``); the gradient norm and clipping
(``--clip-norm``) count the rows' gradients (fairseq's ``clip_grad_norm_`` is extended
to row-sparse gradients); fairseq's ``multiply_grads`` handles them already; with
``--memory-efficient-fp16`` / ``--memory-efficient-bf16`` the rows are updated in fp32
as fairseq's Adam does. Where a step cannot be row-sparse (``--fp16``/``--bf16``, whose
optimizer works on one flattened copy of every parameter; another optimizer; amsgrad;
several processes), the table is trained as a dense parameter and the log says so once.

Everything happens in a step pre-hook of every torch optimizer: the first step of a
table runs it from its dense gradient (the rows with a gradient), and says to the
variant that its lookups may now give row-sparse gradients.
"""

import logging
import weakref
from collections import defaultdict
from typing import Optional

import torch
from fairseq import utils as fairseq_utils
from fairseq.optim.fairseq_optimizer import FairseqOptimizer
from torch import Tensor
from torch.optim.optimizer import register_optimizer_step_pre_hook

logger = logging.getLogger(__name__)

#: the attribute of a row-sparse table that points (weakly) at the variant owning it
OWNER = "_speaker_rows_owner"


def mark_row_sparse(param: Tensor, variant) -> None:
    """Let the optimizers update ``param`` (``[S, ...]``) row by row; ``variant`` is told with
    ``variant.row_sparse_ready(True/False)`` whether its lookups may give row-sparse gradients."""
    if getattr(param, OWNER, None) is None or getattr(param, OWNER)() is not variant:
        setattr(param, OWNER, weakref.ref(variant))


def _kind(optimizer: torch.optim.Optimizer) -> Optional[str]:
    from fairseq.optim.adam import Adam as FairseqAdamImpl

    if isinstance(optimizer, (FairseqAdamImpl, torch.optim.Adam)) and type(optimizer) in (
            FairseqAdamImpl, torch.optim.Adam):
        return "adam"
    if type(optimizer) is torch.optim.SGD:
        return "sgd"
    return None


def _unsupported(optimizer, group) -> Optional[str]:
    kind = _kind(optimizer)
    if kind is None:
        return f"the optimizer {type(optimizer).__name__} has no row-sparse update here"
    if group.get("amsgrad", False):
        return "amsgrad has no row-sparse update here"
    if kind == "adam" and group.get("decoupled_weight_decay", False):
        return "decoupled weight decay has no row-sparse update here"
    if kind == "sgd" and (group.get("nesterov", False) or group.get("dampening", 0)):
        return "nesterov momentum and dampening have no row-sparse update here"
    if torch.distributed.is_available() and torch.distributed.is_initialized() \
            and torch.distributed.get_world_size() > 1:
        return "several processes average dense gradients"
    return None


def _rows_and_grads(grad: Tensor):
    """The rows a gradient touches and their gradients ``[n, ...]``."""
    if grad.is_sparse:
        grad = grad.coalesce()
        return grad.indices()[0], grad.values()
    touched = grad.reshape(grad.size(0), -1).ne(0).any(dim=1).nonzero().squeeze(1)
    return touched, grad.index_select(0, touched)


def _adam_rows(optimizer, group, param: Tensor, rows: Tensor, grads: Tensor) -> None:
    state = optimizer.state[param]
    master = param.data.float() if param.dtype in (torch.float16, torch.bfloat16) else param.data
    if len(state) == 0:
        state["step"] = 0
        state["exp_avg"] = torch.zeros_like(master)
        state["exp_avg_sq"] = torch.zeros_like(master)
    if "row_step" not in state:  # also a dense optimizer's state: every row has seen its steps
        state["row_step"] = torch.full((param.size(0),), int(state["step"]), dtype=torch.long, device=param.device)
    elif state["row_step"].dtype != torch.long:  # torch's load_state_dict casts state to the parameter's dtype
        state["row_step"] = state["row_step"].round().long()
    state["step"] += 1  # updates of the table, as fairseq's Adam counts them
    beta1, beta2 = group["betas"]
    lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
    grads = grads.float() if grads.dtype != master.dtype else grads
    exp_avg = state["exp_avg"].index_select(0, rows).mul_(beta1).add_(grads, alpha=1 - beta1)
    exp_avg_sq = state["exp_avg_sq"].index_select(0, rows).mul_(beta2).addcmul_(grads, grads, value=1 - beta2)
    steps = state["row_step"].index_select(0, rows).add_(1)
    state["row_step"].index_copy_(0, rows, steps)
    shape = (-1,) + (1,) * (param.dim() - 1)
    steps = steps.double()
    step_size = (lr * torch.sqrt(1 - beta2 ** steps) / (1 - beta1 ** steps)).to(master.dtype).view(shape)
    values = master.index_select(0, rows)
    if decay != 0:
        values.add_(values, alpha=-decay * lr)
    values.sub_(step_size * exp_avg / exp_avg_sq.sqrt().add_(eps))
    state["exp_avg"].index_copy_(0, rows, exp_avg)
    state["exp_avg_sq"].index_copy_(0, rows, exp_avg_sq)
    param.data.index_copy_(0, rows, values.to(param.dtype))


def _sgd_rows(optimizer, group, param: Tensor, rows: Tensor, grads: Tensor) -> None:
    values = param.data.index_select(0, rows)
    grads = grads.to(values.dtype)
    if group["weight_decay"] != 0:
        grads = grads.add(values, alpha=group["weight_decay"])
    if group["momentum"] != 0:
        state = optimizer.state[param]
        buffer = state.get("momentum_buffer")
        if buffer is None:
            buffer = state["momentum_buffer"] = torch.zeros_like(param.data)
            rows_momentum = grads.clone()
        else:
            rows_momentum = buffer.index_select(0, rows).mul_(group["momentum"]).add_(grads)
        buffer.index_copy_(0, rows, rows_momentum)
        grads = rows_momentum
    sign = 1.0 if group.get("maximize", False) else -1.0
    param.data.index_copy_(0, rows, values.add_(grads, alpha=sign * group["lr"]))


_UPDATES = {"adam": _adam_rows, "sgd": _sgd_rows}
_said = set()


def _step_pre_hook(optimizer, args, kwargs) -> None:
    from fairseq_speaker.modules.speaker_plumbing import pad_grown_state

    pad_grown_state(optimizer)  # a table grown on load: its state gets the new rows first
    for group in optimizer.param_groups:
        for param in group["params"]:
            owner = getattr(param, OWNER, None)
            variant = owner() if owner is not None else None
            if variant is None or param.grad is None:
                continue
            reason = _unsupported(optimizer, group)
            if reason is not None:
                variant.row_sparse_ready(False)
                if param.grad.is_sparse:
                    param.grad = param.grad.to_dense()
                _say(f"speaker table {tuple(param.shape)}: dense updates ({reason})")
                continue
            variant.row_sparse_ready(True)
            rows, grads = _rows_and_grads(param.grad)
            with torch.no_grad():
                _UPDATES[_kind(optimizer)](optimizer, group, param, rows, grads)
            param.grad = None  # the optimizer's own step leaves the table alone
            _say(f"speaker table {tuple(param.shape)}: row-sparse {_kind(optimizer)} updates "
                 f"(only the rows of each batch's speakers)")


def _say(message: str) -> None:
    if message not in _said:
        _said.add(message)
        logger.info(message)


_fairseq_clip_grad_norm = fairseq_utils.clip_grad_norm_


def clip_grad_norm_(params, max_norm, aggregate_norm_fn=None) -> Tensor:
    """fairseq's ``clip_grad_norm_``, also over row-sparse gradients (the norm of their rows)."""
    params = [params] if isinstance(params, Tensor) else list(params)
    sparse = [p for p in params if getattr(p, "grad", None) is not None and p.grad.is_sparse]
    if not sparse:
        return _fairseq_clip_grad_norm(params, max_norm, aggregate_norm_fn)
    sparse_ids = {id(p) for p in sparse}
    dense = [p for p in params if id(p) not in sparse_ids]
    for p in sparse:
        p.grad = p.grad.coalesce()
    norms = [p.grad.values().float().norm() for p in sparse]
    if any(getattr(p, "grad", None) is not None for p in dense):
        norms.append(_fairseq_clip_grad_norm(dense, 0).float().to(norms[0].device))
    total = torch.stack(norms).norm()
    if aggregate_norm_fn is not None:
        total = aggregate_norm_fn(total)
    if max_norm > 0:
        coef = (float(max_norm) / (total + 1e-6)).clamp_(max=1)
        grads = [p.grad.detach() for p in dense if getattr(p, "grad", None) is not None]
        if grads:
            torch._foreach_mul_(grads, coef.to(grads[0].device))
        for p in sparse:
            p.grad.values().mul_(coef.to(p.grad.device))
    return total


def multiply_grads(self, c) -> None:
    """``FairseqOptimizer.multiply_grads`` that also scales row-sparse gradients. fairseq's own
    ``p.grad.data.mul_(c)`` scales a detached alias of a sparse gradient and leaves the gradient itself as
    it was: the speaker rows' gradients would stay unnormalized (not divided by the batch's tokens),
    dominate the gradient norm and shrink every other gradient under ``--clip-norm``."""
    dense = defaultdict(list)
    for p in self.params:
        if p.grad is None:
            continue
        if p.grad.is_sparse:
            p.grad.mul_(c.to(p.grad.device) if torch.is_tensor(c) else c)
        else:
            dense[(p.grad.device, p.grad.dtype)].append(p.grad)
    for (device, _), grads in dense.items():
        torch._foreach_mul_(grads, c.to(device) if torch.is_tensor(c) else c)


FairseqOptimizer.multiply_grads = multiply_grads
fairseq_utils.clip_grad_norm_ = clip_grad_norm_
_handle = register_optimizer_step_pre_hook(_step_pre_hook)
