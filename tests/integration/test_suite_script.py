"""scripts/suite.py --fit: the training split decoded beside the test split, scored as the demo scores the test."""

import importlib.util
import os

import pytest

from fairseq_speaker.analysis.speaker_words import read_traits, trait_accuracy
from fairseq_speaker.toy import demo

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _suite():
    spec = importlib.util.spec_from_file_location("suite_script", os.path.join(ROOT, "scripts", "suite.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # the default run's time; its neighbours cover the same path
def test_fit_scores_the_training_split_and_the_test_split_as_the_demo_scores_it(toy, trained, tmp_path):
    workdir = tmp_path / "early"
    workdir.mkdir()
    os.symlink(toy["raw"], workdir / "raw")
    checkpoint = trained("lstm_fact_bias")
    found = _suite().fit(str(workdir), toy["bin"], "lstm_fact_bias", checkpoint, 1)
    assert set(found) == {"train", "test"}
    # the demo's own decoding of the test split, greedy: the same figures
    greedy = demo.translate(str(workdir), toy["bin"], "lstm_fact_bias", checkpoint, 1, beam=1)
    assert found["test"] == trait_accuracy(greedy, read_traits(os.path.join(toy["raw"], "test.traits")))
    # every training sentence was decoded: its output holds one hypothesis a sentence
    train_lines = open(os.path.join(toy["raw"], "train.en"), encoding="utf-8").read().splitlines()
    output = (workdir / "fit.lstm_fact_bias.train.txt").read_text(encoding="utf-8")
    assert sum(line.startswith("H-") for line in output.splitlines()) == len(train_lines)
    assert set(found["train"]) >= {"all", "gender"} and all(0 <= v <= 1 for v in found["train"].values())
