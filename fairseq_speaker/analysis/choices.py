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
3. **Kinds** (:func:`~fairseq_speaker.analysis.latent_classes.kinds`). Each trait's choices are a mixture of K kinds of
   speaker (a latent class model: Lazarsfeld & Henry, 1968), each kind a distribution over every choice's alternatives,
   fitted by EM over the speakers' choices (a choice a speaker never made is left out of their likelihood). K is chosen
   by prediction (Smyth, "Model selection for probabilistic clustering using cross-validated likelihood", Statistics and
   Computing, 2000): 5-fold cross-validation over the speakers, each held-out speaker's every choice scored given their
   other choices (the leave-one-choice-out posterior predictive, which is how the memory uses the kinds), and of the
   numbers of kinds (every one of :data:`KINDS` tried: the score is not unimodal in K; and where the largest predicts
   best, half as many again, and so on while it does: 12 is no ceiling) the fewest within one standard
   error of the best (Hastie, Tibshirani & Friedman, *The Elements of Statistical Learning*, 2009, 7.10); K = 1 too
   where no single choice is predicted better than by everyone's rates by twice its standard error, or the whole trait
   is not (the links were chosen on the same speakers, so that their chance agreement holds in the held-out folds too).
   K = 1 means: the trait's choices are everyone's.
4. **Traits split by prediction** (:func:`split_traits`). A component of links can join traits that vary
   independently through a few links made by chance (many rare choices, each pair made by few speakers). A trait
   is halved, and each half fitted on its own, unless the whole predicts the held-out speakers' choices better than
   the halves by more than a standard error (the same folds and score); the halves are split again the same way. Two
   halvings are tried: the choices the kinds predict better than everyone's rates (significantly, on the held-out
   speakers) against the rest, and the normalized cut of the links weighted by their evidence (NMI times the speakers
   who made both; the sign of the second eigenvector of the normalized Laplacian, Shi & Malik, "Normalized cuts and
   image segmentation", IEEE TPAMI 2000).
5. **The choices left alone, fitted together** (:func:`_join_the_rest`). Rare choices are seldom made by the same
   speakers, so that no link joins them, though they are marked by one trait: the choices of every trait of one kind
   are fitted again as one trait, kept where its kinds predict held-out speakers (the suite's ``rare-words``: 144 of
   its 160 style phrases, 6 kinds, 0.04 nats a choice better than everyone's rates).
6. **Choices regrouped by what predicts them** (:func:`fairseq_speaker.analysis.regroup.regroup`). Pieces of one
   trait found apart (a style shown on many rare phrases, links made by chance) are joined again: each choice moves to
   the trait whose speakers' posteriors predict it best on held-out speakers, where that is significantly better than
   its own, and the new partition is kept where it predicts the held-out speakers' choices better (the suite's
   ``rare-words``: the held-out log-likelihood of the training speakers' choices from -2463 to -2306 nats).
7. **A trait kept where its kinds predict** (:func:`corpus_kinds`): a trait whose best number of kinds is 1 (its
   kinds predict held-out speakers no better than everyone's rates, :attr:`Kinds.gain` 0) is left out with
   ``keep_everyones=False``, so that the memory's neighbours choose those words.

On the styles corpus of the toy (``--styles 6``) this finds gender (9 choices, 2 kinds), address (4 choices, 2 kinds)
and style (the 16 phrases, 13 with exactly their translations, 6 kinds): the corpus's generative model, which it
was not given. Where the links join independent traits (the suite's ``rare-words``: 53 choices in one component),
the split finds gender apart, and the rare phrases, fitted together, the styles. ``fairseq-speaker-words``
keeps it in the memory of the speakers' words (:mod:`fairseq_speaker.modules.speaker_words`), where a speaker's
posterior over the kinds chooses the rivals they never said.
"""

import functools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse

from fairseq_speaker.analysis.latent_classes import KINDS, Kinds, kinds
from fairseq_speaker.analysis.regroup import regroup

__all__ = ["KINDS", "MAX_CHOICES", "MAX_PAIRS", "MAX_SPEAKERS", "Choice", "Kinds", "choice_groups", "choice_traits",
           "corpus_kinds", "kinds", "nmi_matrix", "speaker_choices", "split_traits", "traits"]

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
    source_words = np.array(sorted(source_vocab, key=source_vocab.__getitem__), dtype=object)
    target_words = sorted(target_vocab, key=target_vocab.__getitem__)
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
    for s, spoken in enumerate(said):
        words = set(spoken)
        for c, choice in enumerate(choices):
            for j, alternative in enumerate(choice.alternatives):
                if alternative in words:
                    out[s, c] = j
                    break
    return out


def nmi_matrix(chosen: np.ndarray, sizes: Optional[Sequence[int]] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Choices x choices: the mutual information of two choices over the speakers who made both, over the smaller of
    their entropies (0 where either is constant there), and how many speakers made both."""
    n = chosen.shape[1]
    if sizes is None:
        sizes = [int(chosen[:, c].max()) + 1 if (chosen[:, c] >= 0).any() else 1 for c in range(n)]
    m = max(sizes) if n else 1
    padded = np.zeros((chosen.shape[0], n, m))  # speakers x choices x alternatives, padded to the most
    rows, cols = np.nonzero(chosen >= 0)
    padded[rows, cols, chosen[rows, cols]] = 1.0
    flat = padded.reshape(chosen.shape[0], n * m)
    joint = (flat.T @ flat).reshape(n, m, n, m)  # [i, a, j, b]: the speakers who said a for i and b for j
    both = joint.sum((1, 3))
    p = joint / np.maximum(both, 1.0)[:, None, :, None]
    pa, pb = p.sum(3, keepdims=True), p.sum(1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        mi = np.where(p > 0, p * np.log(p / (pa * pb)), 0.0).sum((1, 3))
        ha = -np.where(pa > 0, pa * np.log(pa), 0.0).sum((1, 3))
        hb = -np.where(pb > 0, pb * np.log(pb), 0.0).sum((1, 3))
        low = np.minimum(ha, hb)
        nmi = np.where(low > 1e-12, mi / low, 0.0)
    return nmi, both


def traits(chosen: np.ndarray, threshold: float = 0.1, min_both: int = 20) -> List[List[int]]:
    """The traits of the choices of ``chosen`` (:func:`speaker_choices`): groups of choice indices, two choices linked
    when at least ``min_both`` speakers made both and their NMI is above ``threshold``; ordered by first choice."""
    return _components(_links(chosen, threshold, min_both))


def _links(chosen: np.ndarray, threshold: float, min_both: int) -> np.ndarray:
    """Choices x choices: the evidence of two linked choices (:func:`traits`), their NMI times the speakers who made
    both (a link of many speakers weighs more than one that a few made by chance), 0 where they are not linked."""
    nmi, both = nmi_matrix(chosen)
    linked = (both >= min_both) & (nmi > threshold)
    np.fill_diagonal(linked, False)
    return np.where(linked, nmi * both, 0.0)


def _components(links: np.ndarray) -> List[List[int]]:
    """The connected components of a graph of weights ``links`` (0: no edge), ordered by first node."""
    n = links.shape[0]
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in zip(*np.nonzero(np.triu(links, 1))):
        parent[root(int(i))] = root(int(j))
    groups: Dict[int, List[int]] = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values())


def _split(links: np.ndarray) -> Optional[Tuple[List[int], List[int]]]:
    """Two groups of the nodes of a connected graph of weights ``links`` by the sign of the second eigenvector of its
    normalized Laplacian (the relaxed normalized cut, Shi & Malik 2000); None when it cannot be split."""
    if len(links) < 2:
        return None
    links = links + 1e-9 * (1.0 - np.eye(len(links)))  # a node left alone by an earlier split still has a side
    degree = links.sum(1)
    scale = 1.0 / np.sqrt(degree)
    laplacian = np.eye(len(links)) - scale[:, None] * links * scale[None, :]
    _, vectors = np.linalg.eigh(laplacian)
    side = (vectors[:, 1] * scale) >= 0
    if side.all() or not side.any():
        return None
    return np.flatnonzero(side).tolist(), np.flatnonzero(~side).tolist()


def split_traits(chosen: np.ndarray, sizes: Sequence[int], links: np.ndarray, seed: int = 0,
                 joint: Optional[Kinds] = None, **options) -> List[Tuple[List[int], Kinds]]:
    """The choices of ``chosen`` (speakers x choices, ``sizes`` alternatives each, ``links`` their NMI links) as one
    trait, or as the traits of its two halves when those, each fitted on its own, predict the held-out speakers'
    choices as well (:attr:`Kinds.by_speaker`: worse by no more than a standard error of the paired difference over
    the speakers); the halves tried are the choices the kinds predict against the rest (:attr:`Kinds.predicted`) and
    the normalized cut of the links (:func:`_split`), the better kept; each half split again the same way. ``joint``:
    the kinds of all of them, when already fitted."""
    n = chosen.shape[1]
    joint = joint or kinds(chosen, sizes, seed=seed, **options)
    if n < 2 or not joint.heldout:
        return [(list(range(n)), joint)]
    # two ways to halve: the choices the kinds predict and the rest (the rest joined by links made by chance), and
    # the normalized cut of the links (two traits joined by a few links)
    candidates = [_split(links)]
    if 0 < joint.predicted.sum() < n:
        candidates.insert(0, (np.flatnonzero(joint.predicted).tolist(), np.flatnonzero(~joint.predicted).tolist()))
    best, halves, fitted = None, None, None
    for candidate in candidates:
        if candidate is None:
            continue
        models = [kinds(chosen[:, half], [sizes[c] for c in half], seed=seed, **options) for half in candidate]
        apart = functools.reduce(np.add, (model.by_speaker for model in models))
        if best is None or apart.sum() > best.sum():
            best, halves, fitted = apart, candidate, models
    # the halves are kept unless the whole predicts better by more than a standard error of the paired difference
    # over the speakers: links chosen on these speakers agree by chance in the held-out folds too, and a trait
    # whose halves are independent has no more to predict together
    difference = joint.by_speaker - best if best is not None else None
    if difference is None or difference.sum() > difference.std() * np.sqrt(len(difference)):
        return [(list(range(n)), joint)]
    assert halves is not None and fitted is not None  # set with best
    out = []
    for half, model in zip(halves, fitted):
        for part, inner in split_traits(chosen[:, half], [sizes[c] for c in half], links[np.ix_(half, half)], seed,
                                        model, **options):
            out.append(([half[i] for i in part], inner))
    return out


def _evenly(n: int, most: int) -> np.ndarray:
    """At most ``most`` indices of ``range(n)``, evenly spaced."""
    return np.arange(n) if n <= most else np.linspace(0, n - 1, most).round().astype(np.int64)


def corpus_kinds(sources: Sequence[Sequence[str]], targets: Sequence[Sequence[str]], speakers: Sequence[str],
                 max_pairs: int = MAX_PAIRS, max_choices: int = MAX_CHOICES, max_speakers: int = MAX_SPEAKERS,
                 keep_everyones: bool = True) -> List[Tuple[List[Choice], Kinds]]:
    """Every trait of a parallel corpus (arguments as :func:`choice_groups`): its choices and its kinds of speaker
    (the caps: :data:`MAX_PAIRS`, :data:`MAX_CHOICES`, :data:`MAX_SPEAKERS`). Without ``keep_everyones``, only the
    traits whose kinds predict held-out speakers' choices better than everyone's rates (more than one kind); with it
    (the default, as before) the traits of one kind too, each choice the links leave alone among them."""
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
    return [([found[c] for c in trait], model)
            for trait, model in choice_traits(chosen, [len(choice.alternatives) for choice in found], keep_everyones)]


def choice_traits(chosen: np.ndarray, sizes: Sequence[int], keep_everyones: bool = True, threshold: float = 0.1,
                  min_both: int = 20) -> List[Tuple[List[int], Kinds]]:
    """The traits of the choices ``chosen`` (speakers x choices, -1: not made; ``sizes`` alternatives each) and their
    kinds: the components of the links (:func:`traits`), each split by :func:`split_traits`, ordered by first choice;
    the traits of one kind only with ``keep_everyones``. Each trait's choices are in the order of its model's tables."""
    links = _links(chosen, threshold, min_both)
    found = []
    for component in _components(links):
        for part, model in split_traits(chosen[:, component], [sizes[c] for c in component],
                                        links[np.ix_(component, component)]):
            found.append(([component[i] for i in part], model))
    found = regroup(chosen, sizes, _join_the_rest(chosen, sizes, links, found))
    return sorted(((part, model) for part, model in found if model.k > 1 or keep_everyones),
                  key=lambda trait: trait[0])


def _join_the_rest(chosen: np.ndarray, sizes: Sequence[int], links: np.ndarray,
                   found: List[Tuple[List[int], Kinds]]) -> List[Tuple[List[int], Kinds]]:
    """The traits ``found`` with the choices of their traits of one kind fitted again together, as one trait: rare
    choices are seldom made by the same speakers, so that no link joins them (the suite's
    ``rare-words``: 6 styles shown on 160 binary phrases, each made by about 25 of 400 speakers, 144 of them left
    alone), though their kinds, fitted together, predict held-out speakers' choices. It is kept where its kinds predict
    the held-out speakers better than one kind, significantly (:attr:`Kinds.significant`), in one test of the whole:
    halves chosen on the same speakers (:func:`split_traits`) found parts of many kinds among choices made at random, a
    few thousandths of a nat better by chance. Otherwise the traits stay as they were."""
    rest = sorted(c for part, model in found if model.k == 1 for c in part)
    if len(rest) < 2:
        return found
    joined = kinds(chosen[:, rest], [sizes[c] for c in rest])
    if joined.k == 1:  # its kinds predict no better than everyone's rates, significantly (:func:`kinds`)
        return found
    return [(part, model) for part, model in found if model.k > 1] + [(rest, joined)]
