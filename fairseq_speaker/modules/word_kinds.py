"""The kinds of speaker of a trait, as the memory of the speakers' words keeps them
(:mod:`fairseq_speaker.modules.speaker_words`, its module text: "With the traits' kinds of speaker"), and what they
say of a speaker: their posterior over the kinds and the words that tell a kind apart. Learned by
:func:`fairseq_speaker.analysis.choices.corpus_kinds`."""

from dataclasses import dataclass
from typing import List, Tuple

import numpy as np
import scipy.sparse


@dataclass
class TraitKinds:
    """One trait's kinds of speaker (:func:`fairseq_speaker.analysis.choices.corpus_kinds`): the word ids of each of
    its choices' alternatives, the kinds' prior ``[K]`` and, for each choice, p(alternative | kind) ``[K, m]``."""

    choices: List[np.ndarray]
    prior: np.ndarray
    tables: List[np.ndarray]


def kind_posteriors(trait: TraitKinds, said: np.ndarray) -> np.ndarray:
    """Speakers' posteriors over the kinds of ``trait`` ``[N, K]``: post_s(k) ∝ prior(k) times the product, over the
    trait's alternatives a that speaker s said, of p(a | k, c) (the module's equation, as
    :func:`~fairseq_speaker.modules.words_estimate.choices` computes it for one speaker as it decodes). ``said``
    ``[N, V]``: whether each of N speakers said each word of the vocabulary (a boolean or 0/1 array, dense or
    ``scipy.sparse``). All N in one product, to show many speakers' traits at once."""
    alternatives = np.concatenate(trait.choices)
    # a probability of 0 (which the kinds' smoothing does not give) counts as the smallest float, not as log 0
    log_table = np.log(np.maximum(np.concatenate(trait.tables, axis=1), np.finfo(np.float64).tiny))  # [K, A]
    chosen = said[:, alternatives]
    if isinstance(chosen, np.ndarray):
        dense = np.asarray(chosen)
    else:  # a scipy.sparse matrix's columns
        dense = chosen.toarray() if scipy.sparse.issparse(chosen) else np.asarray(chosen)
    log_posterior = np.log(trait.prior)[None, :] + dense.astype(np.float64) @ log_table.T  # [N, K]
    posterior = np.exp(log_posterior - log_posterior.max(axis=1, keepdims=True))
    return posterior / posterior.sum(axis=1, keepdims=True)


def kind_words(trait: TraitKinds, kind: int, most: int = 6) -> np.ndarray:
    """The word ids that tell ``kind`` of ``trait`` from the other kinds: of each choice, the alternative the kind
    makes likeliest, where the kind makes it likelier than everyone does (the kinds' mean, by their prior), the most
    telling first (the largest ratio; of equal ones, the earlier choice); at most ``most``."""
    telling: List[Tuple[float, int, int]] = []
    for words, table in zip(trait.choices, trait.tables):
        best = int(np.argmax(table[kind]))
        ratio = float(table[kind, best]) / max(float(trait.prior @ table[:, best]), np.finfo(np.float64).tiny)
        if ratio > 1.0:
            telling.append((-ratio, len(telling), int(words[best])))
    return np.array([word for _, _, word in sorted(telling)[:most]], dtype=np.int64)
