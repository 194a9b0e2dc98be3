"""Whether the speakers are being learned: how far their rows moved since the last validation.

A speaker of 30 sentences among 12,000 is in about one batch of four; with a learning rate and
schedule sized for the shared weights, its rows can stay near where they started while the shared loss
falls, and nothing in fairseq's log shows it. :class:`SpeakerProgress` snapshots every speaker table at
the start of an epoch and, before each validation, logs per table the share of speakers whose rows
moved and how far (relative to the rows' own size, beside the same figure for the variant's shared
parameters and the multiple of the learning rate they last took: see
:func:`~fairseq_speaker.optim.lr_scale.shared_scale`), and warns when the speakers barely moved while the
training loss fell.
"""

import logging
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_speaker.optim.table_marks import LAST_SHARED_SCALE

logger = logging.getLogger(__name__)

#: below this share of its own size a table "barely moved" in an epoch (Adam at lr 1e-3 moves a row by
#: about 1e-3 per update: ten updates of a row at lr 1e-4 move it more than this)
BARELY = 1e-3
#: the training loss "fell" when it dropped by more than this share since the last report
FELL = 0.005


def _relative_change(before: Tensor, after: Tensor) -> float:
    """||after - before|| / max(||after||, ||before||), 0 for two zero tensors."""
    size = max(float(after.float().norm()), float(before.float().norm()))
    return float((after.float() - before.float()).norm()) / size if size > 0 else 0.0


class SpeakerProgress:
    """Call :meth:`start` at the start of an epoch and :meth:`report` before each validation."""

    def __init__(self):
        self.snapshot: Optional[Dict[str, Tensor]] = None
        self.shared: Optional[Dict[str, Tensor]] = None
        self.last_loss: Optional[float] = None

    def start(self, bias) -> None:
        self.snapshot = {name: p.detach().clone() for name, p in bias.speaker_parameters().items()}
        self.shared = {name: p.detach().clone() for name, p in bias.shared_parameters().items()}

    def report(self, bias, train_loss: Optional[float], where: str = "") -> List[str]:
        """Log (and return) a line per speaker table; warn when the speakers barely moved while the loss fell."""
        if self.snapshot is None:
            return []
        shared_before = self.shared
        assert shared_before is not None  # taken with the snapshot
        lines, barely = [], []
        shared = [(p, shared_before[name]) for name, p in bias.shared_parameters().items()
                  if name in shared_before and p.shape == shared_before[name].shape]
        shared_change = (_relative_change(torch.cat([b.flatten() for _, b in shared]),
                                          torch.cat([p.detach().flatten() for p, _ in shared])) if shared else None)
        for name, param in bias.speaker_parameters().items():
            before = self.snapshot.get(name)
            if before is None or before.shape != param.shape or param.size(0) == 0:
                continue  # the table grew or was replaced since the snapshot
            now = param.detach()
            moved = (now != before).reshape(now.size(0), -1).any(dim=1)
            change = _relative_change(before, now)
            line = (f"speaker table {name} {tuple(now.shape)}{where}: {100 * float(moved.float().mean()):.1f}% of "
                    f"the {now.size(0)} speakers moved, by {change:.2e} of the table's size")
            if shared_change is not None:
                scales = {float(getattr(p, LAST_SHARED_SCALE)) for p, _ in shared if hasattr(p, LAST_SHARED_SCALE)}
                rate = f", at {max(scales):.3g}x the shared learning rate" if scales else ""
                line += f" (the variant's shared parameters: {shared_change:.2e}{rate})"
            lines.append(line)
            if change < BARELY:
                barely.append(name)
        for line in lines:
            logger.info(line)
        fell = (train_loss is not None and self.last_loss is not None
                and train_loss < self.last_loss * (1 - FELL))
        if barely and fell:
            logger.warning(
                f"the speakers barely moved ({', '.join(barely)}: less than {BARELY:g} of their size) while the "
                f"training loss fell from {self.last_loss:.3f} to {train_loss:.3f}: they are not being learned at "
                f"this learning rate; leave --speaker-lr-scale at auto (or raise it), or check that the speakers "
                f"in the data are the ones intended")
        if train_loss is not None:
            self.last_loss = train_loss
        self.start(bias)
        return lines
