"""``--speaker-lr-scale``: the multiple of the learning rate each speaker row, and the shared parameters acting with
the rows, take at a step.

The option is parsed here (:func:`parse_lr_scale`: ``auto``, the default, or a positive number) and recorded in a
table's optimizer state (:func:`lr_scale_mode`: ``lr_scale``, with :data:`AUTO` for ``auto``, and ``shared_lr_scale``
for whether the shared parameters follow the rows), so that a resumed run keeps the scale it started with. From the
table's counters (the table's updates, each row's own) come each row's multiple (:func:`row_lr_scales`) and that of
the variant's shared parameters (:func:`shared_scale`); :func:`dense_kind` and :func:`dense_scale_applies` say whether
a dense step's change is scaled at all. Arithmetic only: the steps that apply it are
:mod:`fairseq_speaker.optim.row_updates` (row by row) and :mod:`fairseq_speaker.optim.dense_steps` (dense).
"""

from typing import Optional

import torch
from torch import Tensor

from fairseq_speaker.errors import UserError


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


def variant_lr_scale(variant) -> Optional[str]:
    """The variant's ``--speaker-lr-scale`` (None: not given)."""
    return parse_lr_scale(getattr(variant.cfg, "speaker_lr_scale", None))


#: how the optimizer state records ``auto`` (a number: torch's ``load_state_dict`` would take a string apart)
AUTO = 0.0
#: the key of a table's optimizer state recording whether the variant's shared parameters follow its rows' rate
SHARED_KEY = "shared_lr_scale"


def lr_scale_mode(state: dict, setting: Optional[str], steps_key: str = "step") -> str:
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


def shared_scale(counters: dict) -> float:
    """The multiple of the learning rate that a variant's shared parameters take under ``auto``: one over the mean
    share of updates in which a speaker (of those seen so far) was in the batch, from the table's counters
    (``counters``: its optimizer state, with ``row_step`` and ``step`` or ``table_step``); 1 where they do not
    follow the rows (``shared_lr_scale`` 0 or missing, see :func:`lr_scale_mode`) or nothing was counted yet.

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
