"""Slow tier: a trained fact_bias model learns a new speaker's words from 20 of their sentences (minutes)."""

import filecmp
import json
import os
import shutil
import subprocess
import sys

import pytest

BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


@pytest.mark.slow
def test_twenty_sentences_teach_a_new_speaker_their_words(tmp_path):
    """docs/onboarding.md's commands: the demo's lstm_fact_bias, held-out speakers beside its corpus, the evaluation."""
    work = str(tmp_path / "demo-work")
    subprocess.run([sys.executable, "-m", "fairseq_speaker.toy.demo", "--workdir", work, "--archs", "lstm_fact_bias",
                    "--no-report", "--threads", "1"], check=True, env=ENV)
    shutil.copytree(os.path.join(work, "raw"), str(tmp_path / "raw-before"))
    subprocess.run([sys.executable, "-m", "fairseq_speaker.toy.corpus", "--out", os.path.join(work, "raw"),
                    "--train", "6000", "--valid", "400", "--test", "400", "--heldout"], check=True, env=ENV)
    before = sorted(set(os.listdir(tmp_path / "raw-before")) - {"speakers.tsv"})  # which grows by 6 lines
    assert filecmp.cmpfiles(str(tmp_path / "raw-before"), os.path.join(work, "raw"), before, shallow=False)[0] == before

    out = os.path.join(work, "onboarding")
    subprocess.run([os.path.join(BIN, "fairseq-speaker-onboarding-eval"), os.path.join(work, "bin"),
                    "--path", os.path.join(work, "checkpoints", "lstm_fact_bias", "checkpoint_best.pt"),
                    "--heldout-prefix", os.path.join(work, "raw", "heldout"), "--out", out, "--threads", "1"],
                   check=True, env=ENV)
    with open(os.path.join(out, "onboarding.json"), encoding="utf-8") as f:
        rows = {row["n"]: row for row in json.load(f)["rows"]}
    assert sorted(rows) == [0, 1, 2, 5, 10, 20]
    mean, adapted = rows[0]["traits"], rows[20]["traits"]
    # the mean speaker can only guess; 20 sentences reveal gender, address and profession
    assert adapted["all"] >= mean["all"] + 0.20, (mean, adapted)
    assert adapted["gender"] > 0.8 and adapted["address"] > 0.8, adapted
    assert rows[20]["bleu"] > rows[0]["bleu"], rows
