"""Slow tier: the recommended path (a trained network, then fairseq-speaker-words with its defaults) is never below the
network alone (speaker words, gender, BLEU; another trait within a point) on structures of the corpus suite's judging
half, which no setting of the memory was chosen on (docs/speaker_learning.md, "The corpus suite")."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: two judge structures: correlated gender, early choices, Zipfian sizes and random choosers (judge-2); binary
#: choices over many words, early choices, Zipfian sizes and random choosers (judge-5)
STRUCTURES = ("judge-2", "judge-5")


@pytest.mark.slow
def test_the_speakers_words_never_leave_the_network_worse_on_the_judging_structures(tmp_path):
    workdir = str(tmp_path / "suite")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "suite.py"), "--workdir", workdir,
                    "--structures", *STRUCTURES, "--systems", "lstm_fact_bias", "--words", "--threads", "2"],
                   check=True)
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    assert set(results) == set(STRUCTURES)
    for structure, found in results.items():
        network, remembered = found["systems"]["lstm_fact_bias"]["rows"]
        assert remembered["system"] == network["system"] + "+words"
        # the target: never below the network on the speaker words, gender and BLEU (where nothing beat the
        # network on the valid split the memory has weight 0 and the translations are the network's own); another
        # trait within a point (judge-5's address words went 90.9% -> 90.4% in one run, docs/speaker_learning.md)
        for trait, share in network["traits"].items():
            slack = 0.005 if trait in ("all", "gender") else 0.01
            assert remembered["traits"][trait] >= share - slack, (structure, trait, network, remembered)
        assert remembered["bleu"] >= network["bleu"] - 0.2, (structure, network, remembered)
