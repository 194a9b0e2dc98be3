"""The kinds of speaker of one trait: a latent class model of the speakers' choices (Lazarsfeld & Henry, 1968), fitted
by EM, its number of kinds chosen by how well it predicts held-out speakers' choices (Smyth, 2000; the one-standard-
error rule of Hastie, Tibshirani & Friedman, 2009, 7.10). The steps that find the traits and use these models are in
:mod:`fairseq_speaker.analysis.choices`, whose docstring tells the whole, and :mod:`.regroup`."""

from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

import numpy as np

#: the numbers of kinds :func:`kinds` tries for a trait
KINDS = (1, 2, 3, 4, 6, 8, 12)
#: where the best of :data:`KINDS` is the largest, :func:`kinds` tries GROWTH times as many, and so on while the largest
#: tried is the best, up to one kind for every MIN_SPEAKERS_A_KIND speakers and MAX_GROWN_KINDS (each EM step costs
#: in proportion): 12 was a ceiling, and a corpus of 12 styles and speakers who choose at random predicted its
#: held-out speakers better at 12 than at 8, by 0.10 nats a choice, and better still at 41
GROWTH = 1.5
MIN_SPEAKERS_A_KIND = 5
MAX_GROWN_KINDS = 100
#: :func:`kinds` chooses the number of kinds by FOLDS-fold cross-validation over the speakers, the best of
#: FOLD_RESTARTS EM starts in each fold
FOLDS = 5
FOLD_RESTARTS = 3


@dataclass
class Kinds:
    """A trait's latent class model: ``k`` kinds with prior ``prior`` [k], and for each of the trait's choices the
    probability of each alternative under each kind (``alternatives[c]`` [k, number of alternatives]); ``bic`` the
    criterion of every number of kinds tried."""

    k: int
    prior: np.ndarray
    alternatives: List[np.ndarray]
    log_likelihood: float
    bic: Dict[int, float]
    #: the held-out log-likelihood of each number of kinds tried (nats a choice made; :func:`kinds`)
    heldout: Dict[int, float] = field(default_factory=dict)
    #: for each choice, whether the kinds predict it better than everyone's rates on held-out speakers (their summed
    #: difference above twice its standard error); all False for one kind or when not cross-validated
    predicted: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    #: each speaker's held-out log-likelihood under the number of kinds chosen, summed over their choices (nats;
    #: empty when not cross-validated): :func:`split_traits` compares two fits of the same speakers' choices by it
    by_speaker: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: each speaker's held-out log-likelihood under the kinds chosen less under one kind (nats; empty when not
    #: cross-validated): whether the kinds predict the held-out speakers better at all (:attr:`significant`)
    over_one: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def significant(self) -> bool:
        """Whether the kinds predict the held-out speakers' choices better than one kind by more than twice the
        standard error of the paired difference over the speakers."""
        n = len(self.over_one)
        return bool(self.k > 1 and n > 1 and self.over_one.sum() > 2.0 * self.over_one.std() * np.sqrt(n))

    @property
    def gain(self) -> float:
        """How much better than everyone's rates (one kind) the kinds predict a held-out speaker's choice from their
        other choices: nats a choice made, 0 for one kind (nan when not cross-validated)."""
        if not self.heldout or 1 not in self.heldout:
            return float("nan")
        return self.heldout[self.k] - self.heldout[1]


def _onehot(chosen: np.ndarray, sizes: Sequence[int]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The choices of ``chosen`` (speakers x choices, -1: not made) as speakers x alternatives of every choice, 1 where
    the speaker said it; the first alternative of each choice among the columns [choices], and the index of each made
    choice's alternative among the columns (speakers x choices, -1: not made)."""
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    column = np.where(chosen >= 0, chosen + offsets[None, :], -1)
    x = np.zeros((chosen.shape[0], int(np.sum(sizes))))
    rows, cols = np.nonzero(column >= 0)
    x[rows, column[rows, cols]] = 1.0
    return x, offsets, column


def _fit(x: np.ndarray, offsets: np.ndarray, k: int, rng: np.random.Generator, iters: int, smoothing: float,
         tol: float = 1e-7) -> Tuple[float, np.ndarray, np.ndarray]:
    """EM for ``k`` kinds on the one-hot choices ``x`` (:func:`_onehot`): the log-likelihood, the prior [k] and the
    log-probability of each alternative under each kind [alternatives, k]; stopped early when an iteration gains less
    than ``tol`` nats a speaker. Each kind's table of a choice of m alternatives has ``smoothing`` * m pseudo-counts,
    shared as everyone's rates of the alternatives (themselves smoothed toward uniform): more kinds then do not
    smooth more, which held-out data would otherwise reward in rare choices for nothing but the smoothing."""
    speakers = x.shape[0]
    sizes = np.diff(np.append(offsets, x.shape[1]))
    owner = np.repeat(np.arange(len(offsets)), sizes)
    everyone = x.sum(0) + smoothing
    pseudo = smoothing * sizes[owner] * everyone / np.add.reduceat(everyone, offsets)[owner]  # [alternatives]
    resp = rng.dirichlet(np.ones(k), size=speakers)
    last = -np.inf
    for _ in range(iters + 1):
        prior = (resp.sum(0) + 1.0) / (speakers + k)
        counts = x.T @ resp + pseudo[:, None]  # [alternatives, k]
        log_table = np.log(counts / np.add.reduceat(counts, offsets, axis=0)[owner])
        logp = np.log(prior) + x @ log_table  # [speakers, k]
        top = logp.max(1, keepdims=True)
        total = top[:, 0] + np.log(np.exp(logp - top).sum(1))
        resp = np.exp(logp - total[:, None])
        if total.sum() - last < tol * speakers:
            break
        last = total.sum()
    return float(total.sum()), prior, log_table


def _loo(x: np.ndarray, column: np.ndarray, prior: np.ndarray, log_table: np.ndarray) -> np.ndarray:
    """The log-likelihood of every choice each speaker of ``x`` made given their other choices (the posterior
    predictive the memory ranks a choice's alternatives by) [speakers, choices], 0 where they did not make it."""
    joint = np.log(prior) + x @ log_table  # [speakers, k]
    made = column >= 0
    without = joint[:, None, :] - log_table[np.maximum(column, 0)]  # [speakers, choices, k]: the choice left out
    lse = lambda a, axis: a.max(axis) + np.log(np.exp(a - np.expand_dims(a.max(axis), axis)).sum(axis))  # noqa: E731
    return (lse(joint, 1)[:, None] - lse(without, 2)) * made


def _folds(speakers: int, folds: int, seed: int) -> np.ndarray:
    """Each speaker's fold, ``folds`` of about equal size in a random order."""
    return np.random.default_rng([seed, speakers]).permutation(np.arange(speakers) % folds)


def _numbers_of_kinds(ks: Sequence[int], heldout: Dict[int, float], grow: bool, speakers: int):
    """The numbers of kinds to try: each of ``ks``, then (``grow``) :data:`GROWTH` times the largest tried while it
    predicts best (``heldout``, filled in as they are tried), at most a kind for every :data:`MIN_SPEAKERS_A_KIND`
    speakers, and :data:`MAX_GROWN_KINDS`. (EM from random starts finds a trait's kinds more surely with more kinds
    than it has, some of them alike: more can predict better than the true number.)"""
    yield from ks
    k = max(ks)
    while grow and k > 1 and _largest_predicts_best(heldout):
        k = int(np.ceil(k * GROWTH))
        if k > min(speakers // MIN_SPEAKERS_A_KIND, MAX_GROWN_KINDS):
            return
        yield k


def _largest_predicts_best(heldout: Dict[int, float]) -> bool:
    """Whether the largest number of kinds tried predicts held-out speakers better than every other (strictly: a
    choice alone, or speakers choosing at random, predicted alike by every number, is no reason to try more)."""
    largest = max(heldout, default=0)
    return len(heldout) > 1 and all(heldout[largest] > score + 1e-9 for k, score in heldout.items() if k != largest)


def kinds(chosen: np.ndarray, sizes: Sequence[int], ks: Sequence[int] = KINDS, restarts: int = 8, iters: int = 100,
          smoothing: float = 0.5, seed: int = 0, folds: int = FOLDS, fold_restarts: int = FOLD_RESTARTS,
          grow: bool = True) -> Kinds:
    """The latent class model of one trait: ``chosen`` speakers x the trait's choices (-1: not made), ``sizes`` the
    number of alternatives of each. Of ``ks`` kinds, the number whose model, fitted on the other folds' speakers,
    best predicts each choice of a held-out speaker from their other choices (``folds`` folds over the speakers, the
    best of ``fold_restarts`` EM starts each; :attr:`Kinds.heldout`), every number of ``ks`` tried, and with ``grow``
    larger numbers while the largest tried predicts best (:func:`_numbers_of_kinds`); the fewest kinds
    within one standard error of the best are chosen, and one kind where
    no choice is predicted better than by everyone's rates (:attr:`Kinds.predicted`) or the whole is not
    (:attr:`Kinds.significant`). The model kept is fitted on
    every speaker from ``restarts`` random starts (the best likelihood kept). ``folds`` below 2 (or fewer speakers
    than folds): BIC chooses among every number of ``ks``, as it did before cross-validation."""
    speakers = chosen.shape[0]
    if chosen.shape[1] == 1:
        ks = (1,)  # a choice alone is predicted by no other: its kinds' predictive is everyone's rates
    x, offsets, column = _onehot(chosen, sizes)
    parameters = lambda k: (k - 1) + k * sum(size - 1 for size in sizes)  # noqa: E731
    heldout: Dict[int, float] = {}
    made = max(int((chosen >= 0).sum()), 1)
    if folds >= 2 and speakers >= folds:
        fold = _folds(speakers, folds, seed)
        scores: Dict[int, np.ndarray] = {}  # each speaker's held-out log-likelihood, by number of kinds
        for k in _numbers_of_kinds(ks, heldout, grow, speakers):
            scores[k] = np.zeros(chosen.shape)
            for f in range(folds):
                train = fold != f
                fits = [_fit(x[train], offsets, k, np.random.default_rng([seed, k, f, r]), iters, smoothing)
                        for r in range(fold_restarts if k > 1 else 1)]
                _, prior, log_table = max(fits, key=lambda fit: fit[0])
                scores[k][~train] = _loo(x[~train], column[~train], prior, log_table)
            # every number of kinds is tried: the held-out score is not unimodal in k (6 styles shown on rare binary
            # phrases: 2 kinds predict worse than 1, 6 better), so that stopping at the first worse number missed them
            heldout[k] = float(scores[k].sum()) / made
        # the fewest kinds within one standard error of the best (Hastie et al. 2009, 7.10), the error of the paired
        # difference over the speakers: a number of kinds must predict held-out speakers better, not by chance
        best = max(heldout, key=heldout.__getitem__)
        for k in heldout:
            difference = (scores[best] - scores[k]).sum(1)
            if difference.sum() <= difference.std() * np.sqrt(speakers):
                chosen_k = k
                break
    predicted = np.zeros(chosen.shape[1], dtype=bool)
    if heldout and 1 in scores and chosen_k != 1:
        difference = scores[chosen_k] - scores[1]  # [speakers, choices]
        made_by = (chosen >= 0).sum(0)
        spread = np.sqrt(np.maximum((difference ** 2).sum(0) - difference.sum(0) ** 2 / np.maximum(made_by, 1), 0.0))
        predicted = difference.sum(0) > 2.0 * spread
        whole = difference.sum(1)  # each speaker's gain over one kind
        if not predicted.any() or not whole.sum() > 2.0 * whole.std() * np.sqrt(speakers):
            # no choice predicted better, only all of them a little, or the whole not better beyond twice its standard
            # error: the links that made the trait were chosen on these same speakers, and their chance agreement holds
            # in the held-out folds too (and with every number of kinds tried, one of many fits the folds' noise)
            chosen_k = 1
    bic: Dict[int, float] = {}
    fitted = {}
    for k in (ks if not heldout else [chosen_k]):
        fits = [_fit(x, offsets, k, np.random.default_rng([seed, k, r]), iters, smoothing)
                for r in range(restarts if k > 1 else 1)]
        fitted[k] = max(fits, key=lambda fit: fit[0])
        bic[k] = -2.0 * fitted[k][0] + parameters(k) * np.log(speakers)
    if not heldout:
        chosen_k = min(bic, key=bic.__getitem__)
    log_likelihood, prior, log_table = fitted[chosen_k]
    table = np.exp(log_table)
    alternatives = [table[offsets[c]:offsets[c] + sizes[c]].T.copy() for c in range(len(sizes))]
    by_speaker = scores[chosen_k].sum(1) if heldout else np.zeros(0)
    over_one = (scores[chosen_k] - scores[1]).sum(1) if heldout and 1 in scores else np.zeros(0)
    return Kinds(chosen_k, prior, alternatives, log_likelihood, bic, heldout, predicted, by_speaker, over_one)
