"""The third model family (examples/lightconv_family): a family registered from a second --user-dir, trained
with a speaker bias and decoded through the stock fairseq command lines."""

import pytest
import torch

from fairseq_speaker.generate_output import read_generate_output
from tests.cli import SIZES, TINY_VARIANTS, run
from tests.helpers import LIGHTCONV_FAMILY, lightconv_family


@pytest.mark.slow  # a third family trained and decoded (17 s); test_families registers it in the default run
def test_a_family_from_another_package_trains_and_decodes_through_the_stock_clis(toy, tmp_path):
    family = lightconv_family()  # its declared tiny sizes
    save_dir = str(tmp_path / "ckpt")
    run("train", [
        toy["bin"], "--user-dir", LIGHTCONV_FAMILY, "--task", "speaker_translation", "--arch", "lightconv_base",
        "--speaker-bias", "fact", *family.scale_args("tiny"), *family.tie_output, *TINY_VARIANTS,
        "--criterion", "speaker_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "1000", "--max-epoch", "1",
        "--save-dir", save_dir, "--no-progress-bar", "--seed", "1",
    ])
    state = torch.load(f"{save_dir}/checkpoint_best.pt", weights_only=True)
    model = state["args"] if state.get("args") is not None else state["cfg"]["model"]
    assert (model.arch, model.speaker_bias, model.speaker_rank) == ("lightconv_base", "fact", 3)
    weights = state["model"]["decoder.speaker_bias.speaker_weights"]
    assert weights.shape == (8, 3) and weights.abs().sum() > 0  # the speakers' rows of fact learned
    # tied as the paper: the output layer is the target embeddings
    assert torch.equal(state["model"]["decoder.output_projection.weight"], state["model"]["decoder.embed_tokens.weight"])

    proc = run("generate", [toy["bin"], "--user-dir", LIGHTCONV_FAMILY, "--task", "speaker_translation",
                            "--path", f"{save_dir}/checkpoint_best.pt", "--beam", "5", "--max-len-b", "6",
                            "--speaker-file", f"{toy['raw']}/test.spk"])
    assert len(read_generate_output(proc.stdout)) == SIZES["test"]
