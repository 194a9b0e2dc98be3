"""A speaker's bias row from the memory of the speakers' words: the equation of
:mod:`fairseq_speaker.modules.speaker_words` (its module text), computed on an index of everyone's words.

:func:`row_bias` is bias_s over the vocabulary: the speaker's own words, their neighbours' (the ``k`` speakers most
like them, :func:`nearest`) and everyone's, interpolated and shrunk by how many words the speaker said; with the
traits' kinds of speaker, the alternatives of each choice ranked by the speaker's posterior predictive
(:func:`choices`). Its siblings: the options (:mod:`~fairseq_speaker.modules.words_options`), the index the
estimate reads (:mod:`~fairseq_speaker.modules.words_index`), the kinds (:mod:`~fairseq_speaker.modules.word_kinds`)
and the fusion of a row into a generation step (:mod:`~fairseq_speaker.modules.words_fusion`);
:class:`~fairseq_speaker.modules.speaker_words.SpeakerWords` chooses the index and keeps the rows made.
"""

from typing import List, Sequence, Tuple

import numpy as np

from fairseq_speaker.modules.word_kinds import TraitKinds
from fairseq_speaker.modules.words_index import WordsIndex
from fairseq_speaker.modules.words_options import WordOptions


def row_bias(row: int, ids: np.ndarray, index: WordsIndex, said_by: Sequence[np.ndarray], options: WordOptions,
             kinds: Sequence[TraitKinds], vocab: int) -> np.ndarray:
    """Speaker ``row``'s bias over the ``vocab`` words (float64), the speaker having said the words ``ids`` (sorted,
    distinct, at least one): their neighbours found by ``index``, whose rows said the words ``said_by``."""
    o = options
    p, anyone = index.p, index.anyone
    query = np.zeros(vocab, dtype=np.float32)
    query[ids] = index.idf[ids] / max(float(index.norms[row]), 1e-12)  # the speaker's unit row
    similarity = index.similarity(query)
    similarity[row] = 0.0
    near, weights = nearest(similarity, o.k, o.power)
    neighbours = p  # a speaker like no other: everyone's rate
    if len(near):
        neighbours = np.zeros(vocab)
        for t, weight in zip(near.tolist(), weights.tolist()):  # k rows of distinct ids each
            neighbours[said_by[t]] += weight
        neighbours /= weights.sum()
    own = np.zeros(vocab, dtype=np.float64)
    own[ids] = 1.0
    predicted = choices(kinds, own > 0)
    if predicted:  # each choice's votes shared by the speaker's posterior predictive
        neighbours = np.array(neighbours, dtype=np.float64)
        for words, prediction in predicted:
            neighbours[words] = prediction * neighbours[words].sum()
    rate = o.own * own + o.neighbours * neighbours + (1.0 - o.own - o.neighbours) * p
    said = len(ids)
    bias = o.weight * said / (said + o.evidence) * np.log(np.maximum(rate, 1e-12) / p)
    if o.rank_choices == "posterior" and predicted:
        # the choices rank the rivals: any other word is only ever raised (that a speaker of a few sentences
        # has not said it yet is no evidence that they would not, and lowered, it adds up along a hypothesis)
        np.maximum(bias, 0.0, out=bias)
        for words, prediction in predicted:
            r = own[words] + o.kinds_prior * prediction
            bias[words] = bias[words].max() + o.weight * np.log(r / r.max())
    bias[~anyone] = 0.0
    return bias


def choices(kinds: Sequence[TraitKinds], said: np.ndarray) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Every choice of the traits' ``kinds``: its alternatives' word ids and the speaker's posterior predictive over
    them, given the alternatives they said (``said``: a mask over the vocabulary)."""
    out: List[Tuple[np.ndarray, np.ndarray]] = []
    for trait in kinds:
        log_posterior = np.log(trait.prior)
        for words, table in zip(trait.choices, trait.tables):
            log_posterior = log_posterior + np.log(table[:, said[words]]).sum(1)
        posterior = np.exp(log_posterior - log_posterior.max())
        posterior /= posterior.sum()
        out.extend((words, posterior @ table) for words, table in zip(trait.choices, trait.tables))
    return out


def nearest(similarity: np.ndarray, k: int, power: float):
    """The (at most) ``k`` rows of largest positive ``similarity`` (of equal ones, the earlier rows) and their
    weights sim^``power``, not normalized: relative to the most similar row's (its weight 1), so that a large power
    gives the nearest rows all the weight instead of underflowing every weight to 0 (empty arrays when no row is
    similar)."""
    similarity = np.maximum(similarity, 0.0)
    k = min(k, int((similarity > 0).sum()))
    if k == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    kth = np.partition(similarity, len(similarity) - k)[len(similarity) - k]  # the k-th largest
    above = np.flatnonzero(similarity > kth)
    near = np.concatenate([above, np.flatnonzero(similarity == kth)[:k - len(above)]])  # ties: earlier rows
    return near, (similarity[near] / similarity[near].max()) ** power
