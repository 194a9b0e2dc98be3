"""A structure's tables as a learner of its training split can know them: the reference of the oracle's ``--tables
learned`` (docs/speaker_learning.md, "The limit of a learner of the corpus").

The Bayes oracle (:mod:`fairseq_speaker.toy.oracle`) knows the structure's model: for every value of every trait,
the translation it chooses for every phrase (``TraitModel.table``). No learner is told those: it sees the training
split. Where a phrase is rare (the suite's ``items 160``: a phrase said by about 25 of the 400 training speakers, 4
of each style), each style's choice of it is learned from a few speakers: this reference says how much of the limit
that costs, apart from finding the styles themselves.

:class:`LearnedTables` is what the training split shows of the tables to an observer told the values of every
*other* training speaker (more than any learner of the corpus is told), the prior over values, the deviation rate
and the phrases' translations: a uniform prior over each table entry ``c = table[v][i]``, and the words of the
training speakers of value v who said phrase i (each said the same word every time, ``f(y | c)`` = 1 - d for y = c,
d / (n_i - 1) otherwise):

- p(c | D) ∝ Π_{s of v who said i} f(o_s | c): with d > 0, ∝ r^{count_c} where r = (1 - d)(n_i - 1) / d; with
  d = 0, the word they said (uniform where none of them said i);
- the predictive a speaker of value v chooses y for i: p(a_i = y | v, D) = Σ_c p(c | D) f(y | c).

The oracle then uses p(a_i = y | v, D) where it used ``TraitModel.choice``; a speaker's own words enter their own
posterior only, not the tables (the other speakers' tables' entries are independent of them given the values told).
This is the exact Bayes posterior of that observer (a unit test checks it against an enumeration of every table): it
is told more than any learner of the corpus (the other speakers' values), so that no learner does better in
expectation; and less than the Bayes limit's oracle (the tables), so that it does no better than that one. A trained
speaker's own value, which the oracle does not know, is used only to take their words out of the counts; a held-out
speaker's tables are the whole training split's. The entries are exact fractions, as the oracle's.
"""

from fractions import Fraction
from typing import Dict, Iterable, Mapping, Optional, Sequence, Tuple

from fairseq_speaker.analysis.speaker_words import Trait
from fairseq_speaker.toy.structure_model import RANDOM, TOPIC, StructureModel, TraitModel

#: (trait, value, phrase) -> word -> the training speakers of that value who said it for the phrase
Counts = Dict[Tuple[str, str, str], Dict[str, int]]


def _phrases(model: StructureModel) -> Dict[Tuple[str, frozenset], str]:
    """(trait, its words) -> the phrase, to read a trait line back as its phrase."""
    return {(t.name, frozenset(t.words(item))): item for t in model.traits for item in t.items}


class LearnedTables:
    """The tables of ``model``'s traits as the training split shows them (see the module's docstring).

    ``values``: every training speaker's value of each trait (``speakers.json``'s truth); ``observed``: each training
    speaker's speaker words (their ``train.traits`` lines).
    """

    def __init__(self, model: StructureModel, values: Mapping[str, Mapping[str, str]],
                 observed: Mapping[str, Iterable[Trait]]):
        self.model = model
        self._traits: Dict[str, TraitModel] = {t.name: t for t in model.traits}
        phrases = _phrases(model)
        self.counts: Counts = {}
        #: speaker -> the (trait, value, phrase, word) entries they add to the counts, to leave them out
        self._own: Dict[str, Tuple[Tuple[str, str, str, str], ...]] = {}
        for speaker, traits in observed.items():
            said: Dict[Tuple[str, str], str] = {}
            for t in traits:
                if t.trait == TOPIC:
                    continue
                item = phrases.get((t.trait, frozenset((t.expected, *t.alternatives))))
                if item is None:
                    raise ValueError(f"the {t.trait} word {t.expected!r} of {speaker} is no phrase of the structure "
                                     f"{model.name}: the traits and speakers.json are of different corpora")
                said.setdefault((t.trait, item), t.expected)
            truth = values.get(speaker)
            if truth is None:
                raise ValueError(f"speaker {speaker} of the training split has no values in speakers.json: the "
                                 f"traits and speakers.json are of different corpora")
            own = []
            for (trait, item), word in sorted(said.items()):
                value = truth[trait]
                if value == RANDOM:  # a random chooser's words tell nothing of any value's table
                    continue
                entry = self.counts.setdefault((trait, value, item), {})
                entry[word] = entry.get(word, 0) + 1
                own.append((trait, value, item, word))
            self._own[speaker] = tuple(own)
        self._cache: Dict[Tuple[str, str, str, Optional[str]], Dict[str, Fraction]] = {}

    def without(self, speaker: Optional[str]) -> "SpeakerTables":
        """The tables as known to ``speaker``'s oracle: the counts without their own words (None: all of them)."""
        left = {(trait, value, item): word for trait, value, item, word in self._own.get(speaker, ())} \
            if speaker is not None else {}
        return SpeakerTables(self, left)

    def predictive(self, trait: str, value: str, item: str, left_out: Optional[str] = None) -> Dict[str, Fraction]:
        """p(a_i = y | v, D) for every word y of phrase ``item``, the word ``left_out`` taken out of the counts once."""
        key = (trait, value, item, left_out)
        if key not in self._cache:
            model = self._traits[trait]
            words = model.words(item)
            counts = dict(self.counts.get((trait, value, item), {}))
            if left_out is not None:
                counts[left_out] -= 1
            self._cache[key] = _predictive(words, counts, model.deviation)
        return self._cache[key]


class SpeakerTables:
    """:class:`LearnedTables` as one speaker's oracle sees them: their own words left out (``left``: (trait, value,
    phrase) -> their word there)."""

    def __init__(self, tables: LearnedTables, left: Dict[Tuple[str, str, str], str]):
        self.tables = tables
        self.left = left

    def choice(self, trait: str, value: str, item: str, word: str) -> Fraction:
        """p(a_i = word | value, D): what ``TraitModel.choice`` is for the model's own tables."""
        return self.tables.predictive(trait, value, item, self.left.get((trait, value, item)))[word]


def _predictive(words: Sequence[str], counts: Mapping[str, int], deviation: Fraction) -> Dict[str, Fraction]:
    """Σ_c p(c | counts) f(y | c) for every word y, under a uniform prior over the table entry c."""
    n = len(words)
    if deviation == 0:
        said = [w for w in words if counts.get(w, 0) > 0]
        if len(said) > 1:
            raise ValueError(f"speakers of one value said {' and '.join(said)} for one phrase, which a deviation of "
                             f"0 does not allow: the traits and speakers.json are of different corpora")
        return {w: Fraction(int(w == said[0])) if said else Fraction(1, n) for w in words}
    keep, leave = 1 - deviation, deviation / (n - 1)
    if leave == 0:  # deviation 1 with one other translation: every speaker says the other one
        return {w: Fraction(1, n) for w in words}
    ratio = keep / leave
    weights = {c: ratio ** counts.get(c, 0) for c in words}
    total = sum(weights.values())
    return {y: leave + (keep - leave) * weights[y] / total for y in words}
