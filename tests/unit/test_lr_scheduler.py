"""restart_from_best: back to the best parameters, a fresh optimizer and half the learning rate on a plateau."""

import pytest
import torch
from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig

from fairseq_speaker.lr_schedulers.restart_from_best import RestartFromBestConfig, RestartFromBestSchedule


def train_step(optimizer, param):
    optimizer.zero_grad()
    (param * torch.arange(1.0, 4.0)).sum().backward()
    optimizer.step()


@pytest.fixture
def setup():
    param = torch.nn.Parameter(torch.zeros(3))
    optimizer = FairseqAdam(FairseqAdamConfig(lr=[0.1], tpu=False, adam_betas="(0.9, 0.999)"), [param])
    schedule = RestartFromBestSchedule(
        RestartFromBestConfig(lr=[0.1], lr_shrink=0.5, maximize_best_checkpoint_metric=False), optimizer)
    return param, optimizer, schedule


def test_a_plateau_restores_the_best_parameters_and_restarts_the_optimizer(setup):
    param, optimizer, schedule = setup
    train_step(optimizer, param)
    assert schedule.step(1, val_loss=2.0) == pytest.approx(0.1)  # the best so far: remembered
    best = param.detach().clone()
    train_step(optimizer, param)
    assert not torch.equal(param, best) and optimizer.optimizer.state
    assert schedule.step(2, val_loss=2.5) == pytest.approx(0.05)  # worse: back to the best, lr halved
    assert torch.equal(param.detach(), best)
    assert not optimizer.optimizer.state  # Adam's moments are gone
    assert optimizer.get_lr() == pytest.approx(0.05)


def test_improvements_keep_the_learning_rate_and_move_the_snapshot(setup):
    param, optimizer, schedule = setup
    schedule.step(1, val_loss=3.0)
    train_step(optimizer, param)
    schedule.step(2, val_loss=2.0)
    second = param.detach().clone()
    train_step(optimizer, param)
    assert schedule.step(3, val_loss=2.2) == pytest.approx(0.05)
    assert torch.equal(param.detach(), second)
    assert schedule.step(4, val_loss=2.1) == pytest.approx(0.025)  # still not better than 2.0: halved again
    assert optimizer.get_lr() == pytest.approx(0.025)
    state = schedule.state_dict()
    assert {k: state[k] for k in ("best", "lr", "restarts")} == {"best": 2.0, "lr": pytest.approx(0.025), "restarts": 2}
    assert torch.equal(state["snapshot"][0], second)  # the best parameters travel with the checkpoint


def test_a_loaded_schedule_takes_the_decision_the_checkpoint_missed(setup):
    """fairseq saves before stepping the schedule; loading hands it the saved validation loss."""
    from fairseq_speaker.lr_schedulers.restart_from_best import _pending_decision

    param, optimizer, schedule = setup
    schedule.step(1, val_loss=2.0)
    best = param.detach().clone()
    train_step(optimizer, param)
    saved = {"optimizer_history": [{"lr_scheduler_state": schedule.state_dict()}],
             "extra_state": {"val_loss": 2.5, "train_iterator": {"epoch": 3, "iterations_in_epoch": 0}}}
    loaded = _pending_decision(saved)["optimizer_history"][-1]["lr_scheduler_state"]
    schedule.load_state_dict(loaded)
    assert schedule.step(2) == pytest.approx(0.05)  # fairseq's call after loading: the plateau of epoch 2
    assert torch.equal(param.detach(), best) and schedule.restarts == 1
    mid_epoch = {"optimizer_history": [{"lr_scheduler_state": {"restarts": 0}}],
                 "extra_state": {"val_loss": 9.0, "train_iterator": {"epoch": 3, "iterations_in_epoch": 5}}}
    assert "pending_val_loss" not in _pending_decision(mid_epoch)["optimizer_history"][-1]["lr_scheduler_state"]


def test_maximized_metric(setup):
    param, optimizer, _ = setup
    schedule = RestartFromBestSchedule(
        RestartFromBestConfig(lr=[0.1], lr_shrink=0.5, maximize_best_checkpoint_metric=True), optimizer)
    schedule.step(1, val_loss=20.0)
    assert schedule.step(2, val_loss=25.0) == pytest.approx(0.1)  # higher BLEU is better
    assert schedule.step(3, val_loss=24.0) == pytest.approx(0.05)
