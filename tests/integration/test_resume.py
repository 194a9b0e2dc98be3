"""A run stopped anywhere and resumed with --restore-file trains as one that went through.

What fairseq 0.12 restores from checkpoint_last.pt: the model, the optimizer state (the speaker rows'
lazy Adam state included), the lr scheduler, the number of updates (which seeds every update's dropout)
and the position in the epoch (a mid-epoch checkpoint resumes at the next batch: the batches already
trained on are skipped, not replayed). The speaker_translation task makes the batches of each epoch
anew (fairseq keeps the first epoch's batches when it runs through, but makes epoch e's when it
resumes in it), so a resumed run sees the same batches with the same dropout masks: the updates after
the checkpoint are the same arithmetic, equal to float rounding.

The uninterrupted runs and the runs up to the stop run fairseq-train's main in this process (tests/cli.py's
run_here, which clears what fairseq keeps between runs of a process); each resumed run is a process of its own,
as a run resumed after a kill is.
"""

import json
import shutil

import pytest
import torch

from tests.cli import run, run_here, train_args

# 160 training sentences in batches of 20: 8 updates an epoch; dropout on (the presets' own)
ARGS = ["--batch-size", "20", "--required-batch-size-multiple", "1", "--max-epoch", "2",
        "--save-interval-updates", "3", "--log-format", "json", "--log-interval", "1"]


def updates(log: str):
    """The logged (update, loss) of every training update."""
    logged = {}
    for line in log.splitlines():
        if "| train_inner |" in line:
            record = json.loads(line.split("| train_inner | ", 1)[1])
            logged[int(record["num_updates"])] = record["loss"]
    return logged


@pytest.fixture(scope="module")
def uninterrupted(toy, tmp_path_factory):
    """The run both tests resume against, gone through: its folder and its logged (update, loss)."""
    through_dir = tmp_path_factory.mktemp("through")
    through = updates(run_here("train", train_args(toy["bin"], str(through_dir), "lstm_fact_bias", *ARGS)).log)
    return through_dir, through


def test_a_run_killed_mid_epoch_resumes_as_if_uninterrupted(toy, tmp_path, uninterrupted):
    (through_dir, through), killed_dir = uninterrupted, tmp_path / "killed"
    assert sorted(through) == list(range(1, 17))

    # a run killed after update 14, whose last checkpoint on disk is the one of update 12 (mid-epoch 2)
    run_here("train", train_args(toy["bin"], str(killed_dir), "lstm_fact_bias", *ARGS, "--max-update", "14"))
    shutil.copy(killed_dir / "checkpoint_2_12.pt", killed_dir / "checkpoint_last.pt")
    state = torch.load(killed_dir / "checkpoint_last.pt", weights_only=True)
    assert state["extra_state"]["train_iterator"]["iterations_in_epoch"] == 4

    resumed = updates(run("train", train_args(toy["bin"], str(killed_dir), "lstm_fact_bias", *ARGS)).stdout)
    assert sorted(resumed) == list(range(13, 17))  # from the next batch on, nothing replayed
    assert resumed == {n: loss for n, loss in through.items() if n > 12}
    final = [torch.load(d / "checkpoint_last.pt", weights_only=True)["model"] for d in (through_dir, killed_dir)]
    for name, value in final[0].items():
        if torch.is_tensor(value) and value.is_floating_point():
            assert torch.allclose(final[1][name], value, atol=1e-6), name


def test_a_run_stopped_at_an_epoch_end_resumes_on_the_same_batches(toy, tmp_path, uninterrupted):
    """The case fairseq gets wrong by itself: its resumed epoch 2 had other batches (sorted with another seed)."""
    _, through = uninterrupted
    stopped = tmp_path / "stopped"
    run_here("train", train_args(toy["bin"], str(stopped), "lstm_fact_bias", *ARGS, "--max-epoch", "1"))  # last wins
    resumed = updates(run("train", train_args(toy["bin"], str(stopped), "lstm_fact_bias", *ARGS)).stdout)
    assert resumed == {n: loss for n, loss in through.items() if n > 8}
