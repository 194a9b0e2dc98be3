"""Styles of speakers learned from their sentences by EM (fairseq_speaker/onboarding/styles.py).

A network that predicts nothing (all logits 0) and a ``fact`` bias whose shared vectors are known: speakers of
two styles say words drawn from the style's distribution, a few words each. The speakers' own rows, fitted from
so few words, are noisy; the styles learned from all of their sentences must give every speaker the style the
Bayes decision with the true styles gives them (an independent computation: the generative model's own
likelihoods), and a new speaker's onboarding under the learned prior must end at their style.
"""

import math

import numpy as np
import pytest
import torch

from fairseq_speaker.modules.speaker_bias.fact import FactorizedSpeakerBias, RankedSpeakerBiasConfig
from fairseq_speaker.onboarding.fit import fit_speakers
from fairseq_speaker.onboarding.fit_loss import data_nll
from fairseq_speaker.onboarding.fit_options import FitOptions
from fairseq_speaker.onboarding.prior import best_start
from fairseq_speaker.onboarding.scoring import TokenScores
from fairseq_speaker.onboarding.styles import candidate_counts, choose_styles, fit_styles, style_log_likelihoods

V = 8
#: the true styles' rows (r = 2): style 0 favours the even words, style 1 the odd ones
TRUE = torch.tensor([[1.5, 0.0], [-1.5, 0.0]])


def _bias() -> FactorizedSpeakerBias:
    bias = FactorizedSpeakerBias(RankedSpeakerBiasConfig(speaker_rank=2), num_speakers=1, vocab_size=V)
    with torch.no_grad():
        bias.shared_biases.copy_(torch.stack([torch.tensor([1.0, -1.0] * (V // 2)),
                                              torch.linspace(-0.5, 0.5, V)], dim=1))
    return bias


def _scores(words) -> TokenScores:
    t = len(words)
    z = torch.zeros(t, V)  # the network: no preference
    return TokenScores(exp_logits=z.exp(), shift=torch.zeros(t), target_logit=torch.zeros(t),
                       target=torch.tensor(words), sentence=torch.zeros(t, dtype=torch.long),
                       source=torch.zeros(1, 1, dtype=torch.long), mean_logit=torch.zeros(t))


def _speakers(bias, n_speakers=60, words=5, seed=0):
    """Speakers of alternating styles, ``words`` words each, drawn from softmax(bias of their style)."""
    rng = np.random.default_rng(seed)
    probs = torch.softmax(TRUE @ bias.shared_biases.detach().t(), dim=1).numpy()
    styles = [s % 2 for s in range(n_speakers)]
    return styles, [[_scores(rng.choice(V, size=words, p=probs[k] / probs[k].sum()).tolist())] for k in styles]


def _own_rows(bias, problems, l2=0.05):
    """Each speaker fitted from their own words alone, pulled to zero with ``l2``: the noisy start."""
    zero = {"speaker_weights": torch.zeros(1, 2)}
    options = FitOptions(l2=l2, max_iter=50)
    return [fit_speakers(bias, [p], options, init=[zero], prior=[zero])[0][0] for p in problems]


def _bayes(bias, problems):
    """The style the true styles' likelihoods (equal weights) choose for each speaker."""
    truth = [{"speaker_weights": TRUE[k : k + 1]} for k in range(2)]
    return style_log_likelihoods(bias, truth, problems).argmax(1).tolist()


def test_the_styles_learned_from_sentences_classify_every_speaker_as_the_true_styles_do():
    bias = _bias()
    styles, problems = _speakers(bias)
    rows = _own_rows(bias, problems)
    prior, loglik = fit_styles(bias, problems, rows, 2, FitOptions(l2=0.01, max_iter=50), seed=1)
    assert prior.components == 2 and math.isfinite(loglik)
    learned = prior.means["speaker_weights"]
    order = [int(torch.argmin((learned - TRUE[k]).norm(dim=1))) for k in range(2)]
    assert sorted(order) == [0, 1]  # one learned style near each true one
    for k in range(2):  # each nearer its true style than the other true style is (3.0 away)
        assert (learned[order[k]] - TRUE[k]).norm() < 1.0
    found = style_log_likelihoods(bias, [prior.component_rows(j) for j in range(2)], problems)
    found = (found + prior.log_weights.double()[None]).argmax(1).tolist()
    bayes = _bayes(bias, problems)
    assert [order.index(f) for f in found] == bayes  # the same decision as with the true styles
    assert np.mean([b == s for b, s in zip(bayes, styles)]) > 0.8  # and that decision is mostly right


def test_each_style_is_fitted_on_its_speakers_pooled_sentences_not_taken_from_their_rows():
    """Rows shrunk hard towards zero (a strong pull, few words) start the styles near zero; the M-step's fit on
    the pooled sentences brings each back to the size of its true style."""
    bias = _bias()
    _, problems = _speakers(bias, words=5, seed=3)
    rows = _own_rows(bias, problems, l2=2.0)
    assert max(abs(float(r["speaker_weights"][0, 0])) for r in rows) < 0.8  # the start is far from +-1.5
    prior, _ = fit_styles(bias, problems, rows, 2, FitOptions(l2=0.01, max_iter=50), seed=1)
    first = sorted(float(v) for v in prior.means["speaker_weights"][:, 0])
    assert first[0] == pytest.approx(-1.5, abs=0.5) and first[1] == pytest.approx(1.5, abs=0.5)


def test_a_new_speaker_starts_at_the_style_their_sentences_show():
    bias = _bias()
    _, problems = _speakers(bias)
    prior, _ = fit_styles(bias, problems, _own_rows(bias, problems), 2, FitOptions(l2=0.01, max_iter=50),
                          precision=1e4)
    assert prior.precision == 1e4
    odd = [_scores([1, 3, 5, 7, 1, 3])]  # words only style 1 favours
    start = best_start(prior, odd, lambda r, c: data_nll(bias, r, c))
    fitted, _, _ = fit_speakers(bias, [odd], FitOptions(), init=[start], prior=[prior])
    assert float(fitted[0]["speaker_weights"][0, 0]) < -1.0  # style 1's side, held there by the prior
    assert (fitted[0]["speaker_weights"] - start["speaker_weights"]).norm() < 1e-2


def test_bic_prefers_the_number_of_styles_the_speakers_were_drawn_from():
    bias = _bias()
    _, problems = _speakers(bias, n_speakers=80, words=8, seed=2)
    rows = _own_rows(bias, problems)
    prior = choose_styles(bias, problems, rows, FitOptions(l2=0.01, max_iter=50), [1, 2], seed=1)
    assert prior.components == 2
    assert candidate_counts(12) == [1, 2] and candidate_counts(400)[-1] == 32


@pytest.mark.parametrize("precision", ["fit", 3.0])
def test_the_precision_is_the_rows_spread_around_their_style_or_the_number_given(precision):
    bias = _bias()
    _, problems = _speakers(bias, n_speakers=20)
    rows = _own_rows(bias, problems)
    prior, _ = fit_styles(bias, problems, rows, 2, FitOptions(l2=0.01, max_iter=50), precision=precision)
    if precision == "fit":
        means = prior.means["speaker_weights"]
        joint = style_log_likelihoods(bias, [prior.component_rows(j) for j in range(2)], problems)
        assign = (joint + prior.log_weights.double()[None]).argmax(1)
        var = np.mean([float((r["speaker_weights"][0] - means[a]).pow(2).mean()) for r, a in zip(rows, assign)])
        assert prior.precision == pytest.approx(1 / (2 * var), rel=1e-4)
    else:
        assert prior.precision == 3.0


def test_a_style_no_speaker_has_is_left_out_of_the_prior_with_a_warning(caplog):
    """Three speakers who said the same words, two styles asked: classification EM puts all three in one, and the
    other style was saved with its add-one weight (a fifth of the prior, 0.2 with three speakers) on no one."""
    bias = _bias()
    _, problems = _speakers(bias, n_speakers=1, words=5, seed=0)
    problems = problems * 3
    sizes = []
    with caplog.at_level("WARNING"):
        prior, loglik = fit_styles(bias, problems, _own_rows(bias, problems), 2,
                                   FitOptions(l2=0.01, max_iter=50), seed=1, progress=sizes.append)
    assert sizes[-1].split("sizes ")[1].startswith("[3, 0]"), sizes  # the case: one style emptied
    assert prior.components == 1 and prior.means["speaker_weights"].shape == (1, 2) and math.isfinite(loglik)
    assert float(prior.log_weights.exp().sum()) == pytest.approx(1.0)
    assert "1 of the 2 styles have no speaker after classification EM, and are left out" in caplog.text
