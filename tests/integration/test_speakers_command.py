"""fairseq-speaker-speakers: a checkpoint's speakers, trained and onboarded (the command's main in this process); and
a variant from another package (examples/custom_variant) through export, adaptation, accounting and listing with
--user-dir, through the real command lines (processes: what a --user-dir registers stays in its process)."""

import json
import os
from collections import Counter

import pytest
import torch

from fairseq_speaker.data import read_lines
from tests.cli import TINY, call_main, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "custom_variant", "sparse_speaker_bias")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "checkpoints")


def _write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"{line}\n" for line in lines))


def _adaptation_files(toy, folder, sentences):
    """``folder/adapt.{en,fr,spk}``: the toy test split's first sentences, ``sentences`` = {new speaker: how many}."""
    os.makedirs(folder, exist_ok=True)
    source, target = (read_lines(os.path.join(toy["raw"], f"test.{lang}")) for lang in ("en", "fr"))
    labels = [name for name, n in sentences.items() for _ in range(n)]
    _write(os.path.join(folder, "adapt.en"), source[: len(labels)])
    _write(os.path.join(folder, "adapt.fr"), target[: len(labels)])
    _write(os.path.join(folder, "adapt.spk"), labels)
    return os.path.join(folder, "adapt")


def speakers(*args, check=True):
    """The listing of fairseq-speaker-speakers --json (its main, in this process)."""
    proc = call_main("fairseq-speaker-speakers", [*args, "--json"], check=check)
    return json.loads(proc.stdout) if proc.returncode == 0 else proc


def by_name(listing):
    return {s["name"]: s for s in listing["speakers"]}


def test_a_trained_checkpoint_lists_every_speaker_with_its_training_sentences(trained, toy):
    checkpoint = trained("lstm_fact_bias")
    listing = speakers(checkpoint)
    counts = Counter(read_lines(os.path.join(toy["raw"], "train.spk")))
    assert {s["name"]: s["sentences"] for s in listing["speakers"]} == dict(counts)
    assert {s["kind"] for s in listing["speakers"]} == {"trained"}
    assert listing["variant"] == "fact" and listing["parameters_per_speaker"] == 3  # --speaker-rank 3 (tests/cli.py)
    assert listing["summary"] == {"speakers": len(counts), "trained": len(counts), "onboarded": 0, "unknown": 0,
                                  "listed": len(counts)}
    assert listing["unknown_speaker"] == "mean" and f"all {len(counts)} speakers" in listing["mean_speaker"]

    text = call_main("fairseq-speaker-speakers", [checkpoint, "spk00[12]"]).stdout
    lines = text.splitlines()
    assert lines[0].startswith(f"{len(counts)} speakers ({len(counts)} trained, 0 onboarded); variant fact")
    assert [line.split()[0] for line in lines[3:5]] == ["spk001", "spk002"] and "(2 of 8 speakers listed)" in text


@pytest.mark.slow  # onboards and re-lists through several commands (half a minute)
def test_onboarded_speakers_are_listed_with_the_sentence_pairs_they_were_fitted_on(trained, toy, tmp_path):
    checkpoint = trained("lstm_fact_bias")
    prefix = _adaptation_files(toy, str(tmp_path / "adapt"), {"dr-lee": 3, "dr-kim": 5})
    adapted = str(tmp_path / "adapted.pt")
    run("fairseq-speaker-adapt", [toy["bin"], "--path", checkpoint, "--adapt-prefix", prefix, "--save", adapted])

    listing = speakers(adapted)
    assert listing["summary"]["onboarded"] == 2 and listing["summary"]["trained"] == 8
    onboarded = speakers(adapted, "--onboarded")
    assert {s["name"]: (s["kind"], s["sentences"]) for s in onboarded["speakers"]} == {
        "dr-lee": ("onboarded", 3), "dr-kim": ("onboarded", 5)}
    assert "the first 8 speakers" in listing["mean_speaker"]  # onboarding kept the trained speakers' mean
    assert [s["name"] for s in speakers(adapted, "--trained")["speakers"]] == \
        torch.load(checkpoint, weights_only=True)["task_state"]["speaker_dictionary"]["names"]
    assert [s["name"] for s in speakers(adapted, "dr-*")["speakers"]] == ["dr-lee", "dr-kim"]

    # rows from a vectors file carry no sentence count: onboarded, from an unrecorded number of sentences
    vectors, merged = str(tmp_path / "lee.npz"), str(tmp_path / "merged.pt")
    run("fairseq-speaker-vectors", ["export", toy["bin"], "--path", adapted, "--out", vectors, "--speakers", "dr-lee"])
    run("fairseq-speaker-vectors", ["import", toy["bin"], "--path", checkpoint, "--vectors", vectors,
                                    "--save", merged])
    got = by_name(speakers(merged))
    assert (got["dr-lee"]["kind"], got["dr-lee"]["sentences"]) == ("onboarded", None)
    assert got["spk000"]["kind"] == "trained"
    assert "        ?" in run("fairseq-speaker-speakers", [merged, "dr-lee"]).stdout


def test_a_checkpoint_that_does_not_record_onboarding_says_unknown_rather_than_guessing():
    """0.4.0's adapted fixture holds a speaker fitted after training (new000) but no record of it."""
    old = os.path.join(FIXTURES, "0.4.0", "lstm_fact_adapted.pt")
    listing = speakers(old)
    assert {s["kind"] for s in listing["speakers"]} == {"unknown"} and not listing["onboarding_known"]
    assert by_name(listing)["new000"]["sentences"] == 2  # the count the speaker dictionary holds
    proc = call_main("fairseq-speaker-speakers", [old, "--onboarded"], check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "does not record which speakers were onboarded" in proc.stderr and "without --onboarded" in proc.stderr


@pytest.mark.parametrize("args,says", [
    (["missing.pt"], "checkpoint not found: missing.pt"),
    (["{ckpt}", "nobody"], "no speaker of"),
    (["{ckpt}", "--trained", "--onboarded"], "not allowed with argument"),
    (["{ckpt}", "--data", "no-such-folder"], "--data no-such-folder: no such folder"),
    (["{ckpt}", "--user-dir", "no-such-folder"], "--user-dir no-such-folder: no such folder"),
])
def test_bad_input_ends_in_one_message_naming_it(trained, args, says):
    checkpoint = trained("lstm_fact_bias")
    proc = call_main("fairseq-speaker-speakers", [a.format(ckpt=checkpoint) for a in args], check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert says in proc.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def custom_checkpoint(toy, tmp_path_factory):
    save_dir = str(tmp_path_factory.mktemp("sparse"))
    run("train", [
        toy["bin"], "--user-dir", EXAMPLE, "--task", "speaker_translation", "--arch", "lstm_base",
        "--speaker-bias", "sparse_full", *TINY["lstm"], "--criterion", "speaker_label_smoothed_cross_entropy",
        "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "4000", "--max-epoch", "1",
        "--save-dir", save_dir, "--no-progress-bar", "--seed", "1",
    ])
    return os.path.join(save_dir, "checkpoint_best.pt")


def test_a_custom_variant_needs_its_user_dir_and_says_so(custom_checkpoint, toy, tmp_path):
    commands = {
        "fairseq-speaker-speakers": [custom_checkpoint],
        "fairseq-speaker-params": ["--path", custom_checkpoint],
        "fairseq-speaker-vectors": ["export", toy["bin"], "--path", custom_checkpoint, "--out", str(tmp_path / "v.npz")],
        "fairseq-speaker-adapt": [toy["bin"], "--path", custom_checkpoint, "--adapt-prefix",
                                  _adaptation_files(toy, str(tmp_path / "adapt"), {"dr-lee": 3}),
                                  "--save", str(tmp_path / "adapted.pt")],
    }
    for command, args in commands.items():
        proc = run(command, args, check=False)
        assert proc.returncode == 2, (command, proc.returncode, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, (command, proc.stderr[-2000:])
        last = proc.stderr.strip().splitlines()[-1]
        assert "'sparse_full' is not registered: pass --user-dir" in last and EXAMPLE in last, (command, last)


@pytest.mark.slow  # the default run's time; its neighbours cover the same path
def test_a_custom_variant_is_exported_adapted_counted_and_listed_with_its_user_dir(custom_checkpoint, toy, tmp_path):
    vectors = str(tmp_path / "speakers.npz")
    proc = run("fairseq-speaker-vectors", ["export", toy["bin"], "--path", custom_checkpoint, "--out", vectors,
                                           "--user-dir", EXAMPLE])
    assert "sparse_full bias" in proc.stdout and os.path.getsize(vectors) > 0

    adapted = str(tmp_path / "adapted.pt")
    prefix = _adaptation_files(toy, str(tmp_path / "adapt"), {"dr-lee": 4})
    run("fairseq-speaker-adapt", [toy["bin"], "--path", custom_checkpoint, "--adapt-prefix", prefix,
                                  "--save", adapted, "--user-dir", EXAMPLE])

    accounting = run("fairseq-speaker-params", ["--path", adapted, "--user-dir", EXAMPLE]).stdout
    vocab = torch.load(adapted, weights_only=True)["model"]["decoder.output_bias"].numel()
    assert "speaker bias 'sparse_full'; 9 speakers" in accounting  # 8 trained and the onboarded one
    assert f"one more speaker, for V = {vocab} target words: {vocab} parameters" in accounting
    side = next(line for line in accounting.splitlines() if "speaker side (9 speakers)" in line)
    assert side.split()[4] == f"{9 * vocab:,}"  # every row of the checkpoint's table, no shared parameter

    listing = json.loads(run("fairseq-speaker-speakers", [adapted, "--user-dir", EXAMPLE, "--json"]).stdout)
    assert listing["variant"] == "sparse_full" and listing["parameters_per_speaker"] == vocab
    assert (by_name(listing)["dr-lee"]["kind"], by_name(listing)["dr-lee"]["sentences"]) == ("onboarded", 4)
    assert listing["summary"]["trained"] == 8
    table = run("fairseq-speaker-speakers", [adapted, "--user-dir", EXAMPLE]).stdout.splitlines()
    header = next(i for i, line in enumerate(table) if line.startswith("speaker "))
    rows = table[header:header + 10]  # the header and the 9 speakers: a variant name of 11 letters overran its column
    assert len({len(line) for line in rows}) == 1 and all("sparse_full  " in line for line in rows[1:]), rows
