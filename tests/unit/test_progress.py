"""Live progress of long fairseq-train runs (demo, SATED recipe): one line an epoch, with time left."""

from fairseq_speaker.commands import EpochProgress, _max_epoch

TRAIN = ("2026-11-23 09:00:00 | INFO | train | epoch {e:03d} | loss {l} | nll_loss 3.1 | ppl 8.6 | wps 9000 | "
         "ups 3.1 | wpb 2900 | bsz 100 | num_updates {u} | lr 0.001 | gnorm 1.2 | train_wall 10 | wall {w}\n")
VALID = ("2026-11-23 09:00:00 | INFO | valid | epoch {e:03d} | valid on 'valid' subset | loss {l} | nll_loss 3 | "
         "ppl 8 | wps 20000 | wpb 900 | bsz 40 | num_updates {u} | best_loss {l}\n")


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_each_epoch_says_its_losses_the_time_so_far_and_the_time_left():
    clock = Clock()
    progress = EpochProgress(4, clock=clock)
    assert progress.update("2026-11-23 | INFO | fairseq_cli.train | model speaker_lstm\n") is None
    clock.now += 30
    # fairseq's order: the epoch's validation, then its training summary, which closes the epoch
    assert progress.update(VALID.format(e=1, l="4.900", u=10)) is None
    assert progress.update(TRAIN.format(e=1, l="5.123", u=10, w=30)) == \
        "  epoch 1/4: train loss 5.123, valid loss 4.900 (0:00:30 so far, about 0:01:30 left)"
    clock.now += 90
    assert progress.update(VALID.format(e=2, l="3.600", u=15)) is None  # mid-epoch (--save-interval-updates)
    assert progress.update(VALID.format(e=2, l="3.500", u=20)) is None
    assert progress.update(TRAIN.format(e=2, l="4.000", u=20, w=120)) == \
        "  epoch 2/4: train loss 4.000, valid loss 3.500 (0:02:00 so far, about 0:02:00 left)"
    clock.now += 3600
    # no validation this epoch (--validate-interval): no stale valid loss of an earlier one
    assert progress.update(TRAIN.format(e=4, l="3.000", u=40, w=3720)) == \
        "  epoch 4/4: train loss 3.000 (1:02:00 so far)"


def test_without_max_epoch_there_is_no_estimate():
    progress = EpochProgress(None, clock=Clock())
    progress.update(VALID.format(e=3, l="1.5", u=1))
    assert progress.update(TRAIN.format(e=3, l="2.0", u=1, w=1)) == "  epoch 3: train loss 2.0, valid loss 1.5 (0:00:00 so far)"


def test_max_epoch_is_read_from_the_arguments():
    assert _max_epoch(["bin", "--max-epoch", "15", "--lr", "1"]) == 15
    assert _max_epoch(["bin", "--max-epoch", "0"]) is None
    assert _max_epoch(["bin"]) is None
