"""Checkpoints of earlier releases load and decode as they did (tests/fixtures/checkpoints/<release>/)."""

import os

import pytest

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
