"""The index of the memory of the speakers' words (:mod:`fairseq_speaker.modules.speaker_words`): every speaker's
words as a speakers x words matrix of ones, the words' idf and rates, and the cosine similarities of a speaker to all
others, kept as a base and the rows changed since (its module text: "The known speakers stay as they were built")."""

from typing import Iterable, Sequence

import numpy as np
import scipy.sparse


def _ones(words: Sequence[np.ndarray], vocab: int) -> scipy.sparse.csr_matrix:
    """The rows-by-words matrix of ones of ``words`` (each row's sorted distinct word ids)."""
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    indptr = np.zeros(len(words) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.concatenate(words) if len(words) else np.zeros(0, dtype=np.int64)
    return scipy.sparse.csr_matrix((np.ones(len(indices), dtype=np.float32), indices, indptr),
                                   shape=(len(words), vocab))


def _counts(x: scipy.sparse.csr_matrix):
    """How many rows of ``x`` said each word, and how many said any."""
    return np.bincount(x.indices, minlength=x.shape[1])[:x.shape[1]], int(np.count_nonzero(np.diff(x.indptr)))


class WordsBase:
    """All speakers' words at one moment, as a speakers x words matrix of ones, with how many speakers said each word
    and how many said any: what an index starts from, never changed."""

    def __init__(self, words: Sequence[np.ndarray], vocab: int):
        self.speakers = len(words)
        self.x = _ones(words, vocab)
        self.df, self.said = _counts(self.x)

    def row(self, i: int) -> np.ndarray:
        return self.x.indices[self.x.indptr[i]:self.x.indptr[i + 1]]


class WordsIndex:
    """The speakers' words at one moment, as the estimate reads them: idf(w), p(w), which words anyone said, every
    speaker's norm of idf-weighted words, and the cosine similarities to a query. The base's matrix and the rows
    ``changed`` since (their words now) make it, so a change costs one product over the words, not a build. Never
    changed once made."""

    def __init__(self, base: WordsBase, words: Sequence[np.ndarray], changed: Iterable[int], vocab: int):
        self.speakers = len(words)
        self.base = base
        self.rows = np.array(sorted(r for r in changed if r < self.speakers), dtype=np.int64)
        self.x = _ones([words[r] for r in self.rows.tolist()], vocab)  # the changed rows' words now
        before = _ones([base.row(r) for r in self.rows.tolist() if r < base.speakers], vocab)  # and at the base
        (df_now, said_now), (df_before, said_before) = _counts(self.x), _counts(before)
        df = base.df + df_now - df_before
        said = max(base.said + said_now - said_before, 1)
        self.idf = np.log(said / np.maximum(df, 1)).astype(np.float32)
        self.p = np.maximum(df, 1) / said
        self.anyone = df > 0
        squares = np.square(self.idf)
        self.norms = np.sqrt(self._products(squares))

    def _products(self, query: np.ndarray) -> np.ndarray:
        """Every speaker's sum of ``query`` over the words they said ``[speakers]``."""
        out = np.zeros(self.speakers, dtype=np.float32)
        shared = min(self.speakers, self.base.speakers)
        out[:shared] = (self.base.x @ query)[:shared]
        if len(self.rows):
            out[self.rows] = self.x @ query
        return out

    def similarity(self, query: np.ndarray) -> np.ndarray:
        """Every speaker's cosine with the idf-weighted unit ``query`` ``[V]``: their idf-weighted words, made unit,
        times ``query`` (0 for a speaker of no words)."""
        return self._products(query * self.idf) / np.maximum(self.norms, 1e-12)
