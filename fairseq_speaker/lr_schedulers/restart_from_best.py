"""``restart_from_best``: the authors' schedule — when validation does not improve, go back to the best model.

After every epoch's validation:

* an improvement: remember the parameters (a copy in CPU memory);
* no improvement: put the remembered best parameters back, forget the
  optimizer's state (Adam's moments) and multiply the learning rate by
  ``--lr-shrink`` (0.5).

This is the protocol of the paper's reference implementation (reload the
best model, restart the trainer, halve the learning rate). fairseq's own
``reduce_lr_on_plateau`` halves the learning rate too but carries on from the
last, worse, parameters with the old optimizer state. Stopping after N epochs
without improvement is fairseq's ``--patience N``.

With ``--fp16`` the remembered parameters are the optimizer's fp32 master
copies; the model's half-precision weights follow them at the next update.

Resuming (``--restore-file``) continues exactly: the remembered parameters are
saved in the checkpoint (the scheduler's state, one more copy of the
parameters), and since fairseq saves an epoch's checkpoint before the schedule
sees that epoch's validation loss, the decision of that epoch is taken when the
checkpoint is loaded, from the validation loss the checkpoint records.
"""

from dataclasses import dataclass, field
from typing import List, Optional

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

from fairseq_speaker.checkpoints import on_checkpoint_load
from fairseq_speaker.errors import UserError


@dataclass
class RestartFromBestConfig(FairseqDataclass):
    lr_shrink: float = field(default=0.5, metadata={"help": "multiply the learning rate by this on a plateau"})
    lr: List[float] = II("optimization.lr")
    maximize_best_checkpoint_metric: bool = II("checkpoint.maximize_best_checkpoint_metric")


@register_lr_scheduler("restart_from_best", dataclass=RestartFromBestConfig)
class RestartFromBestSchedule(FairseqLRScheduler):
    def __init__(self, cfg: RestartFromBestConfig, optimizer):
        super().__init__(cfg, optimizer)
        if len(cfg.lr) > 1:
            raise UserError("restart_from_best takes a single --lr")
        self.lr = cfg.lr[0]
        self.optimizer.set_lr(self.lr)
        self.snapshot: Optional[List[torch.Tensor]] = None
        self.restarts = 0
        # the validation loss of the epoch a loaded checkpoint ends (see :func:`_pending_decision`)
        self._pending: Optional[float] = None

    def _improved(self, val_loss: float) -> bool:
        if self.best is None:
            return True
        return val_loss > self.best if self.cfg.maximize_best_checkpoint_metric else val_loss < self.best

    def _decide(self, epoch, val_loss=None):
        if val_loss is None:
            return self.optimizer.get_lr()
        if self._improved(val_loss):
            self.best = val_loss
            self.snapshot = [p.detach().to("cpu", copy=True) for p in self.optimizer.params]
        else:
            if self.snapshot is not None:
                with torch.no_grad():
                    for param, best in zip(self.optimizer.params, self.snapshot):
                        param.copy_(best)
                self.optimizer.optimizer.state.clear()  # restart the optimizer, as the authors did
                self.restarts += 1
            self.lr *= self.cfg.lr_shrink
            self.optimizer.set_lr(self.lr)
        return self.optimizer.get_lr()

    def step_update(self, num_updates):
        return self.optimizer.get_lr()

    def state_dict(self):
        return {"best": self.best, "lr": self.lr, "restarts": self.restarts, "snapshot": self.snapshot}

    def load_state_dict(self, state_dict):
        self.best = state_dict["best"]
        if "lr" in state_dict:
            self.lr = state_dict["lr"]
            self.optimizer.set_lr(self.lr)
        self.restarts = state_dict.get("restarts", 0)
        self.snapshot = state_dict.get("snapshot")
        self._pending = state_dict.get(PENDING)

    def step(self, epoch, val_loss=None):
        if val_loss is None and self._pending is not None:
            # fairseq steps the schedule right after loading a checkpoint: the decision it missed
            val_loss, self._pending = self._pending, None
        return self._decide(epoch, val_loss)


PENDING = "pending_val_loss"


def _pending_decision(state: dict) -> dict:
    """A checkpoint saved at the end of an epoch was written before the schedule saw that epoch's
    validation loss: hand the loss it records to the schedule's state, which decides on loading."""
    history = state.get("optimizer_history") or [{}]
    schedule = history[-1].get("lr_scheduler_state") if isinstance(history[-1], dict) else None
    extra = state.get("extra_state") or {}
    iterator = extra.get("train_iterator") or {}
    if isinstance(schedule, dict) and "restarts" in schedule and iterator.get("iterations_in_epoch", 1) == 0:
        schedule[PENDING] = extra.get("val_loss")
    return state


on_checkpoint_load(_pending_decision)
