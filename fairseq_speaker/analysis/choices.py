"""The word choices a corpus's speakers make, and the traits that group them (docs/speaker_learning.md, "The choices
a corpus shows"; ``scripts/speaker_choices.py``).

A speaker's words are partly the source's and partly their own: "the bike" is ``le vélo``, ``la bicyclette`` or
``la bécane``, whoever translates it, and which one is the speaker's choice. Three steps find those choices in a
parallel corpus with speaker labels, without being told what they are:

1. **Choice groups** (:func:`choice_groups`). Each target word is anchored to the source word it goes with best (the
   largest Dice coefficient 2 c(e, f) / (c(e) + c(f)) over sentence pairs, Dice 1945; the word alignment of
   Smadja et al., 1996). Of the target words of one anchor, those said together by the same speakers (more than
   ``max_shared`` of the time) are dropped, the one said with most of the others first (the article every
   translation takes); the rest, which no speaker says together, are the alternatives of one choice: ``bike`` ->
   vélo, bicyclette, bécane. A word with no rival (``dog`` -> chien) is no choice.
2. **Traits** (:func:`traits`). Choices that speakers make together belong to one trait: a speaker who says ``le
   vélo`` says ``le boulot``, one who says ``fatiguée`` says ``contente``. Two choices are linked when the normalized
   mutual information of what the speakers who made both chose is above ``threshold``; a trait is a connected
   component of the links.
3. **Kinds** (:func:`kinds`). Each trait's choices are a mixture of K kinds of speaker (a latent class model:
   Lazarsfeld & Henry, 1968), each kind a distribution over every choice's alternatives, fitted by EM over the
   speakers' choices (a choice a speaker never made is left out of their likelihood), K chosen by BIC.

On the styles corpus of the toy (``--styles 6``) this finds gender (8 choices, 2 kinds), address (4 choices, 2 kinds)
and style (the 16 phrases, 13 with exactly their translations, 6 kinds): the corpus's generative model, which it
was not given. ``fairseq-speaker-words`` keeps it in the memory of the speakers' words
(:mod:`fairseq_speaker.modules.speaker_words`), where a speaker's posterior over the kinds chooses the rivals they
never said.
"""

from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse

#: the numbers of kinds :func:`kinds` tries for a trait
KINDS = (1, 2, 3, 4, 6, 8, 12)
#: :func:`corpus_kinds` reads at most MAX_PAIRS sentence pairs for the anchors, keeps the MAX_CHOICES choices the
#: most speakers make, and fits the traits and kinds on at most MAX_SPEAKERS speakers (each evenly spaced through the
#: corpus), so that a large corpus costs what a mid-sized one does
MAX_PAIRS = 200_000
MAX_CHOICES = 200
MAX_SPEAKERS = 20_000


@dataclass
class Choice:
    """One choice: the source word it translates (``anchor``) and its alternatives, the target words."""

    anchor: str
    alternatives: Tuple[str, ...]


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


def _presence(rows: Sequence[Sequence[str]], vocab: Dict[str, int]) -> scipy.sparse.csr_matrix:
    """Rows x words: 1 where the row has the word."""
    indptr, indices = [0], []
    for row in rows:
        ids = sorted({vocab.setdefault(w, len(vocab)) for w in row})
        indices.extend(ids)
        indptr.append(len(indices))
    return scipy.sparse.csr_matrix((np.ones(len(indices), dtype=np.float64), indices, indptr),
                                   shape=(len(rows), len(vocab)))


def choice_groups(sources: Sequence[Sequence[str]], targets: Sequence[Sequence[str]], speakers: Sequence[str],
                  min_dice: float = 0.2, max_shared: float = 0.25) -> List[Choice]:
    """The choices of a parallel corpus (tokenized sentences ``sources``, ``targets``; ``speakers`` the label of
    each pair), ordered by anchor (see the module's docstring)."""
    if not len(sources) == len(targets) == len(speakers):
        raise ValueError(f"{len(sources)} source sentences, {len(targets)} targets and {len(speakers)} speaker labels")
    source_vocab: Dict[str, int] = {}
    target_vocab: Dict[str, int] = {}
    e = _presence(sources, source_vocab)
    f = _presence(targets, target_vocab)
    together = (e.T @ f).tocsc()  # source word x target word: the pairs that have both
    ce, cf = np.asarray(e.sum(0)).ravel(), np.asarray(f.sum(0)).ravel()
    source_words = np.array(sorted(source_vocab, key=source_vocab.get), dtype=object)
    target_words = sorted(target_vocab, key=target_vocab.get)
    by_anchor: Dict[str, List[int]] = {}
    for t in range(len(target_words)):
        rows = together.indices[together.indptr[t]:together.indptr[t + 1]]
        if not len(rows):
            continue
        dice = 2 * together.data[together.indptr[t]:together.indptr[t + 1]] / (ce[rows] + cf[t])
        best = int(np.argmax(dice))
        if dice[best] >= min_dice:
            by_anchor.setdefault(source_words[rows[best]], []).append(t)
    labels = {name: i for i, name in enumerate(OrderedDict.fromkeys(speakers))}
    said = scipy.sparse.csr_matrix((np.ones(len(speakers)), ([labels[s] for s in speakers], range(len(speakers)))),
                                   shape=(len(labels), len(speakers))) @ f
    said.data[:] = 1.0  # speaker x target word: they said it
    out = []
    for anchor in sorted(by_anchor):
        words = by_anchor[anchor]
        if len(words) < 2:
            continue
        column = said[:, words].toarray()
        users = column.sum(0)
        both = column.T @ column
        clash = both > max_shared * np.minimum.outer(users, users)  # said together: not rivals
        np.fill_diagonal(clash, False)
        rivals = list(range(len(words)))
        while len(rivals) > 1 and clash[np.ix_(rivals, rivals)].any():
            # the word said with most of the others goes (the article every translation of the anchor takes), of
            # equal ones the one more speakers say
            counts = clash[np.ix_(rivals, rivals)].sum(1)
            rivals.pop(max(range(len(rivals)), key=lambda i: (counts[i], users[rivals[i]])))
        if len(rivals) >= 2:
            out.append(Choice(anchor, tuple(sorted(target_words[words[i]] for i in rivals))))
    return out


def speaker_choices(choices: Sequence[Choice], said: Sequence[Sequence[str]]) -> np.ndarray:
    """Speakers x choices: the index of the alternative each speaker said (``said[s]``: their words), -1 where they
    said none (of several, the first)."""
    out = -np.ones((len(said), len(choices)), dtype=np.int64)
    for s, words in enumerate(said):
        words = set(words)
        for c, choice in enumerate(choices):
            for j, alternative in enumerate(choice.alternatives):
                if alternative in words:
                    out[s, c] = j
                    break
    return out


def _nmi(a: np.ndarray, b: np.ndarray) -> float:
    """Mutual information of two choices over the same speakers, over the smaller of their entropies."""
    joint = np.zeros((a.max() + 1, b.max() + 1))
    np.add.at(joint, (a, b), 1.0)
    joint /= joint.sum()
    pa, pb = joint.sum(1), joint.sum(0)
    nz = joint > 0
    mi = float((joint[nz] * np.log(joint[nz] / np.outer(pa, pb)[nz])).sum())
    ha = float(-(pa[pa > 0] * np.log(pa[pa > 0])).sum())
    hb = float(-(pb[pb > 0] * np.log(pb[pb > 0])).sum())
    return mi / min(ha, hb) if min(ha, hb) > 0 else 0.0


def traits(chosen: np.ndarray, threshold: float = 0.1, min_both: int = 20) -> List[List[int]]:
    """The traits of the choices of ``chosen`` (:func:`speaker_choices`): groups of choice indices, two choices linked
    when at least ``min_both`` speakers made both and their NMI is above ``threshold``; ordered by first choice."""
    n = chosen.shape[1]
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            both = (chosen[:, i] >= 0) & (chosen[:, j] >= 0)
            if both.sum() >= min_both and _nmi(chosen[both, i], chosen[both, j]) > threshold:
                parent[root(i)] = root(j)
    groups: Dict[int, List[int]] = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values())


def _fit(chosen: np.ndarray, sizes: Sequence[int], k: int, rng: np.random.Generator, iters: int,
         smoothing: float) -> Tuple[float, np.ndarray, List[np.ndarray]]:
    speakers = chosen.shape[0]
    resp = rng.dirichlet(np.ones(k), size=speakers)
    for _ in range(iters + 1):
        prior = (resp.sum(0) + 1.0) / (speakers + k)
        tables = []
        for c, size in enumerate(sizes):
            counts = np.stack([resp[chosen[:, c] == j].sum(0) for j in range(size)], 1) + smoothing
            tables.append(counts / counts.sum(1, keepdims=True))
        logp = np.tile(np.log(prior), (speakers, 1))
        for c, table in enumerate(tables):
            made = chosen[:, c] >= 0
            logp[made] += np.log(table[:, chosen[made, c]]).T
        total = np.logaddexp.reduce(logp, axis=1)
        resp = np.exp(logp - total[:, None])
    return float(total.sum()), prior, tables


def kinds(chosen: np.ndarray, sizes: Sequence[int], ks: Sequence[int] = KINDS, restarts: int = 8, iters: int = 100,
          smoothing: float = 0.5, seed: int = 0) -> Kinds:
    """The latent class model of one trait: ``chosen`` speakers x the trait's choices (-1: not made), ``sizes`` the
    number of alternatives of each; of ``ks`` kinds, the number with the lowest BIC, each fitted by EM from
    ``restarts`` random starts (the best likelihood kept)."""
    speakers = chosen.shape[0]
    best: Optional[Kinds] = None
    bic: Dict[int, float] = {}
    for k in ks:
        fits = [_fit(chosen, sizes, k, np.random.default_rng([seed, k, r]), iters, smoothing) for r in range(restarts)]
        log_likelihood, prior, tables = max(fits, key=lambda fit: fit[0])
        parameters = (k - 1) + k * sum(size - 1 for size in sizes)
        bic[k] = -2.0 * log_likelihood + parameters * np.log(speakers)
        if best is None or bic[k] < best.bic[best.k]:
            best = Kinds(k, prior, tables, log_likelihood, bic)
    return best


def _evenly(n: int, most: int) -> np.ndarray:
    """At most ``most`` indices of ``range(n)``, evenly spaced."""
    return np.arange(n) if n <= most else np.linspace(0, n - 1, most).round().astype(np.int64)


def corpus_kinds(sources: Sequence[Sequence[str]], targets: Sequence[Sequence[str]], speakers: Sequence[str],
                 max_pairs: int = MAX_PAIRS, max_choices: int = MAX_CHOICES, max_speakers: int = MAX_SPEAKERS
                 ) -> List[Tuple[List[Choice], Kinds]]:
    """Every trait of a parallel corpus (arguments as :func:`choice_groups`): its choices and its kinds of speaker
    (the caps: :data:`MAX_PAIRS`, :data:`MAX_CHOICES`, :data:`MAX_SPEAKERS`)."""
    read = _evenly(len(sources), max_pairs)
    found = choice_groups([sources[i] for i in read], [targets[i] for i in read], [speakers[i] for i in read])
    said: "OrderedDict[str, set]" = OrderedDict()
    for words, speaker in zip(targets, speakers):
        said.setdefault(speaker, set()).update(words)
    everyone = list(said.values())
    chosen = speaker_choices(found, [everyone[i] for i in _evenly(len(everyone), max_speakers)])
    if len(found) > max_choices:
        kept = sorted(np.argsort(-(chosen >= 0).sum(0), kind="stable")[:max_choices].tolist())
        found, chosen = [found[c] for c in kept], chosen[:, kept]
    return [([found[c] for c in trait], kinds(chosen[:, trait], [len(found[c].alternatives) for c in trait]))
            for trait in traits(chosen)]
