"""Continued training (``--restore-file``, ``--finetune-from-model``) restores speaker rows by name.

fairseq restores the model, not the task state: the speaker dictionary comes from the data
directory, which may list the speakers in another order, fewer of them or new ones. Each case
trains one more epoch at a learning rate too small to move a row measurably, then compares every
speaker's row in the new checkpoint with that speaker's row in the old one. The commands run in this process
(their mains, through tests/cli.py's run_here and call_main).
"""

import os
import re

import pytest
import torch

from fairseq_speaker.data import SpeakerDictionary, read_speaker_file
from tests.cli import call_main, copy_data, generate_args, run, run_here, train_args

WEIGHT = "decoder.speaker_bias.weight"


def _rows(checkpoint):
    state = torch.load(checkpoint, weights_only=True)
    names = state["task_state"]["speaker_dictionary"]["names"]
    assert state["model"]["decoder.speaker_bias._extra_state"]["speakers"] == names
    return names, state["model"][WEIGHT]


def _relabel(data, mapping):
    """Rename speakers in every split's labels (and so in the speaker list fairseq-train builds)."""
    for split in ("train", "valid", "test"):
        path = os.path.join(data, f"{split}.spk")
        labels = [mapping.get(label, label) for label in read_speaker_file(path)]
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(label + "\n" for label in labels))


def _continue(tmp_path, data, checkpoint, flag="--restore-file"):
    save_dir = str(tmp_path / "continued")
    proc = run_here("train", train_args(data, save_dir, "lstm_full_bias", flag, checkpoint, "--lr", "1e-9",
                                        "--max-epoch", "3" if flag == "--restore-file" else "1"))
    return os.path.join(save_dir, "checkpoint_last.pt"), proc.log + proc.stdout


@pytest.fixture(scope="module")
def before(trained):
    checkpoint = trained("lstm_full_bias")
    names, weight = _rows(checkpoint)
    # rows differ enough between speakers that a row restored to the wrong name would show
    distances = torch.cdist(weight, weight) + 1e3 * torch.eye(len(names))
    assert float(distances.min()) > 1e-2
    return checkpoint, names, weight


def _check_known_rows(before, names_after, weight_after):
    _, names, weight = before
    for i, name in enumerate(names):  # every speaker of the checkpoint keeps its row, by name
        assert torch.allclose(weight_after[names_after.index(name)], weight[i], atol=1e-4), name
    assert names_after[: len(names)] == names  # the checkpoint's rows stay where they were


def test_reordered_speaker_list(toy, tmp_path, before):
    checkpoint, names, _ = before
    data = copy_data(toy, tmp_path)
    SpeakerDictionary(list(reversed(names))).save(os.path.join(data, "dict.spk.txt"))
    after, log = _continue(tmp_path, data, checkpoint)
    names_after, weight_after = _rows(after)
    assert len(names_after) == len(names)
    _check_known_rows(before, names_after, weight_after)
    assert "rows follow the checkpoint" in log


def test_shrunk_speaker_list(toy, tmp_path, before):
    checkpoint, names, _ = before
    data = copy_data(toy, tmp_path)
    _relabel(data, {names[-1]: names[0], names[-2]: names[0]})  # two speakers leave the data
    after, log = _continue(tmp_path, data, checkpoint)
    names_after, weight_after = _rows(after)
    assert names_after == names  # their rows are kept
    _check_known_rows(before, names_after, weight_after)
    assert "2 not in the data kept" in log


@pytest.mark.parametrize("flag", ["--restore-file", "--finetune-from-model"])
def test_extended_speaker_list(toy, tmp_path, before, flag):
    checkpoint, names, weight = before
    data = copy_data(toy, tmp_path)
    _relabel(data, {names[0]: "newcomer-a", names[1]: "newcomer-b"})  # two new speakers, two gone
    after, log = _continue(tmp_path, data, checkpoint, flag)
    names_after, weight_after = _rows(after)
    assert names_after == names + ["newcomer-a", "newcomer-b"]
    _check_known_rows(before, names_after, weight_after)
    for new in (-1, -2):  # the new speakers start as the mean speaker
        assert torch.allclose(weight_after[new], weight.mean(0), atol=1e-4)
    assert "2 new speaker(s) added after them as the mean speaker" in log
    # every label of the data is a speaker of the new checkpoint
    generated = run_here("generate", generate_args(data, after, "--gen-subset", "valid", "--unknown-speaker", "fail"))
    assert "unseen in training" not in generated.log


@pytest.mark.parametrize("flag", ["--restore-file", "--finetune-from-model"])
def test_an_onboarded_speaker_keeps_its_sentence_count(toy, tmp_path, before, flag):
    """The data has no sentence of a speaker onboarded into the checkpoint: its count is the checkpoint's (the pairs
    it was fitted on), not lost because fairseq-train does not load the task state."""
    from fairseq_speaker.onboarding.speakers import list_speakers

    checkpoint = before[0]
    raw = os.path.join(toy["raw"], "test")
    for ext in ("en", "fr"):
        with open(f"{raw}.{ext}", encoding="utf-8") as f, open(tmp_path / f"new.{ext}", "w", encoding="utf-8") as out:
            out.writelines(f.readlines()[:3])
    (tmp_path / "new.spk").write_text("newbie\n" * 3, encoding="utf-8")
    adapted = str(tmp_path / "adapted.pt")
    call_main("fairseq-speaker-adapt", [toy["bin"], "--path", checkpoint, "--adapt-prefix", str(tmp_path / "new"),
                                        "--save", adapted, "--threads", "1"])
    assert {s.name: s.sentences for s in list_speakers(adapted).speakers}["newbie"] == 3
    extra = ["--reset-optimizer", "--reset-dataloader", "--reset-meters"] if flag == "--restore-file" else []
    save_dir = str(tmp_path / "continued")
    run_here("train", train_args(toy["bin"], save_dir, "lstm_full_bias", flag, adapted, *extra, "--lr", "1e-9",
                                 "--max-epoch", "3" if flag == "--restore-file" else "1"))
    listed = {s.name: s for s in list_speakers(os.path.join(save_dir, "checkpoint_last.pt")).speakers}
    assert (listed["newbie"].kind, listed["newbie"].sentences) == ("onboarded", 3)
    trained_in_data = SpeakerDictionary.load(os.path.join(toy["bin"], "dict.spk.txt"))
    first = before[1][0]
    assert listed[first].sentences == trained_in_data.counts[trained_in_data.index(first)] > 0  # the data's count


def _valid_losses(log: str):
    return [float(m) for m in re.findall(r"valid on 'valid' subset \| loss ([0-9.]+)", log)]


def test_the_data_follows_the_restored_rows_from_the_first_batch_with_worker_processes(toy, tmp_path, before):
    """The table a checkpoint brings is taken by the task before the training split is read and before worker
    processes copy the splits (--num-workers 2): the valid loss after one more epoch at a learning rate too small to
    move anything is the same with the speaker list reversed as without (a split mapped to the data's order would
    score each sentence with another speaker's row)."""
    checkpoint, names, _ = before
    losses = []
    for order in (names, list(reversed(names))):
        data = copy_data(toy, tmp_path, f"data-{len(losses)}")
        SpeakerDictionary(order).save(os.path.join(data, "dict.spk.txt"))
        proc = run("train", train_args(data, str(tmp_path / f"continued-{len(losses)}"), "lstm_full_bias",
                                       "--restore-file", checkpoint, "--lr", "1e-9", "--max-epoch", "3",
                                       "--num-workers", "2"))
        losses.append(_valid_losses(proc.stderr + proc.stdout))
    assert losses[0] and losses[0] == losses[1], losses
