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
(``--clip-norm``) count the rows' gradients (:func:`clip_grad_norm_`) and the gradient
scaling scales them (:func:`multiply_grads`), both installed in fairseq by
:mod:`fairseq_speaker.fairseq_patches`; with ``--memory-efficient-fp16`` /
``--memory-efficient-bf16`` the rows are updated in fp32 as fairseq's Adam does. Several
processes average their gradients densely: the lookups then give dense gradients, and the rows
that have one are updated row by row all the same.
Where a step cannot be row-sparse (``--speaker-dense-updates``; another optimizer; amsgrad), the table is
trained as a dense parameter by the optimizer's own step and the log says so once; the learning-rate scale
(``--speaker-lr-scale``) still applies there: each row's change in the step is multiplied by its scale (a step
post-hook), which for Adam and SGD is exactly a learning rate multiplied by it. ``--fp16``/``--bf16`` train
fp32 copies of the parameters (``--fp16``: one flat copy of them all, unless ``--fp16-no-flatten-grads``;
``--bf16``: one per parameter): their gradients are copied densely from the model's, so the tables in them are
trained as dense ones, the log says so, and the scale reaches their rows all the same: as fairseq's
``FP16Optimizer.build_fp32_params`` makes the copies, :func:`record_fp32_copies` (installed there by
:mod:`fairseq_speaker.fairseq_patches`) records where each parameter lies in them; each speaker table's slice of
a copy is scaled as a dense table, its counters kept in the copy's optimizer state, table by table
(``state["speaker_tables"][offset]``), saved and resumed with it. The shared weights' part of a copy takes the
optimizer's step untouched.

Everything happens in a step pre-hook of the torch optimizers that fairseq's optimizers
drive (:func:`update_speaker_rows`; other optimizers, such as onboarding's L-BFGS, never
see it): the first step of a table runs it from its dense gradient (the rows with a
gradient), and says to the variant that its lookups may now give row-sparse gradients.
"""

import logging
import weakref
from collections import defaultdict
from typing import Callable, Iterable, List, Optional, Sequence, Set

import torch
from torch import Tensor

from fairseq_speaker.errors import UserError

logger = logging.getLogger(__name__)

#: the attribute of a row-sparse table that points (weakly) at the variant owning it
OWNER = "_speaker_rows_owner"


#: the attribute of a variant's shared parameter (``fact``'s shared bias vectors) that points (weakly) at the
#: speaker table whose rows it is multiplied with: under ``auto`` it takes the rows' mean rate (:func:`shared_scale`)
SHARED_OF = "_speaker_rows_shared_of"
#: the attribute of such a shared parameter holding the multiple of the learning rate of its last step
LAST_SHARED_SCALE = "_speaker_rows_shared_scale"


def mark_row_sparse(param: Tensor, variant, shared: Sequence[Tensor] = ()) -> None:
    """Let the optimizers update ``param`` (``[S, ...]``) row by row; ``variant`` is told with
    ``variant.row_sparse_ready(True/False)`` whether its lookups may give row-sparse gradients. ``shared``: the
    variant's shared parameters that act together with the rows (they follow the table's scale, see
    :func:`shared_scale`)."""
    if getattr(param, OWNER, None) is None or getattr(param, OWNER)() is not variant:
        setattr(param, OWNER, weakref.ref(variant))
    for other in shared:
        if getattr(other, SHARED_OF, None) is None or getattr(other, SHARED_OF)() is None:
            setattr(other, SHARED_OF, weakref.ref(param))


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


def _rows_and_grads(grad: Tensor):
    """The rows a gradient touches and their gradients ``[n, ...]``."""
    if grad.is_sparse:
        grad = grad.coalesce()
        return grad.indices()[0], grad.values()
    touched = grad.reshape(grad.size(0), -1).ne(0).any(dim=1).nonzero().squeeze(1)
    return touched, grad.index_select(0, touched)


def parse_lr_scale(value) -> Optional[str]:
    """``--speaker-lr-scale``: None (not given), ``"auto"``, or a positive number (as a string)."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text == "auto":
        return text
    try:
        number = float(text)
    except ValueError:
        number = float("nan")
    if not (number > 0 and number != float("inf")):
        raise UserError(f"--speaker-lr-scale {value!r}: give 'auto' (the default) or a positive number "
                        f"(1 is the shared learning rate, as before 0.5.0)")
    return repr(number)


#: how the optimizer state records ``auto`` (a number: torch's ``load_state_dict`` would take a string apart)
AUTO = 0.0


def _lr_scale_mode(state: dict, setting: Optional[str], steps_key: str = "step") -> str:
    """The learning-rate scale of a table, recorded in its optimizer state (``lr_scale``: :data:`AUTO` or the
    number) so that a resumed run keeps the one it started with: the option when given, else the recorded
    one, else 1 for a state written before the option existed (a resumed 0.4.0 run), else ``"auto"``.

    Beside it, ``shared_lr_scale`` records whether the variant's shared parameters follow the rows' rate
    (:func:`shared_scale`; 1.0 yes, 0.0 no): yes for ``auto`` given or new, no for a number, and no for a
    state of ``auto`` written by 0.5.0-0.8.0, which lack it (a resumed run keeps its shared rate)."""
    if setting is not None:
        state["lr_scale"] = AUTO if setting == "auto" else float(setting)
        state[SHARED_KEY] = 1.0 if setting == "auto" else 0.0
    elif "lr_scale" not in state:
        fresh = not state.get(steps_key, 0)
        state["lr_scale"] = AUTO if fresh else 1.0
        state[SHARED_KEY] = 1.0 if fresh else 0.0
    elif SHARED_KEY not in state:
        state[SHARED_KEY] = 0.0
    recorded = float(state["lr_scale"])
    return "auto" if recorded == AUTO else repr(recorded)


#: the key of a table's optimizer state recording whether the variant's shared parameters follow its rows' rate
SHARED_KEY = "shared_lr_scale"


def shared_scale(counters: dict) -> float:
    """The multiple of the learning rate that a variant's shared parameters take under ``auto``: one over the mean
    share of updates in which a speaker (of those seen so far) was in the batch, from the table's counters
    (``counters``: its optimizer state, with ``row_step`` and ``step`` or ``table_step``); 1 where they do not
    follow the rows (``shared_lr_scale`` 0 or missing, see :func:`_lr_scale_mode`) or nothing was counted yet.

    Why: a speaker's contribution is the product of its rows and the shared parameters (``fact``: b_s = B~ w_s;
    ``proj``, ``hyper_lhuc``: a shared map of the speaker's vector, which starts at zero). With the rows at the
    rate of their share of updates and the shared parameters at the shared rate, the speakers' biases grow only
    as fast as the slower factor lets them: at a learning rate sized for the shared network the shared vectors
    barely leave their random start (docs/speaker_learning.md). Every speaker in every batch (the demo): 1."""
    if not float(counters.get(SHARED_KEY, 0.0)) or float(counters.get("lr_scale", 1.0)) != AUTO:
        return 1.0
    rows = counters.get("row_step")
    table = counters.get("table_step", counters.get("step", 0))
    if rows is None:
        return 1.0
    rows = rows.double()
    seen = rows.gt(0)
    total = float(rows.sum())
    if total <= 0:
        return 1.0
    return max(1.0, float(table) * int(seen.sum()) / total)


def row_lr_scales(mode: str, kind: str, table_steps: int, row_steps: Tensor) -> Optional[Tensor]:
    """Each updated row's multiple of the learning rate ``[n]`` (None: 1 for every row).

    ``auto`` with Adam: the table's updates over the row's own (``row_steps``, this one included), i.e. one
    over the share of updates in which the row's speaker is in the batch. Adam moves a parameter by about
    the learning rate at each of its updates, whatever its gradient's size: a speaker seen in one update of
    five would otherwise move a fifth as far over training as a shared weight (see docs/speaker_learning.md).
    SGD's step is proportional to the gradient, which counts each of a speaker's sentences as it counts them
    for the shared weights: ``auto`` is 1 there. A number: that multiple for every row."""
    if mode == "auto":
        if kind != "adam":
            return None
        return table_steps / row_steps.double()
    scale = float(mode)
    return None if scale == 1.0 else torch.full_like(row_steps, scale, dtype=torch.double)


def _adam_rows(optimizer, group, param: Tensor, rows: Tensor, grads: Tensor, lr_scale: Optional[str] = None) -> None:
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
    mode = _lr_scale_mode(state, lr_scale)
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


def _sgd_rows(optimizer, group, param: Tensor, rows: Tensor, grads: Tensor, lr_scale: Optional[str] = None) -> None:
    mode = _lr_scale_mode(optimizer.state[param], lr_scale)
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


_UPDATES = {"adam": _adam_rows, "sgd": _sgd_rows}
_said: Set[str] = set()


def pad_grown_optimizer_state(params: Iterable[Tensor]) -> None:
    """Let an optimizer state loaded from a checkpoint with fewer speakers serve ``params``.

    fairseq loads the optimizer state after the model; a per-parameter state tensor (Adam's moments)
    shaped like the checkpoint's smaller table is extended with zero rows, the fresh state of the new
    speakers, at the next step (by :func:`pad_grown_state`, which the optimizer step hook calls). States
    of other shapes (fairseq's flattened --fp16 master copy) are left alone: use --reset-optimizer there.
    """
    for param in params:
        setattr(param, "speaker_table_grown", True)  # a mark read at the next step: the state may be of fewer rows


def pad_grown_state(optimizer) -> None:
    """Extend with zero rows the per-row state tensors (moments, ``row_step``) of grown tables."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            if not getattr(param, "speaker_table_grown", False) or param not in optimizer.state:
                continue
            state = optimizer.state[param]
            for key, value in list(state.items()):
                if not torch.is_tensor(value) or value.dim() == 0 or value.size(0) >= param.size(0):
                    continue
                if key == "row_step" or (value.dim() == param.dim() and value.shape[1:] == param.shape[1:]):
                    extra = value.new_zeros(param.size(0) - value.size(0), *value.shape[1:])
                    state[key] = torch.cat([value, extra])
            param.speaker_table_grown = False


def _step_pre_hook(optimizer, args, kwargs) -> None:
    pad_grown_state(optimizer)  # a table grown on load: its state gets the new rows first
    for group in optimizer.param_groups:
        for param in group["params"]:
            layout = getattr(param, COPIED, None)
            if layout is not None:  # an fp32 copy of --fp16/--bf16: its speaker tables are stepped densely
                if param.grad is not None:
                    _scale_copied_tables(optimizer, param, layout)
                continue
            shared_of = getattr(param, SHARED_OF, None)
            if shared_of is not None and param.grad is not None:  # a variant's shared parameter: its table's rate
                table = shared_of()
                owner = getattr(table, OWNER, None) if table is not None else None
                variant = owner() if owner is not None else None
                if variant is not None:
                    _keep_shared_before_step(optimizer, param, table, _setting(variant), dense_kind(optimizer))
                continue
            owner = getattr(param, OWNER, None)
            variant = owner() if owner is not None else None
            if variant is None or param.grad is None:
                continue
            reason = dense_reason(optimizer, group, variant)
            if reason is not None:
                variant.row_sparse_ready(False)
                if param.grad.is_sparse:
                    param.grad = param.grad.to_dense()
                scaled = _scale_dense_step(optimizer, param, parse_lr_scale(getattr(variant.cfg, "speaker_lr_scale",
                                                                                    None)))
                _say(f"speaker table {tuple(param.shape)}: dense updates ({reason}); "
                     + ("each row's step scaled by --speaker-lr-scale" if scaled else "its rows take the shared "
                        "learning rate (the scale is 1 here)"))
                continue
            # several processes average the gradients densely: the lookups keep dense gradients there, and the
            # rows with a gradient (the same in every process after averaging) are updated as here
            distributed = several_processes()
            variant.row_sparse_ready(not distributed)
            rows, grads = _rows_and_grads(param.grad)
            kind = optimizer_kind(optimizer)
            assert kind is not None  # dense_reason said the optimizer updates rows
            with torch.no_grad():
                _UPDATES[kind](optimizer, group, param, rows, grads,
                               parse_lr_scale(getattr(variant.cfg, "speaker_lr_scale", None)))
            param.grad = None  # the optimizer's own step leaves the table alone
            _say(f"speaker table {tuple(param.shape)}: row-sparse {optimizer_kind(optimizer)} updates "
                 f"(only the rows of each batch's speakers"
                 + ("; several processes: from their averaged dense gradients)" if distributed else ")"))


#: the attribute of a torch optimizer holding, between its pre- and post-hook, the dense tables to scale
_PENDING = "_speaker_rows_pending"


def dense_kind(optimizer) -> str:
    """``adam`` for the Adam family (a parameter moves by about the learning rate at each update), ``sgd`` for
    SGD, ``other`` for the rest (where ``auto`` is 1)."""
    from fairseq.optim.adam import Adam as FairseqAdamImpl

    if isinstance(optimizer, (FairseqAdamImpl, torch.optim.Adam, torch.optim.AdamW)):
        return "adam"
    return "sgd" if isinstance(optimizer, torch.optim.SGD) else "other"


def dense_scale_applies(kind: str, mode: str) -> bool:
    """Whether a dense step of an optimizer of ``kind`` (:func:`dense_kind`) scales the rows' changes under the
    scale ``mode`` (``"auto"`` or a number as a string): not for 1, nor for ``auto`` outside the Adam family."""
    return not (float(mode) == 1.0 if mode != "auto" else kind != "adam")


def _scale_dense_step(optimizer, param: Tensor, setting: Optional[str], offset: Optional[int] = None,
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
        table, grad = _within(param.data, offset, shape), _within(grad.reshape(-1), offset, shape)
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


def _keep_shared_before_step(optimizer, param: Tensor, table: Tensor, setting: Optional[str], kind: Optional[str],
                             offset: Optional[int] = None, shape: Optional[Sequence[int]] = None) -> None:
    """Before a step: keep a variant's shared parameter (or, with ``offset``, its slice of an fp32 copy ``param``)
    for the post-hook to multiply its change by :func:`shared_scale` of its speaker table ``table`` (whose counters are
    those of the table's slice where it lies in an fp32 copy, see :func:`_where_stepped`). Nothing is kept (and the step
    is the optimizer's, untouched) where the scale is a number (``--speaker-lr-scale 1``: the paper's recipe), the
    optimizer is not of the Adam family, or a resumed run's state says its shared parameters took the shared rate."""
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
        data = _within(param.data, offset, shape)
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
                table = _within(param.data, offset, before.shape)
            _scale_rows_change(table, before, touched, mode, state, follow)
        # then the shared parameters, at the rate their tables' counters (this update's included) give
        for key, value in pending.items():
            if key[-1] != "shared":
                continue
            param, offset, before, holder, table_offset = value
            scale = shared_scale(_counters_of(optimizer, holder, table_offset))
            setattr(_shared_parameter(param, offset), LAST_SHARED_SCALE, scale)
            if scale != 1.0:
                data = param.data if offset is None else _within(param.data, offset, before.shape)
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


#: the attribute of an fp32 copy of the parameters (fairseq's --fp16/--bf16) listing the parameters in it:
#: ``(offset, shape, weakref to the parameter)`` each (a parameter's own copy: one, at offset 0)
COPIED = "_speaker_rows_copied"
#: the key of a copy's optimizer state holding the counters of the speaker tables in it, by offset
COPIED_TABLES = "speaker_tables"


def record_fp32_copies(params: Sequence[Tensor], fp32_params, pipeline: bool = False) -> None:
    """Record on the fp32 copies that fairseq's ``FP16Optimizer.build_fp32_params`` made of ``params`` where
    each parameter lies in them: a dict of flat copies (one per device, ``pipeline``: of that device's
    parameters, else of all), the parameters back to back in their order; or a list, one copy per parameter.

    The tables are found at the step, not here: a variant marks its tables (:func:`mark_row_sparse`) at its
    first lookup in training, and fairseq's trainer builds its optimizer before the first batch. The copies'
    gradients are copied densely from the model's: neither they nor the model's tables are marked row-sparse."""
    params = list(params)
    if isinstance(fp32_params, dict):
        for device, flat in fp32_params.items():
            layout, offset = [], 0
            for param in ([p for p in params if p.device.index == device] if pipeline else params):
                layout.append((offset, tuple(param.shape), weakref.ref(param)))
                offset += param.numel()
            if offset != flat.numel() or flat.dim() != 1:
                logger.warning("the fp32 copy of the parameters is not laid out as fairseq 0.12 lays it: "
                               "--speaker-lr-scale does not reach the speaker tables in it")
                continue
            setattr(flat, COPIED, layout)
    else:
        for param, copy in zip(params, fp32_params):
            if tuple(copy.shape) == tuple(param.shape) and copy.is_contiguous():
                setattr(copy, COPIED, [(0, tuple(param.shape), weakref.ref(param))])


def _within(flat: Tensor, offset: int, shape: Sequence[int]) -> Tensor:
    """The view of ``flat``'s elements from ``offset`` on, shaped ``shape`` (a table within an fp32 copy)."""
    return flat.view(-1).narrow(0, offset, torch.Size(shape).numel()).view(shape)


def _scale_copied_tables(optimizer, copy: Tensor, layout) -> None:
    """Before a step on an fp32 copy of the parameters: each speaker table in it (a parameter its variant has
    marked, :func:`mark_row_sparse`) is kept for the post-hook to scale, as a dense table is."""
    for offset, shape, ref in layout:
        param = ref()
        shared_of = getattr(param, SHARED_OF, None) if param is not None else None
        if shared_of is not None:  # a variant's shared parameter: its slice follows its table's slice
            table = shared_of()
            owner = getattr(table, OWNER, None) if table is not None else None
            variant = owner() if owner is not None else None
            if variant is not None:
                _keep_shared_before_step(optimizer, copy, table, _setting(variant), dense_kind(optimizer),
                                         offset=offset, shape=shape)
            continue
        owner = getattr(param, OWNER, None) if param is not None else None
        variant = owner() if owner is not None else None
        if variant is None:
            continue
        variant.row_sparse_ready(False)  # the copy's gradient is copied densely from the model's
        scaled = _scale_dense_step(optimizer, copy, parse_lr_scale(getattr(variant.cfg, "speaker_lr_scale", None)),
                                   offset=offset, shape=shape)
        _say(f"speaker table {tuple(shape)}: dense updates (--fp16/--bf16 step on an fp32 copy of the parameters); "
             + ("each row's step scaled by --speaker-lr-scale" if scaled else "its rows take the shared learning "
                "rate (the scale is 1 here)"))


def _setting(variant) -> Optional[str]:
    """The variant's ``--speaker-lr-scale`` (None: not given)."""
    return parse_lr_scale(getattr(variant.cfg, "speaker_lr_scale", None))


def _say(message: str) -> None:
    if message not in _said:
        _said.add(message)
        logger.info(message)


#: the attribute of a torch optimizer whose steps update the speaker tables row by row
_HOOKED = "_speaker_rows_hook"


def update_speaker_rows(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Have ``optimizer``'s steps update row-sparse speaker tables row by row (and extend the state of grown
    tables); once per optimizer. fairseq's optimizers call this at their steps (see
    :mod:`fairseq_speaker.fairseq_patches`); a torch optimizer used directly (tests) calls it itself."""
    if getattr(optimizer, _HOOKED, None) is None:
        setattr(optimizer, _HOOKED, optimizer.register_step_pre_hook(_step_pre_hook))
    return optimizer


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
