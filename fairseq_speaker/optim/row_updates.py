"""The row-by-row ("lazy") updates of a speaker table: only the rows of the batch's speakers and their state move.

- Adam (fairseq's ``adam``, torch's ``Adam``; :func:`adam_rows`): the rows' moments decay only when their speaker is
  seen, and each row keeps its own step count for the bias correction (``row_step`` in the optimizer state, beside
  fairseq's ``step``, ``exp_avg`` and ``exp_avg_sq``; torch's ``load_state_dict`` gives it the parameter's dtype,
  exact up to 2^24 steps in fp32). A row seen at every update follows fairseq's Adam exactly.
- SGD (torch's ``SGD``; :func:`sgd_rows`; with momentum, the momentum of the seen rows).

Each row's step is sized by ``--speaker-lr-scale`` (:mod:`fairseq_speaker.optim.lr_scale`). Which optimizers and
settings have such an update is :func:`optimizer_kind` and :func:`dense_reason`; every other table is stepped densely
(:mod:`fairseq_speaker.optim.dense_steps`). The step hook that chooses between the two is
:mod:`fairseq_speaker.optim.speaker_rows`.
"""

from typing import Optional

import torch
from torch import Tensor

from fairseq_speaker.optim.lr_scale import lr_scale_mode, row_lr_scales


def optimizer_kind(optimizer: torch.optim.Optimizer) -> Optional[str]:
    """``"adam"`` or ``"sgd"``: the torch optimizers whose update this module can make row by row; else None."""
    from fairseq.optim.adam import Adam as FairseqAdamImpl

    if isinstance(optimizer, (FairseqAdamImpl, torch.optim.Adam)) and type(optimizer) in (
            FairseqAdamImpl, torch.optim.Adam):
        return "adam"
    if type(optimizer) is torch.optim.SGD:
        return "sgd"
    return None


def dense_reason(optimizer, group, variant=None) -> Optional[str]:
    """Why the speaker tables of ``group`` must be updated densely by ``optimizer``; None if they can go row by row."""
    if variant is not None and getattr(variant.cfg, "speaker_dense_updates", False):
        return "--speaker-dense-updates"
    kind = optimizer_kind(optimizer)
    if kind is None:
        return f"the optimizer {type(optimizer).__name__} has no row-sparse update here"
    if group.get("amsgrad", False):
        return "amsgrad has no row-sparse update here"
    if kind == "adam" and group.get("decoupled_weight_decay", False):
        return "decoupled weight decay has no row-sparse update here"
    if kind == "sgd" and (group.get("nesterov", False) or group.get("dampening", 0)):
        return "nesterov momentum and dampening have no row-sparse update here"
    return None


def several_processes() -> bool:
    """Whether this process trains with others (their gradients are averaged, which sparse ones cannot be)."""
    return (torch.distributed.is_available() and torch.distributed.is_initialized()
            and torch.distributed.get_world_size() > 1)


def rows_and_grads(grad: Tensor):
    """The rows a gradient touches and their gradients ``[n, ...]``."""
    if grad.is_sparse:
        grad = grad.coalesce()
        return grad.indices()[0], grad.values()
    touched = grad.reshape(grad.size(0), -1).ne(0).any(dim=1).nonzero().squeeze(1)
    return touched, grad.index_select(0, touched)


def adam_rows(optimizer, group, param: Tensor, rows: Tensor, grads: Tensor, lr_scale: Optional[str] = None) -> None:
    """Adam's update of the rows ``rows`` of ``param`` from their gradients ``grads`` ``[n, ...]``, with their
    moments and step counts in ``optimizer``'s state (``lr_scale``: the variant's ``--speaker-lr-scale``)."""
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
    mode = lr_scale_mode(state, lr_scale)
    state["step"] += 1  # updates of the table, as fairseq's Adam counts them
    beta1, beta2 = group["betas"]
    lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
    grads = grads.float() if grads.dtype != master.dtype else grads
    exp_avg = state["exp_avg"].index_select(0, rows).mul_(beta1).add_(grads, alpha=1 - beta1)
    exp_avg_sq = state["exp_avg_sq"].index_select(0, rows).mul_(beta2).addcmul_(grads, grads, value=1 - beta2)
    steps = state["row_step"].index_select(0, rows).add_(1)
    state["row_step"].index_copy_(0, rows, steps)
    shape = (-1,) + (1,) * (param.dim() - 1)
    scales = row_lr_scales(mode, "adam", int(state["step"]), steps)
    steps = steps.double()
    rates = lr if scales is None else lr * scales  # each row's learning rate
    step_size = (rates * torch.sqrt(1 - beta2 ** steps) / (1 - beta1 ** steps)).to(master.dtype).view(shape)
    values = master.index_select(0, rows)
    if decay != 0:
        if scales is None:
            values.add_(values, alpha=-decay * lr)
        else:
            values.sub_(values * (decay * rates).to(master.dtype).view(shape))
    values.sub_(step_size * exp_avg / exp_avg_sq.sqrt().add_(eps))
    state["exp_avg"].index_copy_(0, rows, exp_avg)
    state["exp_avg_sq"].index_copy_(0, rows, exp_avg_sq)
    param.data.index_copy_(0, rows, values.to(param.dtype))


def sgd_rows(optimizer, group, param: Tensor, rows: Tensor, grads: Tensor, lr_scale: Optional[str] = None) -> None:
    """SGD's update (with momentum, that of the rows) of the rows ``rows`` of ``param`` from their gradients
    ``grads`` ``[n, ...]`` (``lr_scale``: the variant's ``--speaker-lr-scale``)."""
    mode = lr_scale_mode(optimizer.state[param], lr_scale)
    scales = row_lr_scales(mode, "sgd", 0, torch.ones(len(rows), dtype=torch.long, device=rows.device))
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
    if scales is not None:
        grads = grads * scales.to(grads.dtype).view((-1,) + (1,) * (param.dim() - 1))
    param.data.index_copy_(0, rows, values.add_(grads, alpha=sign * group["lr"]))


#: the row-by-row update of each kind of optimizer (:func:`optimizer_kind`)
UPDATES = {"adam": adam_rows, "sgd": sgd_rows}
