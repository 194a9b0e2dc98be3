"""The mixture prior over speakers (empirical Bayes): its fit, its penalty, and fits of speakers under it."""

import math

import numpy as np
import pytest
import torch

from fairseq_speaker.onboarding.adapter import SpeakerAdapter
from fairseq_speaker.onboarding.fit import fit_speakers
from fairseq_speaker.onboarding.fit_options import FitOptions
from fairseq_speaker.onboarding.prior import (
    CHECKPOINT_KEY,
    SpeakerPrior,
    fit_mixture,
    prior_of_checkpoint,
)
from fairseq_speaker.onboarding.scoring import score_tokens
from tests.helpers import frozen_pairs, open_frozen


def _clusters(sizes, centres, spread, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for size, centre in zip(sizes, centres):
        for _ in range(size):
            rows.append({"w": torch.tensor(centre + rng.normal(0, spread, len(centre)), dtype=torch.float32)[None]})
    return rows


def test_the_mixture_finds_the_kinds_it_was_drawn_from():
    centres = [np.array([3.0, 0, 0, 0]), np.array([0, 3.0, 0, 0]), np.array([0, 0, 0, 3.0])]
    prior = fit_mixture(_clusters([60, 30, 90], centres, 0.2), "auto", seed=3)
    assert prior.components == 3  # BIC picks the number of kinds
    found = prior.means["w"].numpy()
    order = [int(np.argmin([np.linalg.norm(f - c) for f in found])) for c in centres]
    assert sorted(order) == [0, 1, 2]
    for c, k in zip(centres, order):
        assert np.linalg.norm(found[k] - c) < 0.1
    weights = torch.exp(prior.log_weights).numpy()[order]
    assert weights == pytest.approx([60 / 180, 30 / 180, 90 / 180], abs=0.01)
    assert 1 / (2 * prior.precision) == pytest.approx(0.04, rel=0.2)  # the variance drawn: 0.2 ** 2
    assert fit_mixture(_clusters([60, 30, 90], centres, 0.2), 1).components == 1


def test_penalty_is_the_negative_log_of_the_mixture():
    means = {"a": torch.tensor([[0.0, 0.0], [1.0, 2.0]]), "b": torch.tensor([[[1.0]], [[-1.0]]])}
    log_w = torch.log(torch.tensor([0.25, 0.75]))
    prior = SpeakerPrior(means, log_w, precision=2.0)
    rows = {"a": torch.tensor([[0.5, 1.0]]), "b": torch.tensor([[[0.0]]])}
    d0 = 0.5 ** 2 + 1.0 ** 2 + 1.0
    d1 = 0.5 ** 2 + 1.0 ** 2 + 1.0
    expected = -math.log(0.25 * math.exp(-2.0 * d0) + 0.75 * math.exp(-2.0 * d1))
    assert float(prior.penalty(rows)) == pytest.approx(expected, rel=1e-6)
    at_mean = SpeakerPrior({"a": means["a"][:1]}, torch.zeros(1), 5.0)
    assert float(at_mean.penalty({"a": torch.zeros(1, 2)})) == pytest.approx(0.0, abs=1e-7)
    assert prior.responsibilities(rows).tolist() == pytest.approx([0.25, 0.75])
    again = SpeakerPrior.from_state_dict(prior.state_dict())
    assert float(again.penalty(rows)) == pytest.approx(expected, rel=1e-6)


def _open(system="lstm_fact_bias"):
    return open_frozen(system)


_pairs = frozen_pairs


def test_a_speaker_is_pulled_to_the_kind_their_sentences_show():
    """Two kinds of speaker, the trained rows of spk000 and of spk001: spk001's sentences, fitted under a
    narrow mixture of the two from the mean speaker, end at spk001's kind."""
    checkpoint = _open()
    bias = checkpoint.check_adaptable()
    rows = bias.export_speakers([0, 1])
    prior = SpeakerPrior({k: v.float() for k, v in rows.items()}, torch.log(torch.tensor([0.5, 0.5])), 200.0)
    scores = score_tokens(checkpoint.model, _pairs(checkpoint, "spk001"), checkpoint.task.src_dict,
                          checkpoint.task.tgt_dict)
    fitted, _, report = fit_speakers(bias, [[scores]], FitOptions(), prior=[prior])
    assert report.loss_after < report.loss_before
    w = fitted[0]["speaker_weights"].float()
    assert (w - rows["speaker_weights"][1]).norm() < 0.5 * (w - rows["speaker_weights"][0]).norm()
    # the same sentences pulled towards the mean speaker end elsewhere: the prior is what moved them
    plain, _, _ = fit_speakers(bias, [[scores]], FitOptions())
    assert not torch.allclose(plain[0]["speaker_weights"].float(), w, atol=1e-3)


def test_onboarding_uses_the_checkpoints_prior():
    """SpeakerAdapter with the checkpoint's prior starts a new speaker at the component their sentences fit
    best; a checkpoint without one (or one for other parameters) gives the mean speaker's pull."""
    checkpoint = _open()
    bias = checkpoint.check_adaptable()
    assert prior_of_checkpoint(checkpoint.state, bias) is None  # 0.2.0: no prior saved
    rows = bias.export_speakers([0, 1])
    prior = SpeakerPrior({k: v.float() for k, v in rows.items()}, torch.log(torch.tensor([0.5, 0.5])), 200.0,
                         variant="fact")
    state = {CHECKPOINT_KEY: prior.state_dict()}
    loaded = prior_of_checkpoint(state, bias)
    assert loaded is not None and loaded.components == 2
    assert prior_of_checkpoint({CHECKPOINT_KEY: SpeakerPrior({"other": torch.zeros(1, 3)}, torch.zeros(1),
                                                             1.0).state_dict()}, bias) is None
    adapter = SpeakerAdapter(checkpoint.model, checkpoint.task, prior=loaded)
    adapter.adapt({"newcomer": _pairs(checkpoint, "spk001")})
    new = bias.export_speakers([checkpoint.task.speaker_dictionary.index("newcomer")])["speaker_weights"].float()
    assert (new - rows["speaker_weights"][1]).norm() < 0.5 * (new - rows["speaker_weights"][0]).norm()
