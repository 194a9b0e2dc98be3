"""Slow tier: speakers are learned at a learning rate sized for the shared weights, in the regime of real data
(400 speakers of 30 training sentences each: a speaker is in about one batch of four)."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import sacrebleu

from fairseq_speaker.analysis.speaker_words import read_traits, trait_accuracy
from fairseq_speaker.toy import demo

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_both_families_learn_the_speakers_at_a_low_learning_rate(tmp_path):
    workdir = str(tmp_path / "sweep")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "lr_sweep.py"), "--workdir", workdir,
                    "--lrs", "0.0005", "--speaker-lr-scale", "auto", "--jobs", "2"], check=True)
    with open(os.path.join(workdir, "results.json")) as f:
        rows = {row["family"]: row for row in json.load(f)}
    assert set(rows) == {"lstm", "transformer"}
    # with --speaker-lr-scale 1 (0.4.0's updates) the same runs gave 96.5% / 80.6% (LSTM) and 93.4% / 63.1%
    # (Transformer) of all / profession words; with auto 98.6% / 92.2% and 96.9% / 82.5% (docs/speaker_learning.md)
    least_profession = {"lstm": 0.85, "transformer": 0.75}
    for family, row in rows.items():
        traits = row["traits"]
        assert traits["gender"] > 0.95 and traits["address"] > 0.95, (family, traits)  # chance: one in two
        assert traits["all"] > 0.95 and traits["profession"] > least_profession[family], (family, traits)
        assert row["bleu"] > 95, (family, row["bleu"])


@pytest.mark.slow
def test_lstm_speaker_learns_the_styles_better_than_the_papers_factored_bias(tmp_path):
    """The styles corpus of docs/speaker_learning.md (6 styles, a personal deviation on 10% of the phrases, 400
    speakers of 30 sentences), both at 30 epochs (the LSTM's state variants need them, docs/bias_variants.md):
    the recommended preset gets more of the style words and of all speaker words than the paper's
    `lstm_fact_bias`, at a BLEU not below it. Measured: 73.9% against 71.4% of the style words, 94.0% against
    93.4% of all, BLEU 95.74 against 95.15 (the Bayes limit: 95.0% of the style words)."""
    workdir = str(tmp_path / "styles")
    subprocess.run([sys.executable, "-m", "fairseq_speaker.toy.demo", "--workdir", workdir, "--styles", "6",
                    "--deviation", "0.1", "--train", "12000", "--speakers", "400", "--test", "800", "--epochs", "30",
                    "--threads", "2", "--no-report", "--archs", "lstm_fact_bias", "lstm_speaker"], check=True)
    with open(os.path.join(workdir, "results.json")) as f:
        results = {row["system"]: row for row in json.load(f)}
    fact, speaker = results["lstm_fact_bias"], results["lstm_speaker"]
    assert speaker["traits"]["style"] > fact["traits"]["style"], (speaker["traits"], fact["traits"])
    assert speaker["traits"]["all"] >= fact["traits"]["all"], (speaker["traits"], fact["traits"])
    assert speaker["bleu"] >= fact["bleu"] - 0.2, (speaker["bleu"], fact["bleu"])
    for row in (fact, speaker):
        assert row["traits"]["gender"] > 0.99 and row["traits"]["address"] > 0.99, row
    # the speakers' words (docs/speaker_learning.md): measured on this run (30 epochs) with --weight 5, 0.6.0's
    # default, 71.4% -> 89.6% of the style words and BLEU 95.15 -> 98.06
    checkpoint = os.path.join(workdir, "checkpoints", "lstm_fact_bias", "checkpoint_best.pt")
    remembered = str(tmp_path / "words.pt")
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "fairseq-speaker-words"), os.path.join(workdir, "bin"),
                    "--path", checkpoint, "--save", remembered, "--threads", "2"], check=True)
    hypotheses = demo.translate(workdir, os.path.join(workdir, "bin"), "lstm_fact_bias_words", remembered, 2)
    traits = trait_accuracy(hypotheses, read_traits(os.path.join(workdir, "raw", "test.traits")))
    references = [line.rstrip("\n") for line in open(os.path.join(workdir, "raw", "test.fr"), encoding="utf-8")]
    bleu = sacrebleu.corpus_bleu(hypotheses, [references], tokenize="none").score
    assert traits["style"] > fact["traits"]["style"] + 0.10 and traits["style"] > 0.85, (traits, fact["traits"])
    assert bleu >= fact["bleu"] and traits["gender"] > 0.99 and traits["address"] > 0.99, (bleu, traits)


@pytest.mark.slow
def test_the_transformers_factored_bias_learns_the_speakers_at_a_transformers_learning_rate(tmp_path):
    """The styles corpus in the many-speakers regime (400 speakers of 30 training sentences, 6 styles, deviation
    0.1), `transformer_fact_bias` at the demo's sizes with lr 1e-3, 500 warm-up updates (inverse square root) and
    40 epochs, seed 1 (docs/speaker_learning.md, "The shared vectors at their rows' rate"). Measured: before the
    shared vectors followed their rows' rate 91.2% of the speaker words, 61.8% of the style words, BLEU 92.99;
    with it 93.2%, 70.4%, 94.34. About 6 minutes on one thread."""
    workdir = str(tmp_path / "many")
    sizes = {"train": 12000, "valid": 800, "test": 800}
    data = demo.prepare(workdir, sizes, 400, 1, topics=0, styles=6, deviation=0.1)
    options = SimpleNamespace(lr={"transformer": 0.001}, epochs=40, seed=1, threads=1)
    hypotheses = demo.train_and_translate(workdir, data, "transformer_fact_bias", options,
                                          extra=["--warmup-updates", "500"], progress=None)
    traits = trait_accuracy(hypotheses, read_traits(os.path.join(workdir, "raw", "test.traits")))
    references = [line.rstrip("\n") for line in open(os.path.join(workdir, "raw", "test.fr"), encoding="utf-8")]
    bleu = sacrebleu.corpus_bleu(hypotheses, [references], tokenize="none").score
    assert traits["gender"] >= 0.95 and traits["address"] >= 0.95, traits  # chance: one in two
    assert traits["all"] > 0.92 and traits["style"] > 0.66, traits
    assert bleu > 93.5, bleu
