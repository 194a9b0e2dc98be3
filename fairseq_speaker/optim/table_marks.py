"""What the optimizer's step hook knows a speaker table by: the marks left on parameters and fp32 copies.

A variant marks each of its row-sparse tables (:func:`mark_row_sparse`): the table points (weakly) at the variant
owning it (:data:`OWNER`), and each of the variant's shared parameters that act together with the rows (``fact``'s
shared bias vectors) points at the table whose rate it follows (:data:`SHARED_OF`) and, after each step, holds the
multiple of the learning rate that step took (:data:`LAST_SHARED_SCALE`, which the training log reports). With
``--fp16``/``--bf16`` fairseq's optimizer steps fp32 copies of the parameters instead: :func:`record_fp32_copies`
(installed in fairseq by :mod:`fairseq_speaker.fairseq_patches`) records on each copy where each parameter lies in
it (:data:`COPIED`), so that the step hook (:mod:`fairseq_speaker.optim.speaker_rows`) finds the tables there too;
:func:`within` is the view of one of them. Nothing here steps anything.
"""

import logging
import weakref
from typing import Sequence

import torch
from torch import Tensor

logger = logging.getLogger(__name__)

#: the attribute of a row-sparse table that points (weakly) at the variant owning it
OWNER = "_speaker_rows_owner"


#: the attribute of a variant's shared parameter (``fact``'s shared bias vectors) that points (weakly) at the
#: speaker table whose rows it is multiplied with: under ``auto`` it takes the rows' mean rate
#: (:func:`~fairseq_speaker.optim.lr_scale.shared_scale`)
SHARED_OF = "_speaker_rows_shared_of"
#: the attribute of such a shared parameter holding the multiple of the learning rate of its last step
LAST_SHARED_SCALE = "_speaker_rows_shared_scale"


def mark_row_sparse(param: Tensor, variant, shared: Sequence[Tensor] = ()) -> None:
    """Let the optimizers update ``param`` (``[S, ...]``) row by row; ``variant`` is told with
    ``variant.row_sparse_ready(True/False)`` whether its lookups may give row-sparse gradients. ``shared``: the
    variant's shared parameters that act together with the rows (they follow the table's scale, see
    :func:`~fairseq_speaker.optim.lr_scale.shared_scale`)."""
    if getattr(param, OWNER, None) is None or getattr(param, OWNER)() is not variant:
        setattr(param, OWNER, weakref.ref(variant))
    for other in shared:
        if getattr(other, SHARED_OF, None) is None or getattr(other, SHARED_OF)() is None:
            setattr(other, SHARED_OF, weakref.ref(param))


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


def within(flat: Tensor, offset: int, shape: Sequence[int]) -> Tensor:
    """The view of ``flat``'s elements from ``offset`` on, shaped ``shape`` (a table within an fp32 copy)."""
    return flat.view(-1).narrow(0, offset, torch.Size(shape).numel()).view(shape)
