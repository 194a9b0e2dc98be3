"""Kinds of speakers learned from their sentences: a mixture over K styles, fitted by EM on the frozen network.

A speaker's r numbers fitted from their own ~30 sentences are a noisy point estimate: each number is
learned from the few words that speaker happened to use. But speakers come in kinds (a style of word
choice that many share), and a speaker's sentences say far better which kind they are than they say each
of r numbers. Here the speakers' rows are modelled as K shared styles, each a row of the variant's
speaker parameters (``mu_k``, the r numbers of a typical speaker of that style), with weights ``pi_k``::

    p(D_s) = sum_k pi_k p(D_s | mu_k)             D_s: speaker s's sentences, p(. | mu): the frozen network
                                                  with speaker rows mu (the onboarding solver's data term)

fitted by EM over all the speakers' sentences (Dempster, Laird & Rubin, 1977):

- E-step: q_s(k) ∝ pi_k p(D_s | mu_k), the posterior over styles of every speaker, from the likelihood of
  their sentences (not from the distance of their noisy rows, as :func:`~fairseq_speaker.onboarding.prior.fit_mixture`);
- M-step: mu_k fitted on the sentences of the speakers the E-step gives to style k (hard assignments:
  classification EM, Celeux & Govaert, 1992), pooled, so that a style is learned from some S/K speakers'
  sentences rather than from one speaker's; pi_k from the assignments (add-one smoothed).

It starts from the mixture of the rows (k-means++ and EM in row space) and stops when no speaker changes
style. The result is a :class:`~fairseq_speaker.onboarding.prior.SpeakerPrior` whose means are the styles:
``fairseq-speaker-refit --styles K`` then fits every speaker under it, and onboarding fits a new speaker
under it (the best style for their sentences, then a pull towards it) as it does under any prior. The
precision of the pull says how far a speaker may leave their style: how far the speakers' own rows lie
from their style's (``precision="fit"``), or not at all (a number as large as ``1e6``: a speaker is their style).
Per speaker it costs nothing new (the variant's rows), and K x (row size) + K + 1 numbers in the checkpoint.

The cost is K evaluations of each speaker's sentences per iteration (cached scores for a variant on the
output: matrix-vector products; decoder passes for one on the state), and K pooled fits.
"""

import logging
import math
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from fairseq_speaker.modules.speaker_bias import SpeakerBias
from fairseq_speaker.onboarding.fit import fit_speakers
from fairseq_speaker.onboarding.fit_loss import data_nll
from fairseq_speaker.onboarding.fit_options import FitOptions
from fairseq_speaker.onboarding.prior import MAX_COMPONENTS, SpeakerPrior, fit_mixture
from fairseq_speaker.onboarding.scoring import Scored

logger = logging.getLogger(__name__)

Rows = Dict[str, Tensor]


def style_log_likelihoods(bias: SpeakerBias, styles: Sequence[Rows], problems: Sequence[Sequence[Scored]]) -> Tensor:
    """``[S, K]``: the log-likelihood of each speaker's sentences (``problems``) under each style's rows."""
    out = torch.empty(len(problems), len(styles), dtype=torch.float64)
    with torch.no_grad():
        for k, rows in enumerate(styles):
            for s, chunks in enumerate(problems):
                out[s, k] = -float(data_nll(bias, rows, chunks))
    return out


def _weights(assign: np.ndarray, k: int) -> Tensor:
    counts = np.bincount(assign, minlength=k).astype(np.float64) + 1.0  # add-one: no style's weight is 0
    return torch.from_numpy(np.log(counts / counts.sum())).float()


def fit_styles(bias: SpeakerBias, problems: Sequence[Sequence[Scored]], rows: Sequence[Rows], components: int,
               options: FitOptions, seed: int = 1, iterations: int = 10, precision="fit",
               progress: Optional[Callable[[str], None]] = None) -> Tuple[SpeakerPrior, float]:
    """K = ``components`` styles of the speakers whose sentences are ``problems`` (one list of scored chunks per
    speaker) and whose current rows are ``rows`` (the start), by classification EM (module documentation); each
    style's rows fitted with ``options`` (its ``l2`` pulls towards the mean speaker). Returns the prior (means:
    the styles; precision: ``"fit"``, from the rows' spread around their style, or a number) and the
    log-likelihood of all the sentences under the mixture (nats)."""
    if not problems:
        raise ValueError("no speakers to learn styles from")
    k = max(1, min(int(components), len(problems)))
    start = fit_mixture(list(rows), k, seed=seed, variant=bias.name)
    styles = [start.component_rows(j) for j in range(start.components)]
    k = len(styles)
    log_w = start.log_weights.double()
    assign, loglik = None, -math.inf
    for iteration in range(max(1, iterations)):
        started = time.perf_counter()
        joint = style_log_likelihoods(bias, styles, problems) + log_w[None]  # S x K
        loglik = float(torch.logsumexp(joint, 1).sum())
        new = joint.argmax(1).numpy()
        moved = len(new) if assign is None else int((new != assign).sum())
        assign = new
        if progress:
            sizes = np.bincount(assign, minlength=k).tolist()
            progress(f"styles: iteration {iteration + 1}, log-likelihood {loglik:.1f}, {moved} speaker(s) changed "
                     f"style, sizes {sizes} ({time.perf_counter() - started:.1f} s)")
        if moved == 0 or iteration == max(1, iterations) - 1:  # the styles, weights and assignments returned agree
            break
        for j in range(k):  # M-step: each style from its speakers' sentences, pooled
            members = [c for s in np.flatnonzero(assign == j) for c in problems[int(s)]]
            if not members:  # an empty style keeps its rows (its weight is the add-one floor)
                continue
            fitted, _, _ = fit_speakers(bias, [members], options, init=[styles[j]])
            styles[j] = {name: value.float() for name, value in fitted[0].items()}
        log_w = _weights(assign, k).double()
    assert assign is not None  # one iteration at least
    kept = [j for j in range(k) if (assign == j).any()]
    if len(kept) < k:  # an empty style: its add-one weight was prior mass on no one
        logger.warning(f"styles: {k - len(kept)} of the {k} styles have no speaker after classification EM, and are "
                       f"left out: the prior has {len(kept)}")
        styles = [styles[j] for j in kept]
        assign = np.searchsorted(np.array(kept), assign)
        log_w = _weights(assign, len(kept)).double()
    means = {name: torch.cat([s[name] for s in styles]) for name in styles[0]}
    if precision == "fit":
        # the speakers' own rows around their style's: a tied spherical Gaussian, as fit_mixture's
        sq, size = 0.0, 0
        for s, r in enumerate(rows):
            for name, value in r.items():
                diff = value.float() - styles[assign[s]][name]
                sq += float(diff.pow(2).sum())
                size += diff.numel()
        tau = 1.0 / (2.0 * max(sq / max(size, 1), 1e-8))
    else:
        tau = float(precision)
    return SpeakerPrior(means, log_w.float(), tau, bias.name), loglik


def choose_styles(bias: SpeakerBias, problems, rows, options: FitOptions, candidates: Sequence[int], seed: int = 1,
                  iterations: int = 10, precision="fit", progress=None) -> SpeakerPrior:
    """The styles of the K among ``candidates`` with the best BIC: -2 log-likelihood + (K x row size + K - 1) x
    log S, S speakers (each speaker's sentences are one draw of the mixture)."""
    size = sum(v.numel() for v in rows[0].values())
    best = None
    for k in candidates:
        prior, loglik = fit_styles(bias, problems, rows, k, options, seed, iterations, precision, progress)
        bic = -2 * loglik + (prior.components * size + prior.components - 1) * math.log(len(problems))
        if progress:
            progress(f"styles: K = {prior.components}, BIC {bic:.1f}")
        if best is None or bic < best[0]:
            best = (bic, prior)
    assert best is not None  # one candidate at least
    return best[1]


def candidate_counts(speakers: int) -> List[int]:
    """The K tried by ``--styles auto``: 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, at most one per 5 speakers."""
    return [k for k in (1, 2, 3, 4, 6, 8, 12, 16, 24, MAX_COMPONENTS) if k <= max(1, speakers // 5)]
