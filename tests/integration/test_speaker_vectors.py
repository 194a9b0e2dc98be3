"""fairseq-speaker-vectors on trained toy checkpoints: export, import, and what an import refuses."""

import json
import logging
import os
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fairseq_speaker.onboarding.checkpoint import SpeakerCheckpoint
from fairseq_speaker.onboarding.vectors import main
from fairseq_speaker.onboarding.vectors_file import load_speaker_vectors, write_npz
from tests.cli import SIZES, generate_args, run, run_here, train_args

VECTORS = "fairseq-speaker-vectors"


def vectors(*args: str):
    """The console script, in its own process (each run costs seconds of imports)."""
    return run(VECTORS, list(args), check=False)


@pytest.fixture
def call(monkeypatch, capsys):
    """``main`` in this process, for the checks that need no process of their own; same result as
    :func:`vectors` (returncode, stdout, stderr)."""
    monkeypatch.setattr(logging, "basicConfig", lambda **kwargs: None)  # leave pytest's logging alone

    def call_main(*args: str):
        try:
            main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code
        captured = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=captured.out, stderr=captured.err)

    return call_main


def ok(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def refused(proc, *words: str) -> None:
    """A one-line user error: exit code 2, no traceback, the message holding ``words``."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for word in words:
        assert word in proc.stderr, (word, proc.stderr[-3000:])


def speaker_rows(checkpoint: str, data: str):
    """The checkpoint's speaker names and every speaker's rows (name -> ``[S, ...]``)."""
    loaded = SpeakerCheckpoint.load(checkpoint, data)
    bias = loaded.speaker_bias
    return loaded.speaker_names, bias.export_speakers(range(bias.num_speakers))


def hypotheses(proc):
    """fairseq-generate's hypothesis lines (id, score, words), in sentence order."""
    lines = [line.split("\t") for line in proc.stdout.splitlines() if line.startswith("H-")]
    return sorted(lines, key=lambda parts: int(parts[0][2:]))


@pytest.mark.parametrize("system", ["lstm_fact_bias", "lstm_full_bias"])
def test_export_then_replace_gives_the_same_rows(toy, trained, tmp_path, call, system):
    checkpoint = trained(system)
    out, saved = str(tmp_path / "speakers.npz"), str(tmp_path / "same.pt")
    proc = ok(call("export", toy["bin"], "--path", checkpoint, "--out", out))
    assert f"exported 8 speaker(s) of {checkpoint}" in proc.stdout
    with np.load(out, allow_pickle=False) as f:
        meta = json.loads(str(f["meta"]))
        assert len(f["names"]) == 8
    assert meta["variant"] == system.split("_")[1]
    per_speaker = sum(int(np.prod(shape)) for shape in meta["row_shapes"].values())
    assert f"per speaker: {per_speaker:,} parameters, {4 * per_speaker} bytes (float32)" in proc.stdout

    proc = ok(call("import", toy["bin"], "--path", checkpoint, "--vectors", out, "--save", saved, "--replace"))
    assert "replaced 8" in proc.stdout
    names, rows = speaker_rows(checkpoint, toy["bin"])
    new_names, new_rows = speaker_rows(saved, toy["bin"])
    assert new_names == names
    assert rows.keys() == new_rows.keys()
    assert all(torch.equal(rows[k], new_rows[k]) for k in rows)


def test_renamed_speakers_are_added_and_translate_like_the_originals(toy, trained, tmp_path, call):
    checkpoint = trained("lstm_fact_bias")
    out, renamed, saved = str(tmp_path / "ab.npz"), str(tmp_path / "new.npz"), str(tmp_path / "more.pt")
    ok(call("export", toy["bin"], "--path", checkpoint, "--out", out, "--speakers", "spk000", "spk001"))
    exported = load_speaker_vectors(out)
    assert exported.names == ["spk000", "spk001"]
    write_npz(renamed, ["new-a", "new-b"], exported.rows, exported.meta)

    proc = ok(call("import", toy["bin"], "--path", checkpoint, "--vectors", renamed, "--save", saved))
    assert "added 2: 'new-a', 'new-b'" in proc.stdout and "(10 speakers)" in proc.stdout
    names, rows = speaker_rows(checkpoint, toy["bin"])
    new_names, new_rows = speaker_rows(saved, toy["bin"])
    assert new_names == names + ["new-a", "new-b"]
    for key, value in rows.items():
        assert torch.equal(new_rows[key][:8], value)  # the model's own speakers are untouched
        assert torch.equal(new_rows[key][8:], value[:2])  # new-a, new-b are spk000, spk001

    def translate(speaker: str):
        spk_file = tmp_path / f"{speaker}.spk"
        spk_file.write_text(f"{speaker}\n" * SIZES["test"])
        return hypotheses(run_here("generate", generate_args(toy["bin"], saved, "--speaker-file", str(spk_file))))

    as_a = translate("spk000")
    assert len(as_a) == SIZES["test"]
    assert translate("new-a") == as_a  # same words, same scores


def test_import_refusals(toy, trained, tmp_path, call):
    fact, full = trained("lstm_fact_bias"), trained("lstm_full_bias")
    fact_file, full_file = str(tmp_path / "fact.npz"), str(tmp_path / "full.npz")
    ok(call("export", toy["bin"], "--path", fact, "--out", fact_file))
    ok(call("export", toy["bin"], "--path", full, "--out", full_file, "--speakers", "spk003"))
    save = str(tmp_path / "new.pt")

    def import_(path, run_=vectors):
        return run_("import", toy["bin"], "--path", fact, "--vectors", path, "--save", save)

    # through the console script: a one-line message, exit code 2, no traceback
    refused(import_(full_file), "full.npz", "'full' speaker bias", f"{fact} has a 'fact' one")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"garbage \x00\xff" * 50)
    refused(import_(str(garbage)), "garbage.npz", "not a .npz archive")
    refused(import_(fact_file), "fact.npz", "'spk000'", "already in", "pass --replace")

    other_dict = str(tmp_path / "other-dict.npz")
    loaded = load_speaker_vectors(fact_file)
    write_npz(other_dict, loaded.names, loaded.rows, {**loaded.meta, "target_dictionary_hash": "0" * 40})
    refused(import_(other_dict, call), "other-dict.npz", "another target dictionary")
    refused(import_(str(tmp_path / "missing.npz"), call), "missing.npz", "not found")
    refused(call("import", toy["bin"], "--path", fact, "--vectors", fact_file, "--save", fact, "--replace"),
            "--save must not be the checkpoint given by --path")
    assert not os.path.exists(save)


def test_vectors_of_another_training_run_are_refused(toy, trained, tmp_path, call):
    """Same variant, sizes and dictionary, but other shared bias vectors (another seed)."""
    fact_file = str(tmp_path / "fact.npz")
    ok(call("export", toy["bin"], "--path", trained("lstm_fact_bias"), "--out", fact_file))
    save_dir = str(tmp_path / "seed2")
    run_here("train", train_args(toy["bin"], save_dir, "lstm_fact_bias", "--seed", "2"))
    other = os.path.join(save_dir, "checkpoint_best.pt")
    proc = call("import", toy["bin"], "--path", other, "--vectors", fact_file, "--save",
                   str(tmp_path / "x.pt"), "--replace")
    refused(proc, "fact.npz", "shared speaker-bias parameters differ", other)


def test_export_refusals(toy, trained, tmp_path, call):
    checkpoint = trained("lstm_fact_bias")
    out = str(tmp_path / "x.npz")
    refused(vectors("export", toy["bin"], "--path", checkpoint, "--out", out, "--speakers", "spk000", "nobody"),
            checkpoint, "no speaker(s) 'nobody'")
    refused(call("export", toy["bin"], "--path", str(tmp_path / "none.pt"), "--out", out),
            "checkpoint not found", "none.pt")
    refused(call("export", toy["bin"], "--path", checkpoint, "--out", str(tmp_path / "no" / "x.npz")),
            "does not exist")
    not_a_checkpoint = tmp_path / "garbage.pt"
    not_a_checkpoint.write_bytes(b"garbage \x00\xff" * 50)
    refused(call("export", toy["bin"], "--path", str(not_a_checkpoint), "--out", out),
            "garbage.pt", "not a readable fairseq checkpoint")
    (tmp_path / "empty").mkdir()
    refused(call("export", str(tmp_path / "empty"), "--path", checkpoint, "--out", out, "--source-lang", "en",
                 "--target-lang", "fr"), "no dict.en.txt and no dict.fr.txt there: give the data folder the model "
                                         "was trained on")
    assert not os.path.exists(out)


def test_language_pair_from_the_command_line(toy, trained, tmp_path, call):
    """A data directory with only the dictionaries: fairseq cannot infer the pair, --source-lang can."""
    data = tmp_path / "dicts"
    data.mkdir()
    for name in ("dict.en.txt", "dict.fr.txt"):
        shutil.copy(os.path.join(toy["bin"], name), data)
    checkpoint, out = trained("lstm_fact_bias"), str(tmp_path / "x.npz")
    refused(call("export", str(data), "--path", checkpoint, "--out", out), str(data), "--source-lang")
    ok(call("export", str(data), "--path", checkpoint, "--out", out, "--source-lang", "en", "--target-lang", "fr"))
    assert load_speaker_vectors(out).names[:1] == ["spk000"]
