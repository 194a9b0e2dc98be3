"""Dense steps of a speaker table, each row's change still sized by ``--speaker-lr-scale``.

Where a step cannot be row-sparse (``--speaker-dense-updates``; another optimizer; amsgrad; the fp32 copies of
``--fp16``/``--bf16``, whose gradients are copied densely from the model's), the optimizer's own step trains the table
as a dense parameter. The scale reaches its rows all the same: before the step :func:`scale_dense_step` keeps the
table (or its slice of an fp32 copy) and which rows have a gradient, and after it a step post-hook multiplies each
row's change by the row's scale, which for Adam and SGD is exactly a learning rate multiplied by it; the counters
(``lr_scale``, ``table_step``, each row's ``row_step``) are kept in the optimizer state, those of a table within an
fp32 copy in the copy's state, table by table (``state["speaker_tables"][offset]``), saved and resumed with it.
Under ``auto`` a variant's shared parameters that act with the rows take the rows' mean rate the same way
(:func:`keep_shared_before_step`); the shared weights' part of a copy takes the optimizer's step untouched.
"""

from typing import Optional, Sequence

import torch
from torch import Tensor

from fairseq_speaker.optim.lr_scale import (
    AUTO,
    SHARED_KEY,
    dense_kind,
    dense_scale_applies,
    row_lr_scales,
    shared_scale,
)
from fairseq_speaker.optim.table_marks import COPIED, COPIED_TABLES, LAST_SHARED_SCALE, within

#: the attribute of a torch optimizer holding, between its pre- and post-hook, the dense tables to scale
_PENDING = "_speaker_rows_pending"


def scale_dense_step(optimizer, param: Tensor, setting: Optional[str], offset: Optional[int] = None,
                     shape: Optional[Sequence[int]] = None) -> bool:
    """Before a dense step of a speaker table: keep the table and its rows with a gradient, for the post-hook
    to scale each row's change (:func:`_dense_step_post_hook`). False where the scale is 1 for every row.

    The table is ``param``, or with ``offset`` the slice of ``param`` (an fp32 copy of --fp16/--bf16) of
    ``shape`` starting there; its counters are then ``optimizer.state[param]["speaker_tables"][offset]``."""
    state = optimizer.state[param]  # read only: the optimizer's first step must find it empty
    table, grad, recorded = param.data, param.grad, state
    assert grad is not None  # a table with a gradient is stepped
    if offset is not None:
        assert shape is not None  # given with the offset
        table, grad = within(param.data, offset, shape), within(grad.reshape(-1), offset, shape)
        recorded = state.get(COPIED_TABLES, {}).get(offset, {})
    if setting is not None:
        mode = setting
        follow = setting == "auto"
    elif "lr_scale" in recorded:
        mode = "auto" if float(recorded["lr_scale"]) == AUTO else repr(float(recorded["lr_scale"]))
        follow = bool(float(recorded.get(SHARED_KEY, 0.0)))  # a state of 0.5.0-0.8.0: the shared rate
    else:  # a fresh table (no optimizer state yet): auto; a state of a run without the scale (0.4.0; 0.5.0's
        mode = "auto" if len(state) == 0 else "1.0"  # --fp16/--bf16 copies): 1
        follow = mode == "auto"
    if not dense_scale_applies(dense_kind(optimizer), mode):
        return False
    touched = grad.reshape(grad.size(0), -1).ne(0).any(dim=1)
    if table.dtype not in (torch.float32, torch.float64):  # half precision (--memory-efficient-fp16): not scaled
        return False
    pending = _pending(optimizer)
    pending[id(param), offset] = (param, offset, table.clone(), touched, mode, follow)
    return True


def _pending(optimizer) -> dict:
    """The optimizer's tables and shared parameters to scale after its step (the post-hook registered once)."""
    pending = getattr(optimizer, _PENDING, None)
    if pending is None:
        pending = {}
        setattr(optimizer, _PENDING, pending)
        optimizer.register_step_post_hook(_dense_step_post_hook)
    return pending


def _counters_of(optimizer, holder: Tensor, table_offset: Optional[int]) -> dict:
    """A speaker table's counters: the optimizer state of the table ``holder``, or (``table_offset``) those of its
    slice of the fp32 copy ``holder``."""
    if table_offset is None:
        return optimizer.state.get(holder, {})
    return optimizer.state.get(holder, {}).get(COPIED_TABLES, {}).get(table_offset, {})


def _where_stepped(optimizer, table: Tensor):
    """Where ``optimizer`` steps the speaker table ``table``: ``(table, None)``, or ``(copy, offset)`` for its slice of
    an fp32 copy of --fp16/--bf16; None if it does not."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param is table:
                return param, None
            for where, _, ref in getattr(param, COPIED, ()):
                if ref() is table:
                    return param, where
    return None


def keep_shared_before_step(optimizer, param: Tensor, table: Tensor, setting: Optional[str], kind: Optional[str],
                            offset: Optional[int] = None, shape: Optional[Sequence[int]] = None) -> None:
    """Before a step: keep a variant's shared parameter (or, with ``offset``, its slice of an fp32 copy ``param``)
    for the post-hook to multiply its change by :func:`~fairseq_speaker.optim.lr_scale.shared_scale` of its speaker
    table ``table`` (whose counters are those of the table's slice where it lies in an fp32 copy, see
    :func:`_where_stepped`). Nothing is kept (and the step is the optimizer's, untouched) where the scale is a number
    (``--speaker-lr-scale 1``: the paper's recipe), the optimizer is not of the Adam family, or a resumed run's state
    says its shared parameters took the shared rate."""
    setattr(_shared_parameter(param, offset), LAST_SHARED_SCALE, 1.0)  # unless the post-hook says otherwise
    if kind != "adam" or (setting is not None and setting != "auto"):
        return
    stepped = _where_stepped(optimizer, table)
    if stepped is None:
        return
    holder, table_offset = stepped
    counters = _counters_of(optimizer, holder, table_offset)
    if setting is None and "lr_scale" in counters and not (
            float(counters["lr_scale"]) == AUTO and float(counters.get(SHARED_KEY, 0.0))):
        return
    data = param.data
    if offset is not None:
        assert shape is not None  # given with the offset
        data = within(param.data, offset, shape)
    if data.dtype not in (torch.float32, torch.float64):  # half precision (--memory-efficient-fp16): not scaled
        return
    _pending(optimizer)[id(param), offset, "shared"] = (param, offset, data.clone(), holder, table_offset)


def _dense_step_post_hook(optimizer, args, kwargs) -> None:
    """After a dense step: each row's change multiplied by its scale (the optimizer state records the scale, the
    table's updates ``table_step`` and each row's ``row_step``, as the row-by-row updates do)."""
    pending = getattr(optimizer, _PENDING, {})
    with torch.no_grad():
        tables = [(key, value) for key, value in pending.items() if key[-1] != "shared"]
        for _, (param, offset, before, touched, mode, follow) in tables:
            state, table = optimizer.state[param], param.data
            if offset is not None:  # a table within an fp32 copy: its counters are its own, by offset
                state = state.setdefault(COPIED_TABLES, {}).setdefault(offset, {})
                table = within(param.data, offset, before.shape)
            _scale_rows_change(table, before, touched, mode, state, follow)
        # then the shared parameters, at the rate their tables' counters (this update's included) give
        for key, value in pending.items():
            if key[-1] != "shared":
                continue
            param, offset, before, holder, table_offset = value
            scale = shared_scale(_counters_of(optimizer, holder, table_offset))
            setattr(_shared_parameter(param, offset), LAST_SHARED_SCALE, scale)
            if scale != 1.0:
                data = param.data if offset is None else within(param.data, offset, before.shape)
                data.copy_(before + (data - before) * scale)
    pending.clear()


def _shared_parameter(param: Tensor, offset: Optional[int]) -> Tensor:
    """The model's parameter whose step was scaled: ``param`` itself, or the one lying at ``offset`` in the fp32
    copy ``param`` (told by the copy's layout)."""
    if offset is None:
        return param
    for where, _, ref in getattr(param, COPIED, ()):
        if where == offset and ref() is not None:
            return ref()
    return param


def _scale_rows_change(table: Tensor, before: Tensor, touched: Tensor, mode: str, state: dict,
                       follow: bool = False) -> None:
    """Multiply each row's change in ``table`` since ``before`` by its scale, counting the update in ``state``
    (``follow``: whether the variant's shared parameters follow the rows' rate, recorded there)."""
    state["lr_scale"] = AUTO if mode == "auto" else float(mode)
    state[SHARED_KEY] = 1.0 if follow and mode == "auto" else 0.0
    state["table_step"] = int(state.get("table_step", 0)) + 1
    if "row_step" not in state:
        state["row_step"] = torch.zeros(table.size(0), dtype=torch.long, device=table.device)
    elif state["row_step"].dtype != torch.long:  # torch's load_state_dict casts state to the parameter's dtype
        state["row_step"] = state["row_step"].round().long()
    state["row_step"] += touched.long()
    scales = row_lr_scales(mode, "adam", state["table_step"], state["row_step"].clamp(min=1))
    if scales is not None:
        shape = (-1,) + (1,) * (table.dim() - 1)
        table.copy_(before + (table - before) * scales.to(table.dtype).view(shape))
