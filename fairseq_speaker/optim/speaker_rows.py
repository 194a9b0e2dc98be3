"""Optimizer steps on speaker tables: rows updated only when their speaker is in the batch.

A speaker table has one row per speaker (``full``: S x V; ``fact``: S x r). Trained as a
dense parameter, every update reads and writes all S rows, their gradient and their two
Adam moments, and the rows of speakers absent from the batch keep moving with their old
momentum: the cost of an update grows with S. Here, as the authors'
DyNet lookup parameters did, a table marked row-sparse (a variant's
``row_sparse_parameter_names``) gets a row-sparse gradient, and the optimizer updates
only the rows of the batch's speakers and their state ("lazy" updates):

- Adam (fairseq's ``adam``): the rows' moments decay only when their speaker is seen,
  and each row keeps its own step count for the bias correction; a row seen at every update follows
  fairseq's Adam exactly.
- SGD (fairseq's ``sgd``; with momentum, the momentum of the seen rows).

It is wired into fairseq's own machinery: the state lives in the optimizer's state
(saved in checkpoints, restored by ``--restore-file``); the gradient norm and clipping
(``--clip-norm``) count the rows' gradients and the gradient scaling scales them; with
``--memory-efficient-fp16`` / ``--memory-efficient-bf16`` the rows are updated in fp32 as fairseq's Adam does.
Several processes average their gradients densely: the lookups then give dense gradients, and the rows
that have one are updated row by row all the same.
Where a step cannot be row-sparse (``--speaker-dense-updates``; another optimizer; amsgrad), the table is
trained as a dense parameter by the optimizer's own step and the log says so once; the learning-rate scale
(``--speaker-lr-scale``) still applies there: each row's change in the step is multiplied by its scale (a step
post-hook), which for Adam and SGD is exactly a learning rate multiplied by it. ``--fp16``/``--bf16`` train
fp32 copies of the parameters (``--fp16``: one flat copy of them all, unless ``--fp16-no-flatten-grads``;
``--bf16``: one per parameter): their gradients are copied densely from the model's, so the tables in them are
trained as dense ones, the log says so, and the scale reaches their rows all the same; each speaker table's slice
of a copy is scaled as a dense table, its counters kept in the copy's optimizer state. The shared weights' part of
a copy takes the optimizer's step untouched.

This module is the step hook, which chooses for each parameter which of the parts below steps it, and the
padding of a grown table's state; the parts, one concern a module:

- :mod:`fairseq_speaker.optim.table_marks`: the marks a variant leaves on its tables and shared parameters
  (:func:`~fairseq_speaker.optim.table_marks.mark_row_sparse`), and the layout of the fp32 copies of
  ``--fp16``/``--bf16`` (:func:`~fairseq_speaker.optim.table_marks.record_fp32_copies`, installed in fairseq by
  :mod:`fairseq_speaker.fairseq_patches`);
- :mod:`fairseq_speaker.optim.lr_scale`: ``--speaker-lr-scale``, parsed, recorded in the optimizer state, and each
  row's and the shared parameters' multiple of the learning rate;
- :mod:`fairseq_speaker.optim.row_updates`: the row-by-row Adam and SGD updates, and which optimizers have them;
- :mod:`fairseq_speaker.optim.dense_steps`: a dense step's change of each row scaled after the step;
- :mod:`fairseq_speaker.optim.row_gradients`: the gradient norm, clipping and scaling over row-sparse gradients
  (installed in fairseq by :mod:`fairseq_speaker.fairseq_patches`).

Everything happens in a step pre-hook of the torch optimizers that fairseq's optimizers
drive (:func:`update_speaker_rows`; other optimizers, such as onboarding's L-BFGS, never
see it): the first step of a table runs it from its dense gradient (the rows with a
gradient), and says to the variant that its lookups may now give row-sparse gradients.
"""

import logging
from typing import Iterable, Set

import torch
from torch import Tensor

from fairseq_speaker.optim.dense_steps import keep_shared_before_step, scale_dense_step
from fairseq_speaker.optim.lr_scale import dense_kind, variant_lr_scale
from fairseq_speaker.optim.row_updates import UPDATES, dense_reason, optimizer_kind, rows_and_grads, several_processes
from fairseq_speaker.optim.table_marks import COPIED, OWNER, SHARED_OF

logger = logging.getLogger(__name__)

#: the messages said once a process (the tests clear it between the in-process runs of a command)
_said: Set[str] = set()


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
                    keep_shared_before_step(optimizer, param, table, variant_lr_scale(variant), dense_kind(optimizer))
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
                scaled = scale_dense_step(optimizer, param, variant_lr_scale(variant))
                _say(f"speaker table {tuple(param.shape)}: dense updates ({reason}); "
                     + ("each row's step scaled by --speaker-lr-scale" if scaled else "its rows take the shared "
                        "learning rate (the scale is 1 here)"))
                continue
            # several processes average the gradients densely: the lookups keep dense gradients there, and the
            # rows with a gradient (the same in every process after averaging) are updated as here
            distributed = several_processes()
            variant.row_sparse_ready(not distributed)
            rows, grads = rows_and_grads(param.grad)
            kind = optimizer_kind(optimizer)
            assert kind is not None  # dense_reason said the optimizer updates rows
            with torch.no_grad():
                UPDATES[kind](optimizer, group, param, rows, grads, variant_lr_scale(variant))
            param.grad = None  # the optimizer's own step leaves the table alone
            _say(f"speaker table {tuple(param.shape)}: row-sparse {optimizer_kind(optimizer)} updates "
                 f"(only the rows of each batch's speakers"
                 + ("; several processes: from their averaged dense gradients)" if distributed else ")"))


def _scale_copied_tables(optimizer, copy: Tensor, layout) -> None:
    """Before a step on an fp32 copy of the parameters: each speaker table in it (a parameter its variant has
    marked, :func:`~fairseq_speaker.optim.table_marks.mark_row_sparse`) is kept for the post-hook to scale, as a
    dense table is."""
    for offset, shape, ref in layout:
        param = ref()
        shared_of = getattr(param, SHARED_OF, None) if param is not None else None
        if shared_of is not None:  # a variant's shared parameter: its slice follows its table's slice
            table = shared_of()
            owner = getattr(table, OWNER, None) if table is not None else None
            variant = owner() if owner is not None else None
            if variant is not None:
                keep_shared_before_step(optimizer, copy, table, variant_lr_scale(variant), dense_kind(optimizer),
                                         offset=offset, shape=shape)
            continue
        owner = getattr(param, OWNER, None) if param is not None else None
        variant = owner() if owner is not None else None
        if variant is None:
            continue
        variant.row_sparse_ready(False)  # the copy's gradient is copied densely from the model's
        scaled = scale_dense_step(optimizer, copy, variant_lr_scale(variant), offset=offset, shape=shape)
        _say(f"speaker table {tuple(shape)}: dense updates (--fp16/--bf16 step on an fp32 copy of the parameters); "
             + ("each row's step scaled by --speaker-lr-scale" if scaled else "its rows take the shared learning "
                "rate (the scale is 1 here)"))
