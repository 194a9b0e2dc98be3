"""Slow tier: the speaker-bias models learn what the baseline cannot (minutes; run with -m slow)."""

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_bias_models_get_the_speaker_words_right(tmp_path):
    workdir = str(tmp_path / "demo")
    subprocess.run([sys.executable, "-m", "fairseq_speaker.toy.demo", "--workdir", workdir,
                    "--archs", "lstm_base", "lstm_full_bias", "lstm_fact_bias", "transformer_base",
                    "transformer_fact_bias"], check=True)
    with open(os.path.join(workdir, "results.json")) as f:
        results = {row["system"]: row for row in json.load(f)}
    for baseline, biased in (("lstm_base", ("lstm_full_bias", "lstm_fact_bias")),
                             ("transformer_base", ("transformer_fact_bias",))):
        base = results[baseline]["traits"]["all"]
        # the baseline cannot know the speaker: about one speaker word in two
        assert base < 0.7, baseline
        for system in biased:
            traits = results[system]["traits"]
            assert traits["all"] > base + 0.25, (system, traits, base)
            assert traits["gender"] > 0.9 and traits["address"] > 0.9, (system, traits)
            assert results[system]["bleu"] > results[baseline]["bleu"], system
    # the report: the speaker classifier finds the speakers in the biased systems' output (Figure 2)
    with open(os.path.join(workdir, "report", "scores.json")) as f:
        classifier = json.load(f)["classifier"]
    for system in ("lstm_full_bias", "lstm_fact_bias"):
        assert classifier[system] > classifier["lstm_base"] + 0.03, classifier
    assert classifier["transformer_fact_bias"] > classifier["transformer_base"] + 0.03, classifier
