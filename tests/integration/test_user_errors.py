"""Mistakes made through fairseq's own command lines end in one message, without a traceback."""

import os

import pytest

from fairseq_speaker.data import SpeakerDictionary
from tests.cli import assert_user_error, copy_data, run, train_args


@pytest.mark.parametrize("system,extra,message", [
    ("lstm_base:topic", [], "--speaker-bias topic needs --topic-model FILE"),
    ("lstm_base:nope", [], "unknown --speaker-bias 'nope'"),
    ("lstm_fact_bias", ["--speaker-rank", "0"], "--speaker-rank must be at least 1"),
])
def test_bad_model_options(toy, tmp_path, system, extra, message):
    proc = run("train", train_args(toy["bin"], str(tmp_path / "ckpt"), system, *extra), check=False)
    assert proc.returncode != 0 and message in proc.stderr
    assert_user_error(proc)


def test_a_speaker_token_model_cannot_restore_another_speaker_list(toy, trained, tmp_path):
    checkpoint = trained("lstm_base+spk_token")
    data = copy_data(toy, tmp_path)
    names = SpeakerDictionary.load(os.path.join(toy["bin"], "dict.spk.txt")).names
    SpeakerDictionary(list(reversed(names))).save(os.path.join(data, "dict.spk.txt"))
    proc = run("train", train_args(data, str(tmp_path / "ckpt"), "lstm_base+spk_token", "--restore-file",
                                   checkpoint, "--max-epoch", "3"), check=False)
    assert proc.returncode != 0 and "cannot be restored by name" in proc.stderr
    assert_user_error(proc)
