"""The out-of-tree example (examples/custom_variant): a variant registered from a second --user-dir,
trained and decoded through the stock fairseq command lines."""

import os

import torch

from fairseq_speaker.generate_output import read_generate_output
from tests.cli import SIZES, TINY, run

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "examples", "custom_variant", "sparse_speaker_bias")


def test_a_variant_from_another_package_trains_and_decodes_through_the_stock_clis(toy, tmp_path):
    save_dir = str(tmp_path / "ckpt")
    proc = run("train", [
        toy["bin"], "--user-dir", EXAMPLE, "--task", "speaker_translation", "--arch", "lstm_base",
        "--speaker-bias", "sparse_full", "--sparse-l1", "0.01", *TINY["lstm"],
        "--criterion", "speaker_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "4000", "--max-epoch", "2",
        "--save-dir", save_dir, "--no-progress-bar", "--seed", "1",
    ])
    assert "sparse_full_l1" in proc.stdout + proc.stderr  # its own regularizer, logged under its name
    checkpoint = os.path.join(save_dir, "checkpoint_best.pt")
    state = torch.load(checkpoint, weights_only=True)
    model = state["cfg"]["model"]
    assert (model["speaker_bias"], model["sparse_l1"]) == ("sparse_full", 0.01)
    vocab = state["model"]["decoder.output_bias"].numel()
    assert state["model"]["decoder.speaker_bias.weight"].shape == (8, vocab)
    assert state["model"]["decoder.speaker_bias.weight"].abs().sum() > 0  # the speakers' rows learned

    proc = run("generate", [toy["bin"], "--user-dir", EXAMPLE, "--task", "speaker_translation",
                            "--path", checkpoint, "--beam", "5", "--max-len-b", "6",
                            "--speaker-file", os.path.join(toy["raw"], "test.spk")])
    assert len(read_generate_output(proc.stdout)) == SIZES["test"]
