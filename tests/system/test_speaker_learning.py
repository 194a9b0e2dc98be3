"""Slow tier: speakers are learned at a learning rate sized for the shared weights, in the regime of real data
(400 speakers of 30 training sentences each: a speaker is in about one batch of four)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_both_families_learn_gender_and_address_at_a_low_learning_rate(tmp_path):
    workdir = str(tmp_path / "sweep")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "lr_sweep.py"), "--workdir", workdir,
                    "--lrs", "0.0005", "--speaker-lr-scale", "auto", "--jobs", "2"], check=True)
    with open(os.path.join(workdir, "results.json")) as f:
        rows = {row["family"]: row for row in json.load(f)}
    assert set(rows) == {"lstm", "transformer"}
    for family, row in rows.items():
        traits = row["traits"]
        # chance is one word in two for both traits
        assert traits["gender"] > 0.95 and traits["address"] > 0.95, (family, traits)
        assert row["bleu"] > 90, (family, row["bleu"])
