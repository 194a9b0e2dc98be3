"""Traits regrouped by what predicts each choice (:func:`regroup`, the last step of
:func:`fairseq_speaker.analysis.choices.choice_traits`).

Links and halvings (:mod:`fairseq_speaker.analysis.choices`) work on pairs of choices, and a trait's kinds on its own
choices; where a style is shown on many rare phrases, each made by a few speakers, it falls apart into pieces, each
fitted with kinds of its own, and a few of its phrases join another trait through links made by chance (the suite's
``rare-words``: 16 of its 160 style phrases in the address's trait, the other 144 a trait of their own), though one
speaker's style predicts every piece. Each choice is scored under every trait of several kinds: how much better than
everyone's rates the speakers' posteriors over that trait's kinds predict it on held-out speakers; it moves to the trait
that predicts it best where the gain over its own trait (over everyone's rates, for a choice of a trait of one kind) is
beyond :data:`MOVE_ERRORS` standard errors, paired over the speakers who made it; the traits that changed are fitted
again, and the new partition kept only where it predicts the held-out speakers' choices better than the old."""

from typing import Dict, List, Sequence, Tuple

import numpy as np

from fairseq_speaker.analysis.latent_classes import FOLDS, Kinds, _folds, _onehot, kinds

ROUNDS = 8
#: a choice moves where its gain is beyond this many standard errors. Chosen on the design structure ``rare-words``:
#: with 2, one round moved one phrase (the style's held-out gain 0.042 -> 0.057 nats a choice); with 0, noise moved
#: rare style phrases to gender and address; with 1, 0.085 (docs/speaker_learning.md)
MOVE_ERRORS = 1.0


def _log_tables(model: Kinds) -> np.ndarray:
    """A trait's kinds' log-probability of each alternative of its choices, [alternatives, k] (as :func:`_fit`)."""
    return np.log(np.concatenate([table.T for table in model.alternatives], axis=0))


def _predictive_gains(chosen: np.ndarray, sizes: Sequence[int], part: List[int], model: Kinds, fold: np.ndarray,
                      smoothing: float = 0.5) -> np.ndarray:
    """How much better a speaker's posterior over the kinds of the trait ``part`` (``model``) predicts each choice of
    ``chosen`` than everyone's rates: speakers x choices, nats (0 where the speaker did not make it). A choice of the
    trait is predicted from the speaker's posterior without it; the table of each choice given the kinds is fitted on
    the other folds' speakers (``fold``), weighted by their posteriors, so that a choice is scored on speakers its
    table never saw."""
    x, offsets, column = _onehot(chosen[:, part], [sizes[c] for c in part])
    log_table = _log_tables(model)
    joint = np.log(model.prior) + x @ log_table  # [speakers, k]
    where = {c: i for i, c in enumerate(part)}
    out = np.zeros(chosen.shape, dtype=np.float64)
    for c in range(chosen.shape[1]):
        made = chosen[:, c] >= 0
        if not made.any():
            continue
        log_post = joint
        if c in where:
            i = where[c]
            log_post = joint - np.where(made[:, None], log_table[np.maximum(column[:, i], 0)], 0.0)
        post = np.exp(log_post - log_post.max(1, keepdims=True))
        post /= post.sum(1, keepdims=True)
        said = np.zeros((chosen.shape[0], sizes[c]))
        said[made, chosen[made, c]] = 1.0
        for f in np.unique(fold):
            train, test = (fold != f) & made, (fold == f) & made
            if not test.any():
                continue
            everyone = said[train].sum(0) + smoothing
            rates = everyone / everyone.sum()
            counts = post[train].T @ said[train] + smoothing * sizes[c] * rates[None, :]  # [k, alternatives]
            table = counts / counts.sum(1, keepdims=True)
            picked = chosen[test, c]
            out[test, c] = np.log((post[test] * table[:, picked].T).sum(1)) - np.log(rates[picked])
    return out


def _total(found: List[Tuple[List[int], Kinds]]) -> float:
    """The held-out log-likelihood of a partition of the choices into traits: every speaker's every choice predicted
    from their other choices of its trait (:attr:`Kinds.by_speaker`, the same folds for every trait)."""
    return float(sum(model.by_speaker.sum() for _, model in found))


def regroup(chosen: np.ndarray, sizes: Sequence[int], found: List[Tuple[List[int], Kinds]], seed: int = 0,
             rounds: int = ROUNDS) -> List[Tuple[List[int], Kinds]]:
    """The traits ``found`` with each choice moved to the trait of several kinds whose speakers' posteriors predict it
    best (:func:`_predictive_gains`, on held-out speakers), where it predicts it better than the trait it is in (a
    trait of one kind: everyone's rates) by :data:`MOVE_ERRORS` standard errors; the traits whose choices changed are
    fitted
    again (:func:`kinds`), and the new partition kept only where it predicts the held-out speakers' choices better
    (:func:`_total`). Links and halvings work on pairs of choices, and a trait's kinds on its own choices: a style shown
    on many rare phrases falls apart into pieces, each with kinds of its own (and some of its phrases join another
    trait through links made by chance), though one speaker's style predicts every piece. Repeated up to ``rounds``
    times, until no choice moves."""
    fold = _folds(chosen.shape[0], FOLDS, seed)
    for _ in range(rounds):
        several = [i for i, (_, model) in enumerate(found) if model.k > 1]
        if not several:
            break
        owner = {c: i for i, (part, _) in enumerate(found) for c in part}
        gains = np.stack([_predictive_gains(chosen, sizes, found[i][0], found[i][1], fold).astype(np.float32)
                          for i in several])  # [traits of several kinds, speakers, choices]
        total = gains.sum(1)
        moved = dict(owner)
        for c, i in owner.items():
            row = int(np.argmax(total[:, c]))
            if several[row] == i:
                continue
            # the gain over the trait it is in (everyone's rates for a trait of one kind), paired over the speakers
            # who made it, beyond MOVE_ERRORS standard errors
            difference = gains[row, :, c] - (gains[several.index(i), :, c] if i in several else 0.0)
            difference = difference[chosen[:, c] >= 0]
            if difference.sum() > MOVE_ERRORS * difference.std() * np.sqrt(len(difference)):
                moved[c] = several[row]
        if moved == owner:
            break
        groups: Dict[int, List[int]] = {}
        for c in sorted(moved):
            groups.setdefault(moved[c], []).append(c)
        regrouped = [(part, found[i][1]) if part == found[i][0] else (part, kinds(chosen[:, part],
                                                                                  [sizes[c] for c in part], seed=seed))
                     for i, part in sorted(groups.items())]
        if _total(regrouped) <= _total(found):
            break
        found = regrouped
    return found
