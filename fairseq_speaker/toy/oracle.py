"""The best speaker-word accuracy a system can reach on the toy corpus, given what training shows.

A system learns a speaker's traits only from that speaker's training sentences. Two oracles
translate every test sentence perfectly except for the speaker-dependent words, which they get
right exactly when training made them knowable, and otherwise guess among the rivals (expected
accuracy 1 / number of choices):

- ``traits revealed``: the oracle knows how the traits work (a doctor says "médicaments" for "the
  drugs" and "ordonnance" for ...); a word is knowable when the speaker's training sentences show
  the trait at all (any gendered word reveals the gender, any profession word the profession).
  This is the ceiling of a system that shares what it learns across speakers (``fact``).
- ``words seen``: a word is knowable only when the speaker said exactly that word for that trait in
  training. This is the ceiling of a system that learns each speaker's words on their own (``full``).

The corpus's styles mode (:mod:`fairseq_speaker.toy.corpus`, ``--styles K``) adds a third, exact one:

- ``Bayes``: the oracle knows the generative model (the K styles, their prior, the deviation rate;
  ``speakers.json``) but not which style a speaker belongs to nor where they leave it; it predicts
  each speaker word as the Bayes decision given the speaker's training sentences D_s, which no learner
  of the same sentences can beat in expectation. For a style word of phrase i (options O_i, n_i of
  them; style k says c_k(i); deviation rate d):

  - p(a_i = y | k) = (1 - d) if y = c_k(i), else d / (n_i - 1): the speaker's choice a_i for i,
    fixed once drawn, so that all the speaker's sentences that say i say a_i;
  - the posterior over the speaker's style: q_s(k) ∝ π_k Π_{j ∈ seen(D_s)} p(a_j = o_j | k), one factor
    per phrase the speaker said (o_j: the word they said for it, each time), not one per sentence;
  - the posterior predictive: p(y | i, D_s) = 1[y = o_i] if the speaker said i in D_s, else
    Σ_k q_s(k) p(a_i = y | k) (phrases are independent given the style);
  - the decision: the argmax set A of p(· | i, D_s); the word scores 1 / |A| if the test sentence's word
    is in A, else 0 (ties split as the other oracles split a guess).

  Gender and address are words of a trait that one word reveals, as in ``traits revealed``: 1 when
  D_s shows the trait, else 1 / (number of choices) (their prior is uniform). The arithmetic is in
  exact fractions (of the deviation rate and prior as written: 0.1 is 1/10), so that ties are ties.

  That score, ``score="decision"`` (the default), is the Bayes decision's accuracy on the test's
  actual words, comparable with a system's trait accuracy on the same words (which may beat it by
  chance on a small test set). ``score="posterior"`` is max_y p(y | i, D_s) instead: the decision's
  expected accuracy given D_s, blind to the test's word; the same in expectation, less noisy. For the
  style trait the two other oracles are no limits: ``traits revealed`` counts every style word of a
  speaker as known once one is shown, deviations included (which nothing can know), ``words seen``
  guesses on every phrase the speaker did not say (where the styles tell more).

The structures of the corpus suite (:mod:`fairseq_speaker.toy.structures`, ``--structure NAME``) have the same
oracle over all their traits at once (:class:`StructurePosterior`): a posterior over the joint of the speaker's
values (traits may be correlated), speakers who choose at random, and words chosen by the sentence's topic, which
it predicts from the source. :func:`bayes_accuracy` and :func:`onboarding_oracle` take either model.

:func:`bayes_accuracy` scores a test split of the training speakers; :func:`onboarding_oracle`
scores held-out speakers from their first n sentences (``heldout.*``, as
``fairseq-speaker-onboarding-eval`` adapts on them). From the command line::

    python -m fairseq_speaker.toy.oracle RAW --shots 0 1 3 10 30
"""

import argparse
import json
import os
from fractions import Fraction
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from fairseq_speaker.analysis.speaker_words import Trait, read_traits
from fairseq_speaker.toy.corpus import TRAITS, Styles, read_styles, style_word
from fairseq_speaker.toy.learned_tables import LearnedTables, SpeakerTables
from fairseq_speaker.toy.structures import RANDOM, TOPIC, StructureModel, TraitModel

ORACLES = ("traits revealed", "words seen")
#: the exact oracle of the styles mode
BAYES = "Bayes"
#: the trait of the styles mode's words
STYLE = "style"
#: how a Bayes decision is scored: against the test's word, or by its posterior probability of being right
SCORES = ("decision", "posterior")


def oracle_accuracy(train_speakers: Sequence[str], train_traits: Sequence[Sequence[Trait]],
                    test_speakers: Sequence[str], test_traits: Sequence[Sequence[Trait]],
                    ) -> Dict[str, Dict[str, float]]:
    """For each oracle: the expected share of the test's speaker words it gets right, overall and per trait
    (as :func:`~fairseq_speaker.analysis.speaker_words.trait_accuracy` reports a system's)."""
    if len(train_speakers) != len(train_traits) or len(test_speakers) != len(test_traits):
        raise ValueError("speaker labels and trait lines differ in number")
    revealed: Dict[str, Set[str]] = {}
    seen: Dict[str, Set[Tuple[str, str]]] = {}
    for speaker, traits in zip(train_speakers, train_traits):
        for t in traits:
            revealed.setdefault(speaker, set()).add(t.trait)
            seen.setdefault(speaker, set()).add((t.trait, t.expected))
    results = {}
    for oracle in ORACLES:
        right: Dict[str, float] = {}
        total: Dict[str, int] = {}
        for speaker, traits in zip(test_speakers, test_traits):
            for t in traits:
                if oracle == ORACLES[0]:
                    known = t.trait in revealed.get(speaker, set())
                else:
                    known = (t.trait, t.expected) in seen.get(speaker, set())
                score = 1.0 if known else 1.0 / (1 + len(t.alternatives))
                for key in ("all", t.trait):
                    total[key] = total.get(key, 0) + 1
                    right[key] = right.get(key, 0.0) + score
        results[oracle] = {key: right[key] / total[key] for key in total}
    return results


def oracle_rows(accuracies: Dict[str, Dict[str, float]]) -> List[Dict]:
    """Rows for the demo's results table (no BLEU, no time)."""
    return [{"system": f"oracle: {name}", "bleu": None, "traits": acc, "seconds": None}
            for name, acc in accuracies.items()]


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


def _bayes_scores(styles: Union[Styles, StructureModel, None], observed: Dict[str, List[Trait]],
                  evaluated: Iterable[Tuple[str, Sequence[Trait]]], score: str,
                  tables: Optional[LearnedTables] = None) -> Dict[str, float]:
    posteriors: Dict[str, Union[SpeakerPosterior, StructurePosterior]] = {}
    right: Dict[str, Fraction] = {}
    total: Dict[str, int] = {}
    for speaker, traits in evaluated:
        for t in traits:
            if speaker not in posteriors:
                posteriors[speaker] = speaker_posterior(styles, observed.get(speaker, ()),
                                                        tables.without(speaker) if tables is not None else None)
            value = posteriors[speaker].score(t, score)
            for key in ("all", t.trait):
                total[key] = total.get(key, 0) + 1
                right[key] = right.get(key, Fraction(0)) + value
    return {key: float(right[key] / total[key]) for key in total}


def bayes_accuracy(styles: Union[Styles, StructureModel, None], train_speakers: Sequence[str],
                   train_traits: Sequence[Sequence[Trait]],
                   test_speakers: Sequence[str], test_traits: Sequence[Sequence[Trait]],
                   score: str = "decision", tables: Optional[LearnedTables] = None) -> Dict[str, float]:
    """The ``Bayes`` oracle's share of the test's speaker words, overall and per trait: each test speaker
    known from all their training sentences (see the module's docstring; ``score``: ``decision`` or
    ``posterior``). ``styles``: the corpus's model (:func:`~fairseq_speaker.toy.corpus.read_styles`: the styles
    mode's or a structure's); ``tables``: the structure's tables learned from the training split (each test speaker's
    own words left out of them), or None: the model's."""
    if len(train_speakers) != len(train_traits) or len(test_speakers) != len(test_traits):
        raise ValueError("speaker labels and trait lines differ in number")
    observed: Dict[str, List[Trait]] = {}
    for speaker, traits in zip(train_speakers, train_traits):
        observed.setdefault(speaker, []).extend(traits)
    return _bayes_scores(styles, observed, zip(test_speakers, test_traits), score, tables)


def onboarding_oracle(styles: Union[Styles, StructureModel, None], speakers: Sequence[str],
                      traits: Sequence[Sequence[Trait]], n: int,
                      evaluated_after: Optional[int] = None, score: str = "decision",
                      tables: Optional[LearnedTables] = None) -> Dict[str, float]:
    """The ``Bayes`` oracle for new speakers known from their first ``n`` sentences (in file order, as
    ``fairseq-speaker-onboarding-eval`` adapts on them), scored on each speaker's sentences after their
    first ``evaluated_after`` (default ``n``; the evaluation passes its largest n, so that every n is
    scored on the same sentences). ``n`` = 0 is the prior alone. ``tables``: as :func:`bayes_accuracy`'s (the whole
    training split's: these speakers are not in it)."""
    if len(speakers) != len(traits):
        raise ValueError("speaker labels and trait lines differ in number")
    after = n if evaluated_after is None else evaluated_after
    if not 0 <= n <= after:
        raise ValueError(f"n = {n} sentences to learn from, evaluated after the first {after}: 0 <= n <= that")
    lines: Dict[str, List[int]] = {}
    for i, speaker in enumerate(speakers):
        lines.setdefault(speaker, []).append(i)
    observed = {speaker: [t for i in ids[:n] for t in traits[i]] for speaker, ids in lines.items()}
    evaluated = [(speakers[i], traits[i]) for ids in lines.values() for i in ids[after:]]
    return _bayes_scores(styles, observed, evaluated, score, tables)


#: the tables the oracle knows: the model's, or those the training split shows (:mod:`~.learned_tables`)
TABLES = ("known", "learned")


def learned_tables(path: str, train_speakers: Sequence[str], train_traits: Sequence[Sequence[Trait]]
                   ) -> LearnedTables:
    """The tables of the structure of ``path`` (its ``speakers.json``, which holds every speaker's values) as its
    training split shows them."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    model = StructureModel.from_json(data)
    values = {name: {t.name: truth[t.name] for t in model.traits} for name, truth in data["speakers"].items()}
    observed: Dict[str, List[Trait]] = {}
    for speaker, traits in zip(train_speakers, train_traits):
        observed.setdefault(speaker, []).extend(traits)
    return LearnedTables(model, values, observed)


def _lines(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def _format(rows: List[Tuple[str, Dict[str, float]]]) -> str:
    traits = [t for t in TRAITS if any(t in acc for _, acc in rows)]
    lines = ["| " + " | ".join(["", "speaker words", *traits]) + " |", "|" + "---|" * (2 + len(traits))]
    for name, acc in rows:
        cells = [name] + [f"{100 * acc[t]:.1f}%" if t in acc else "-" for t in ["all", *traits]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="The Bayes limit of a styles corpus: the share of speaker words "
                                     "the Bayes decision gets right, for the test split and for held-out speakers "
                                     "known from their first n sentences.")
    parser.add_argument("raw", help="the corpus's folder (python -m fairseq_speaker.toy.corpus --styles K)")
    parser.add_argument("--shots", type=int, nargs="+", default=[0, 1, 3, 10, 30], metavar="N",
                        help="sentences of each held-out speaker learned from (heldout.*), each n scored on the "
                        "speakers' sentences after their first max(N)")
    parser.add_argument("--score", choices=SCORES, default="decision",
                        help="decision: the Bayes decision against the test's words; posterior: its expected accuracy")
    parser.add_argument("--tables", choices=TABLES, default="known",
                        help="known: the structure's tables, as the generative model has them (the Bayes limit); "
                        "learned: as the training split shows them to an oracle told every other training speaker's "
                        "values (a corpus of the suite only; the limit of a learner of this corpus)")
    args = parser.parse_args(argv)
    path = os.path.join(args.raw, "speakers.json")
    if not os.path.exists(path):
        parser.error(f"{path} not found: the Bayes oracle needs a corpus of the styles mode (--styles K) or of the "
                     f"corpus suite (--structure NAME)")
    styles = read_styles(path)
    train_speakers = _lines(os.path.join(args.raw, "train.spk"))
    train_traits = read_traits(os.path.join(args.raw, "train.traits"))
    tables = None
    if args.tables == "learned":
        if not isinstance(styles, StructureModel):
            parser.error(f"--tables learned: {path} is a corpus of the styles mode; learned tables are a reference of "
                         f"the corpus suite's structures (python -m fairseq_speaker.toy.corpus --structure NAME)")
        tables = learned_tables(path, train_speakers, train_traits)
    rows = [("test", bayes_accuracy(
        styles, train_speakers, train_traits,
        _lines(os.path.join(args.raw, "test.spk")), read_traits(os.path.join(args.raw, "test.traits")), args.score,
        tables))]
    if os.path.exists(os.path.join(args.raw, "heldout.spk")):
        labels = _lines(os.path.join(args.raw, "heldout.spk"))
        traits = read_traits(os.path.join(args.raw, "heldout.traits"))
        fewest = min(labels.count(s) for s in set(labels))
        if max(args.shots) >= fewest:
            parser.error(f"a held-out speaker has {fewest} sentences: --shots must stay below, to leave some to score")
        for n in sorted(args.shots):
            rows.append((f"held out, n = {n}",
                         onboarding_oracle(styles, labels, traits, n, max(args.shots), args.score, tables)))
    print(_format(rows))


if __name__ == "__main__":
    main()
