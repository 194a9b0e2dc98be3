"""fairseq-speaker-adapt through the real command lines: new speakers in, old speakers untouched. The models are
compared by fairseq-generate's main in this process (tests/cli.py's run_here)."""

import os
import shutil

from types import SimpleNamespace

import pytest
import torch

from fairseq_speaker.data import read_lines
from fairseq_speaker.onboarding.adapt import main
from tests.cli import generate_args, run, run_here

SPEAKER_PARAMETER = {"lstm_full_bias": "decoder.speaker_bias.weight",
                     "transformer_fact_bias": "decoder.speaker_bias.speaker_weights"}


def _write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def _adaptation_files(toy, folder, prefix="adapt", split="test", rename=lambda s: f"new-{s}"):
    """The toy split's sentences, spoken by new speakers (``new-spk004``, ...)."""
    os.makedirs(folder, exist_ok=True)
    for lang in ("en", "fr"):
        shutil.copy(os.path.join(toy["raw"], f"{split}.{lang}"), os.path.join(folder, f"{prefix}.{lang}"))
    labels = read_lines(os.path.join(toy["raw"], f"{split}.spk"))
    _write(os.path.join(folder, f"{prefix}.spk"), [rename(s) for s in labels])
    return os.path.join(folder, prefix)


def _hypotheses(stdout):
    return sorted(line for line in stdout.splitlines() if line.startswith(("H-", "P-")))


# lstm_full_bias in the slow tier (half a minute each): the Transformer's fact stays in the default run
@pytest.mark.parametrize("system", [pytest.param(s, marks=pytest.mark.slow) if s == "lstm_full_bias" else s
                                    for s in sorted(SPEAKER_PARAMETER)])
def test_new_speakers_are_added_and_old_ones_untouched(toy, trained, tmp_path, system):
    checkpoint = trained(system)
    prefix = _adaptation_files(toy, str(tmp_path))
    heldout = _adaptation_files(toy, str(tmp_path), "heldout", "valid")
    adapted = str(tmp_path / "adapted.pt")
    proc = run("fairseq-speaker-adapt", [toy["bin"], "--path", checkpoint, "--adapt-prefix", prefix,
                                         "--heldout-prefix", heldout, "--save", adapted])
    new = sorted({f"new-{s}" for s in read_lines(os.path.join(toy["raw"], "test.spk"))})
    assert all(name in proc.stdout for name in new) and "saved to" in proc.stdout

    old, got = torch.load(checkpoint, weights_only=True), torch.load(adapted, weights_only=True)
    names = old["task_state"]["speaker_dictionary"]["names"]
    assert got["task_state"]["speaker_dictionary"]["names"][: len(names)] == names
    assert sorted(got["task_state"]["speaker_dictionary"]["names"][len(names):]) == new
    key = SPEAKER_PARAMETER[system]
    for name, value in old["model"].items():  # only the new rows are new
        if name == key:
            assert torch.equal(got["model"][name][: len(names)], value)
            assert got["model"][name].size(0) == len(names) + len(new)
            assert not torch.equal(got["model"][name][len(names):], value.mean(0, keepdim=True).expand(len(new), -1))
        elif torch.is_tensor(value):
            assert torch.equal(got["model"][name], value), name

    # every trained speaker translates bit-identically with the new checkpoint
    before = run_here("generate", generate_args(toy["bin"], checkpoint, "--gen-subset", "test"))
    after = run_here("generate", generate_args(toy["bin"], adapted, "--gen-subset", "test"))
    assert _hypotheses(before.stdout) == _hypotheses(after.stdout)
    # the new speakers are known by name, and used: not the mean speaker any more
    args = ["--gen-subset", "test", "--speaker-file", prefix + ".spk"]
    as_new = run_here("generate", generate_args(toy["bin"], adapted, *args, "--unknown-speaker", "fail"))
    as_mean = run_here("generate", generate_args(toy["bin"], checkpoint, *args))
    assert "unseen in training" not in as_new.log and "unseen in training" in as_mean.log
    assert _hypotheses(as_new.stdout) != _hypotheses(as_mean.stdout)
    interactive = run_here("interactive", generate_args(toy["bin"], adapted, "--speaker", new[0], "--unknown-speaker",
                                                        "fail"), stdin="i went to the office .\n")
    assert "H-0" in interactive.stdout


def test_an_idle_replace_is_said_and_the_variant_spelled_as_trained(toy, trained, tmp_path, capsys):
    """--replace with only new speakers did nothing without a word; a fact+hyper_lhuc model's fit was called "(sum
    bias)", its class, where fairseq-speaker-vectors says fact+hyper_lhuc."""
    prefix = _adaptation_files(toy, str(tmp_path))
    main([toy["bin"], "--path", trained("lstm_speaker"), "--adapt-prefix", prefix, "--save", str(tmp_path / "a.pt"),
          "--replace", "--adapt-max-iter", "2"])
    out = capsys.readouterr().out
    assert "speaker(s) fitted (fact+hyper_lhuc bias)" in out, out
    assert f"--replace: none of the 8 speaker(s) of {prefix}.spk was the model's, so none was replaced" in out, out


def test_refusals(toy, trained, tmp_path, capsys):
    prefix = _adaptation_files(toy, str(tmp_path))
    fact = trained("lstm_fact_bias")

    def adapt(checkpoint, adapt_prefix=prefix, *extra, subprocess=False):
        """The command's outcome (``returncode``, ``stderr``); in this process unless ``subprocess``
        (a process costs seconds of imports: one run checks the real console script)."""
        args = [toy["bin"], "--path", checkpoint, "--adapt-prefix", adapt_prefix, "--save", str(tmp_path / "out.pt"),
                *extra]
        if subprocess:
            return run("fairseq-speaker-adapt", args, check=False)
        try:
            main(args)
        except SystemExit as e:
            return SimpleNamespace(returncode=1 if isinstance(e.code, str) else e.code,
                                   stderr=capsys.readouterr().err + (e.code if isinstance(e.code, str) else ""),
                                   stdout="")
        return SimpleNamespace(returncode=0, stderr="", stdout="")

    def refused(proc, *words):
        assert proc.returncode != 0, proc.stdout
        assert "Traceback" not in proc.stderr, proc.stderr
        for word in words:
            assert word in proc.stderr, proc.stderr
        assert not os.path.exists(tmp_path / "out.pt")

    refused(adapt(trained("lstm_base"), subprocess=True), "nothing to adapt")
    refused(adapt(trained("lstm_base+spk_token")), "--speaker-token model")
    refused(adapt(str(tmp_path / "missing.pt")), "checkpoint not found", "missing.pt")
    same = _adaptation_files(toy, str(tmp_path / "same"), rename=lambda s: s)  # speakers it already has
    refused(adapt(fact, same), "already in the model: pass --replace")
    assert adapt(fact, same, "--replace").returncode == 0
    os.remove(tmp_path / "out.pt")

    broken = str(tmp_path / "broken" / "adapt")
    shutil.copytree(tmp_path, tmp_path / "broken", ignore=shutil.ignore_patterns("same", "broken", "*.pt"))
    _write(broken + ".fr", read_lines(prefix + ".fr")[:-1])
    refused(adapt(fact, broken), "adapt.en has 37 lines but", "adapt.fr has 36")
    _write(broken + ".fr", read_lines(prefix + ".fr"))
    labels = read_lines(prefix + ".spk")
    _write(broken + ".spk", labels[:3] + [""] + labels[4:])
    refused(adapt(fact, broken), "adapt.spk:4", "empty speaker label")
    for lang in ("en", "fr", "spk"):
        _write(f"{broken}.{lang}", [])
    refused(adapt(fact, broken), "adapt.en is empty")
    refused(adapt(fact, str(tmp_path / "nowhere")), "file not found", "nowhere.en")


def test_text_in_another_form_than_the_training_datas_is_refused(toy, trained, tmp_path, capsys):
    """Untokenized, capitalized text is mostly <unk> to the model: refused, unless the user says otherwise."""
    prefix = _adaptation_files(toy, str(tmp_path))
    for lang in ("en", "fr"):
        _write(f"{prefix}.{lang}", [line.capitalize().replace(" .", ".").replace("' ", "'")
                                    for line in read_lines(f"{prefix}.{lang}")])
    args = [toy["bin"], "--path", trained("lstm_fact_bias"), "--adapt-prefix", prefix,
            "--save", str(tmp_path / "out.pt")]
    with pytest.raises(SystemExit) as refused:
        main(args)
    message = capsys.readouterr().err
    assert refused.value.code == 2  # a user error
    assert "adapt.{en,fr}:" in message and "are not in the model's dictionaries" in message and \
        "--tokenizer / --bpe" in message
    assert not os.path.exists(tmp_path / "out.pt")
    main([*args, "--max-unknown-rate", "1"])  # accepted when asked
    assert os.path.exists(tmp_path / "out.pt")
