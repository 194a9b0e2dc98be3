"""The personalized Transformer and the new variants through fairseq's command lines (their mains, in this process:
what the processes themselves do is checked in test_cli.py and test_quiet.py)."""

import os
import shutil

import pytest
import torch

from fairseq_speaker.generate_output import read_generate_output
from tests.cli import SIZES, call_main, doctored_checkpoint, generate_args, run_here, train_args


def test_transformer_trains_and_translates_each_sentence_as_its_speaker(toy, trained, tmp_path):
    checkpoint = trained("transformer_full_bias")
    state = torch.load(checkpoint, weights_only=True)
    assert vars(state["cfg"]["model"])["_name"] == "transformer_full_bias"
    boosts = {"spk000": "chien", "spk001": "voiture"}
    doctored = doctored_checkpoint(checkpoint, str(tmp_path / "doctored.pt"), boosts,
                                   os.path.join(toy["bin"], "dict.fr.txt"))
    speakers = ["spk000" if i % 3 else "spk001" for i in range(SIZES["test"])]
    spk_file = tmp_path / "test.spk"
    spk_file.write_text("\n".join(speakers) + "\n")
    proc = run_here("generate", generate_args(toy["bin"], doctored, "--speaker-file", str(spk_file)))
    hypotheses = read_generate_output(proc.stdout)
    assert len(hypotheses) == SIZES["test"]
    assert [h.split()[0] for h in hypotheses] == [boosts[s] for s in speakers]

    common = generate_args(toy["bin"], doctored, "--source-lang", "en", "--target-lang", "fr")
    lines = ["spk000\ti am tired .", "spk001\ti am tired ."] * 2
    proc = run_here("interactive", [*common, "--speaker-per-line"], stdin="\n".join(lines) + "\n")
    assert [h.split()[0] for h in read_generate_output(proc.stdout)] == [boosts[line[:6]] for line in lines]


def test_transformer_with_the_speaker_token(toy, trained):
    checkpoint = trained("transformer_base+spk_token")
    assert torch.load(checkpoint, weights_only=True)["task_state"]["speaker_token"] is True
    proc = run_here("generate", generate_args(toy["bin"], checkpoint))
    assert len(read_generate_output(proc.stdout)) == SIZES["test"]
    assert "<spk:" not in proc.stdout


@pytest.mark.parametrize("arch", ["lstm_base", "transformer_base"])
def test_topic_model_fitted_then_fact_plus_topic_trained_and_decoded_without_the_file(toy, tmp_path, arch):
    topics = str(tmp_path / "topics.npz")
    proc = call_main("fairseq-speaker-topics", [toy["bin"], "--topics", "3", "--out", topics])
    assert "topic 0:" in proc.stdout and os.path.exists(topics)
    save_dir = str(tmp_path / "ckpt")
    proc = run_here("train", train_args(toy["bin"], save_dir, f"{arch}:fact+topic", "--topic-model", topics,
                                        "--speaker-l2", "0.01"))
    log = proc.stdout + proc.log
    assert "fact_l2" in log and "topic_l2" in log  # each part's regularizer, logged under its name
    checkpoint = os.path.join(save_dir, "checkpoint_best.pt")
    state = torch.load(checkpoint, weights_only=True)
    assert state["model"]["decoder.speaker_bias.parts.topic.topic_words"].shape[0] == 3
    assert state["model"]["decoder.speaker_bias.parts.fact.speaker_weights"].shape == (8, 3)
    shutil.move(topics, str(tmp_path / "elsewhere.npz"))  # generation needs only the checkpoint
    proc = run_here("generate", generate_args(toy["bin"], checkpoint, "--speaker-file",
                                              os.path.join(toy["raw"], "test.spk")))
    assert len(read_generate_output(proc.stdout)) == SIZES["test"]
