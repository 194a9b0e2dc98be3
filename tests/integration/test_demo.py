"""fairseq-speaker-demo end to end at a tiny size: a row per system and beam beside the oracles, and a progress
line between systems (the demo's learning at its real size: tests/system/test_toy_learning.py)."""

import json
import re

import pytest

from fairseq_speaker.toy.demo import DEFAULT_BEAM, format_table, parse_args, time_left
from tests.cli import run

TINY = ["--train", "120", "--test", "24", "--speakers", "6", "--epochs", "1", "--threads", "1", "--no-report"]


def test_every_system_is_decoded_with_every_beam_beside_the_oracles(tmp_path):
    work = tmp_path / "demo"
    proc = run("fairseq-speaker-demo", ["--workdir", str(work), *TINY, "--archs", "lstm_fact_bias",
                                        "lstm_base:fact+hyper_lhuc", "--beams", "1", "5"])  # the Transformer's demo
    # training is test_transformer_and_variants.py's
    header = "| system | beam | BLEU | speaker words | gender | address | profession | seconds |"
    assert header in proc.stdout
    rows = json.loads((work / "results.json").read_text())
    assert [(r["system"], r["beam"]) for r in rows] == [
        ("lstm_fact_bias", 1), ("lstm_fact_bias", 5),
        ("lstm_base:fact+hyper_lhuc", 1), ("lstm_base:fact+hyper_lhuc", 5)]
    table = (work / "results.md").read_text()
    for r in rows:
        cells = f"| {r['system']} | {r['beam']} | {r['bleu']:.2f} | {100 * r['traits']['all']:.1f}% |"
        assert cells in table and cells in proc.stdout
        for trait in ("gender", "address", "profession"):
            assert 0 <= r["traits"][trait] <= 1
    assert "| oracle: traits revealed | - | - |" in table and "| oracle: words seen | - | - |" in table
    # each beam reached fairseq-generate, its translations kept apart: the demo's beam under the usual name
    for system, name in (("lstm_fact_bias", "lstm_fact_bias"),
                         ("lstm_base:fact+hyper_lhuc", "lstm_base-fact+hyper_lhuc")):
        assert "Generate test with beam=1: " in (work / f"generate.{name}.beam1.log").read_text()
        assert "Generate test with beam=5: " in (work / f"generate.{name}.log").read_text()
        assert (work / f"generate.{name}.beam1.txt").exists() and (work / f"generate.{name}.txt").exists()
        assert f"[demo] {system}, beam 1: BLEU " in proc.stdout
    # progress between the systems, on standard output as the demo's other lines
    assert re.search(r"^\[demo\] system 2 of 2, about \d+ min left$", proc.stdout, re.M), proc.stdout
    assert "system 1 of 2" not in proc.stdout
    # quiet by default: no warning a user cannot act on (fairseq's, hydra's, the libraries'), no configuration dump
    said = (proc.stdout + proc.stderr).splitlines()
    assert [line for line in said if re.search(r"warn", line, re.I)] == []
    assert not any("'_name':" in line or "wav2vec" in line for line in said)


@pytest.mark.slow
def test_words_adds_a_row_for_each_system_whose_speakers_have_parameters(tmp_path):
    work = tmp_path / "demo"
    proc = run("fairseq-speaker-demo", ["--workdir", str(work), *TINY, "--archs", "lstm_base", "lstm_fact_bias",
                                        "--words"])
    rows = json.loads((work / "results.json").read_text())
    assert [r["system"] for r in rows] == ["lstm_base", "lstm_fact_bias", "lstm_fact_bias+words"]
    assert (work / "checkpoints" / "lstm_fact_bias" / "words.pt").exists()
    assert not (work / "checkpoints" / "lstm_base" / "words.pt").exists()
    assert "| lstm_fact_bias+words | " in proc.stdout and "(fairseq-speaker-words)" in run(
        "fairseq-speaker-speakers", [str(work / "checkpoints" / "lstm_fact_bias" / "words.pt")]).stdout


def test_the_time_left_is_the_mean_time_of_the_systems_done_times_those_left():
    assert time_left(1, 16, 120.0) == "system 2 of 16, about 30 min left"
    assert time_left(4, 6, 480.0) == "system 5 of 6, about 4 min left"
    assert time_left(3, 4, 30.0) == "system 4 of 4, about 1 min left"  # never "0 min"


def test_one_beam_by_default_and_the_table_as_before():
    assert parse_args([]).beams == [DEFAULT_BEAM] == [5]
    assert parse_args(["--beams", "1", "5"]).beams == [1, 5]
    row = {"system": "lstm_fact_bias", "beam": 5, "bleu": 90.0, "traits": {"all": 0.9, "gender": 1.0},
           "seconds": 12.0}
    assert format_table([row]).splitlines()[0] == "| system | BLEU | speaker words | gender | seconds |"
    assert "| lstm_fact_bias | 5 | 90.00 |" in format_table([row], beams=True)
