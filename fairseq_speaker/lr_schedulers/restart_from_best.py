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
Resuming from a checkpoint keeps the learning rate and the best score but not
the in-memory copy: the first plateau after a resume halves the learning rate
without going back.
"""

from dataclasses import dataclass, field
from typing import List, Optional

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

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

    def _improved(self, val_loss: float) -> bool:
        if self.best is None:
            return True
        return val_loss > self.best if self.cfg.maximize_best_checkpoint_metric else val_loss < self.best

    def step(self, epoch, val_loss=None):
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
        return {"best": self.best, "lr": self.lr, "restarts": self.restarts}

    def load_state_dict(self, state_dict):
        self.best = state_dict["best"]
        if "lr" in state_dict:
            self.lr = state_dict["lr"]
            self.optimizer.set_lr(self.lr)
        self.restarts = state_dict.get("restarts", 0)
