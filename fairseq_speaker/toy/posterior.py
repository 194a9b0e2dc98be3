"""What a speaker's sentences tell the Bayes oracle of the toy corpus (:mod:`fairseq_speaker.toy.oracle`): the
posterior over the speaker's style (the styles mode, :class:`SpeakerPosterior`) or over the joint of their traits'
values (a structure of the corpus suite, :class:`StructurePosterior`), the posterior predictive of each of their words
and the Bayes decision's score, in exact fractions (:func:`speaker_posterior` chooses by the model). The equations are
the oracle's module text (``Bayes``) and :class:`StructurePosterior`'s. Its siblings: :mod:`fairseq_speaker.toy.oracle`
(the oracles' scores of a corpus's splits, and the command) and :mod:`fairseq_speaker.toy.learned_tables` (the tables
as the training split shows them, which :class:`StructurePosterior` may read instead of the model's).
"""

from fractions import Fraction
from typing import Dict, Iterable, List, Optional, Set, Tuple

from fairseq_speaker.analysis.speaker_words import Trait
from fairseq_speaker.toy.corpus import Styles, style_word
from fairseq_speaker.toy.learned_tables import SpeakerTables
from fairseq_speaker.toy.structure_model import RANDOM, TOPIC, StructureModel, TraitModel

#: the trait of the styles mode's words
STYLE = "style"
#: how a Bayes decision is scored: against the test's word, or by its posterior probability of being right
SCORES = ("decision", "posterior")


def _fraction(x: float) -> Fraction:
    """The number a float was written as (0.1 is 1/10, not the binary fraction nearest to it)."""
    return Fraction(str(x))


class SpeakerPosterior:
    """What a speaker's sentences D_s tell the Bayes oracle: the traits they reveal, the style word they
    said for each phrase, and the posterior over their style.

    ``styles`` is the generative model (None: a corpus without styles, whose ``style`` words then
    cannot be scored); ``traits`` the speaker words of the speaker's sentences D_s, in any order.
    """

    def __init__(self, styles: Optional[Styles], traits: Iterable[Trait] = ()):
        self.styles = styles
        self.revealed: Set[str] = set()
        #: phrase -> the style word the speaker said for it (the same every time)
        self.said: Dict[str, str] = {}
        for t in traits:
            if t.trait != STYLE:
                self.revealed.add(t.trait)
                continue
            item = self._item(t)
            if self.said.setdefault(item, t.expected) != t.expected:
                raise ValueError(f"the speaker said both {self.said[item]!r} and {t.expected!r} for {item!r}: a "
                                 f"speaker of the styles corpus says the same translation every time")
        self._words = {} if styles is None else {
            item: [style_word(o) for o in options] for item, options in styles.items.items()}
        self._weights = None if styles is None else self._style_weights()

    def _item(self, t: Trait) -> str:
        if self.styles is None:
            raise ValueError(f"a style word ({t.expected!r}) but no styles model: read the corpus's speakers.json")
        options = {t.expected, *t.alternatives}
        for item, translations in self.styles.items.items():
            if {style_word(o) for o in translations} == options:
                return item
        raise ValueError(f"the style word {t.expected!r} (rivals {', '.join(t.alternatives)}) is no phrase of "
                         f"the styles model: the traits and speakers.json are of different corpora")

    def _choice(self, k: int, item: str, word: str) -> Fraction:
        """p(a_i = word | style k)."""
        d = _fraction(self.styles.deviation)
        if word == style_word(self.styles.table[k][item]):
            return 1 - d
        return d / (len(self.styles.items[item]) - 1)

    def _style_weights(self) -> List[Fraction]:
        weights = []
        for k, prior in enumerate(self.styles.prior):
            weight = _fraction(prior)
            for item, word in self.said.items():
                weight *= self._choice(k, item, word)
            weights.append(weight)
        if not sum(weights) > 0:
            raise ValueError(f"the style words {self.said} are impossible under every style (deviation "
                             f"{self.styles.deviation}): the traits and speakers.json are of different corpora")
        return weights

    def style_posterior(self) -> List[Fraction]:
        """q_s(k) for every style k."""
        total = sum(self._weights)
        return [w / total for w in self._weights]

    def predictive(self, t: Trait) -> Dict[str, Fraction]:
        """p(y | D_s) over the words of a test sentence's speaker word ``t`` (its expected word and rivals)."""
        words = [t.expected, *t.alternatives]
        if t.trait != STYLE:
            if t.trait in self.revealed:
                return {w: Fraction(int(w == t.expected)) for w in words}
            return {w: Fraction(1, len(words)) for w in words}
        item = self._item(t)
        if item in self.said:
            return {w: Fraction(int(w == self.said[item])) for w in self._words[item]}
        q = self.style_posterior()
        return {w: sum(q[k] * self._choice(k, item, w) for k in range(len(q))) for w in self._words[item]}

    def score(self, t: Trait, score: str = "decision") -> Fraction:
        """The Bayes decision's accuracy on the test word ``t``: ``decision``, 1/|A| if its expected word is
        in the argmax set A of the predictive (else 0); ``posterior``, the predictive's maximum."""
        p = self.predictive(t)
        best = max(p.values())
        if score == "posterior":
            return best
        if score != "decision":
            raise ValueError(f"score {score!r}: one of {', '.join(SCORES)}")
        argmax = [w for w, v in p.items() if v == best]
        return Fraction(int(t.expected in argmax), len(argmax))


class StructurePosterior:
    """The Bayes oracle of a structure of the corpus suite (:mod:`fairseq_speaker.toy.structures`): what a
    speaker's sentences D_s tell of their traits, all at once.

    The speaker's values z = (z_1, ..., z_T), one per trait, are drawn from the joint prior π(z) (a product when
    the traits are independent, not when an address or a gender belongs to a style). A value v of trait t either
    fixes a choice a_i per phrase i, once (p(a_i = y | v) as in the styles mode, with the trait's deviation rate),
    or is ``random``: every occurrence drawn uniformly anew. With o_i the word said for phrase i in D_s and m_i
    the times it was said:

    - L_t(v) = Π_{i said} p(a_i = o_i | v) (0 if i was said with two words) for a fixed value; Π_{i said}
      (1 / n_i)^{m_i} for ``random`` (one factor per occurrence, not per phrase);
    - the posterior over the joint: q_s(z) ∝ π(z) Π_t L_t(z_t), and its marginal q_t(v) per trait;
    - the predictive of a word of phrase i of trait t: Σ_v q_t(v) p(y | v, D_s), where p(y | v, D_s) is
      1[y = o_i] if the speaker said i (fixed values), p(a_i = y | v) if not, and 1 / n_i for ``random``.

    Words of the trait ``topic`` are chosen by the topic of their sentence, which the source shows: the oracle
    predicts them from the source (right, p = 1) and does not count them as evidence of the speaker. Decisions
    and scores as :class:`SpeakerPosterior`'s; the arithmetic is exact.
    """

    def __init__(self, model: StructureModel, traits: Iterable[Trait] = (), tables: Optional[SpeakerTables] = None):
        self.model = model
        #: the tables learned from the training split (:mod:`fairseq_speaker.toy.learned_tables`), or None: the model's
        self.tables = tables
        self._items = {(t.name, frozenset(t.words(item))): item for t in model.traits for item in t.items}
        self._topic_words = {frozenset(style_word(o) for o in options) for options in model.topic_items.values()}
        #: trait -> phrase -> the words said for it, one per occurrence
        self.said: Dict[str, Dict[str, List[str]]] = {t.name: {} for t in model.traits}
        for t in traits:
            if t.trait == TOPIC:
                self._topic(t)
                continue
            self.said[t.trait].setdefault(self._item(t), []).append(t.expected)
        names = [t.name for t in model.traits]
        likelihood = {t.name: {v: self._likelihood(t, v) for v in t.values} for t in model.traits}
        # unnormalized, and normalized once where asked: exact either way, and sums of fractions of one
        # denominator's factors stay cheap
        self._weights = {z: p * _product(likelihood[name][v] for name, v in zip(names, z))
                         for z, p in model.joint.items()}
        self._total = sum(self._weights.values())
        if not self._total > 0:
            raise ValueError(f"the speaker words {self.said} are impossible under the structure {model.name}: the "
                             f"traits and speakers.json are of different corpora")
        self._mass: Dict[str, Dict[str, Fraction]] = {name: {v: Fraction(0) for v in t.values}
                                                      for name, t in zip(names, model.traits)}
        for z, w in self._weights.items():
            if w:
                for name, v in zip(names, z):
                    self._mass[name][v] += w
        self._predictive: Dict[Tuple[str, str], Dict[str, Fraction]] = {}

    @property
    def joint(self) -> Dict[Tuple[str, ...], Fraction]:
        """q_s(z) for every joint value z of the traits (in the order of the model's traits)."""
        return {z: w / self._total for z, w in self._weights.items()}

    @property
    def marginals(self) -> Dict[str, Dict[str, Fraction]]:
        """q_t(v) for every value v of every trait t."""
        return {name: {v: m / self._total for v, m in mass.items()} for name, mass in self._mass.items()}

    def _item(self, t: Trait) -> str:
        if t.trait not in self.said:
            raise ValueError(f"a word of the trait {t.trait!r} ({t.expected!r}), which the structure "
                             f"{self.model.name} does not have: the traits and speakers.json are of different corpora")
        item = self._items.get((t.trait, frozenset((t.expected, *t.alternatives))))
        if item is None:
            raise ValueError(f"the {t.trait} word {t.expected!r} (rivals {', '.join(t.alternatives)}) is no phrase of "
                             f"the structure {self.model.name}: the traits and speakers.json are of different corpora")
        return item

    def _topic(self, t: Trait) -> None:
        if frozenset((t.expected, *t.alternatives)) not in self._topic_words:
            raise ValueError(f"the topic word {t.expected!r} is no topic phrase of the structure {self.model.name}: "
                             f"the traits and speakers.json are of different corpora")

    def _likelihood(self, trait: TraitModel, value: str) -> Fraction:
        said = self.said[trait.name]
        if value == RANDOM:
            return _product(Fraction(1, len(trait.items[item])) ** len(words) for item, words in said.items())
        if any(len(set(words)) > 1 for words in said.values()):
            return Fraction(0)
        if self.tables is not None:
            return _product(self.tables.choice(trait.name, value, item, words[0]) for item, words in said.items())
        kept, left = 0, {}  # phrases said as the value says them; the others, by their number of translations
        for item, words in said.items():
            if words[0] == style_word(trait.table[value][item]):
                kept += 1
            else:
                left[len(trait.items[item])] = left.get(len(trait.items[item]), 0) + 1
        d = trait.deviation
        return (1 - d) ** kept * _product((d / (n - 1)) ** count for n, count in left.items())

    def predictive(self, t: Trait) -> Dict[str, Fraction]:
        """p(y | D_s) over the words of a test sentence's speaker word ``t`` (its expected word and rivals)."""
        if t.trait == TOPIC:
            self._topic(t)
            return {w: Fraction(int(w == t.expected)) for w in (t.expected, *t.alternatives)}
        item = self._item(t)
        if (t.trait, item) not in self._predictive:
            self._predictive[(t.trait, item)] = self._phrase_predictive(self.model.trait(t.trait), item)
        return dict(self._predictive[(t.trait, item)])

    def _phrase_predictive(self, trait: TraitModel, item: str) -> Dict[str, Fraction]:
        """Σ_v q_t(v) p(y | v, D_s), summed by what the values say: the mass of the fixed values that choose y
        (or, for a phrase said, all of them for the word said), and ``random``'s 1 / n_i."""
        words = trait.words(item)
        said = self.said[trait.name].get(item)
        mass = self._mass[trait.name]
        fixed = {w: Fraction(0) for w in words}
        for value, m in mass.items():
            if value != RANDOM and m:
                fixed[said[0] if said else style_word(trait.table[value][item])] += m
        anywhere = mass.get(RANDOM, Fraction(0)) / len(words)
        if said:
            return {w: (fixed[w] + anywhere) / self._total for w in words}
        if self.tables is not None:
            learned = {w: sum((m * self.tables.choice(trait.name, value, item, w) for value, m in mass.items()
                               if value != RANDOM and m), Fraction(0)) for w in words}
            return {w: (learned[w] + anywhere) / self._total for w in words}
        keep, leave = 1 - trait.deviation, trait.deviation / (len(words) - 1)
        others = sum(fixed.values())
        return {w: (keep * fixed[w] + leave * (others - fixed[w]) + anywhere) / self._total for w in words}

    score = SpeakerPosterior.score


def _product(factors: Iterable[Fraction]) -> Fraction:
    out = Fraction(1)
    for f in factors:
        if not f:
            return Fraction(0)
        out *= f
    return out


def speaker_posterior(model, traits: Iterable[Trait] = (), tables: Optional[SpeakerTables] = None):
    """The Bayes oracle's posterior of a speaker: :class:`SpeakerPosterior` for the styles mode's model (or None),
    :class:`StructurePosterior` for a structure's (``tables``: learned from the training split, or None)."""
    if isinstance(model, StructureModel):
        return StructurePosterior(model, traits, tables)
    if tables is not None:
        raise ValueError("tables learned from the training split are a reference of the corpus suite's structures "
                         "(--structure NAME), not of the styles mode")
    return SpeakerPosterior(model, traits)
