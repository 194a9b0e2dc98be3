"""Whether the speakers are being learned: the log's line per speaker table (optim/speaker_progress.py)."""

import logging

import torch

from fairseq_speaker.optim.speaker_progress import SpeakerProgress
from tests.helpers import build_bias, make_task

LOGGER = "fairseq_speaker.optim.speaker_progress"


def _fact():
    return build_bias("fact", make_task(num_speakers=4))


def test_the_share_of_speakers_moved_and_how_far(caplog):
    bias = _fact()
    progress = SpeakerProgress()
    progress.start(bias)
    with torch.no_grad():
        bias.speaker_weights[1] += 0.5
        bias.speaker_weights[3] += 0.5
    with caplog.at_level(logging.INFO, logger=LOGGER):
        lines = progress.report(bias, train_loss=2.0, where=" in epoch 1")
    assert len(lines) == 1
    assert lines[0].startswith("speaker table speaker_weights (4, 3) in epoch 1: 50.0% of the 4 speakers moved, by ")
    assert "the variant's shared parameters: 0.00e+00" in lines[0]
    assert "not being learned" not in caplog.text


def test_a_warning_when_the_speakers_barely_move_while_the_loss_falls(caplog):
    bias = _fact()
    progress = SpeakerProgress()
    progress.start(bias)
    progress.report(bias, train_loss=3.0)  # a first report: nothing to compare the loss with
    with torch.no_grad():
        bias.speaker_weights[0] += 1e-6
        bias.shared_biases.mul_(1.1)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        progress.report(bias, train_loss=2.5)
    assert "the speakers barely moved (speaker_weights" in caplog.text
    assert "training loss fell from 3.000 to 2.500" in caplog.text and "--speaker-lr-scale" in caplog.text

    caplog.clear()
    with torch.no_grad():
        bias.speaker_weights.add_(0.3)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        progress.report(bias, train_loss=2.0)  # they moved: no warning
    assert "barely moved" not in caplog.text

    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        progress.report(bias, train_loss=2.0)  # still, but the loss did not fall either: no warning
    assert "barely moved" not in caplog.text and "0.0% of the 4 speakers moved" in caplog.text


def test_a_grown_table_is_skipped_until_the_next_snapshot():
    bias = _fact()
    bias.speaker_names = [f"spk{i}" for i in range(4)]
    progress = SpeakerProgress()
    progress.start(bias)
    bias.grow(2, "mean", names=["new0", "new1"])
    assert progress.report(bias, train_loss=1.0) == []
    with torch.no_grad():
        bias.speaker_weights[5] += 1.0
    assert "16.7% of the 6 speakers moved" in progress.report(bias, train_loss=1.0)[0]


def test_the_line_says_at_what_rate_the_shared_parameters_learned(caplog):
    """Under ``--speaker-lr-scale auto`` the variant's shared vectors take their rows' mean rate
    (optim/speaker_rows.py): the line gives the multiple of the learning rate of their last step."""
    from fairseq_speaker.optim.table_marks import LAST_SHARED_SCALE

    bias = _fact()
    progress = SpeakerProgress()
    progress.start(bias)
    setattr(bias.shared_biases, LAST_SHARED_SCALE, 3.9871)
    with torch.no_grad():
        bias.speaker_weights[0] += 0.5
        bias.shared_biases += 0.1
    line = progress.report(bias, train_loss=2.0, where=" in epoch 2")[0]
    assert "(the variant's shared parameters: " in line and ", at 3.99x the shared learning rate)" in line
