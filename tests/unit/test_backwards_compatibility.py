"""Checkpoints of earlier releases load and decode as they did (tests/fixtures/checkpoints/<release>/)."""

import os

import pytest
import torch

from tests.checkpoint_compat import FIXTURES, decode, load_expected

RELEASES = sorted(d for d in os.listdir(FIXTURES) if os.path.isdir(os.path.join(FIXTURES, d)))
CASES = [(release, system) for release in RELEASES for system in load_expected(release)]


def test_every_release_has_a_checkpoint_of_each_paper_system():
    for release in RELEASES:
        assert {"lstm_base", "lstm_spk_token", "lstm_full_bias", "lstm_fact_bias"} <= set(load_expected(release))


@pytest.mark.parametrize("release,system", CASES, ids=[f"{r}-{s}" for r, s in CASES])
def test_old_checkpoint_decodes_as_it_did(release, system):
    folder = os.path.join(FIXTURES, release)
    expected = load_expected(release)[system]
    got = decode(os.path.join(folder, f"{system}.pt"), folder)
    assert got["translations"] == expected["translations"]
    assert got["scores"] == pytest.approx(expected["scores"], abs=1e-4)
    assert got["reference_logprobs"] == pytest.approx(expected["reference_logprobs"], abs=1e-3)


@pytest.mark.parametrize("release", [r for r in RELEASES if r in ("0.1.0", "0.2.0")])
def test_old_checkpoint_rows_get_the_names_of_its_speaker_dictionary(release):
    """Checkpoints before 0.3.0 do not name their speaker rows: fairseq's reader adds the names of the
    speaker dictionary saved with them (the one the model was built with), so that continued training
    maps them by name."""
    from fairseq import checkpoint_utils

    from fairseq_speaker.checkpoints import SPEAKER_NAMES_KEY

    path = os.path.join(FIXTURES, release, "lstm_full_bias.pt")
    raw = torch.load(path, weights_only=True)
    assert SPEAKER_NAMES_KEY not in raw["model"]  # as written then
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    names = state["model"][SPEAKER_NAMES_KEY]["speakers"]
    assert names == raw["task_state"]["speaker_dictionary"]["names"]
    assert len(names) == raw["model"]["decoder.speaker_bias.weight"].size(0)
