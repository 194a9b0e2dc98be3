"""The corpus suite: toy corpora of many structures, each with its exact Bayes limit, split into a half to design
on and a half to judge on.

A structure is a point in independent dimensions (:class:`Structure`, :data:`DIMENSIONS`):

* ``correlated``: the traits vary independently (``none``), or the form of address (``address``) or the gender
  (``gender``) belongs to a style: each style has its own, which its speakers keep with probability
  :data:`BELONGS` (a joint prior over the traits' values, not a product);
* ``items`` and ``ways``: the style is marked on that many phrases, each with that many translations: binary
  choices over many words, or multi-way choices over few; many phrases are rare words (at 160, each phrase a
  speaker says is said once or twice in 30 sentences), few are frequent ones;
* ``early``: the translations of a phrase differ from their first word, an article or an adjective agreeing with
  the noun chosen ("le vélo" / "la bicyclette", "le petit vélo" / "la petite bicyclette"): a decoder commits to
  the choice before the noun. The word scored is still the noun (the choice, whichever position reveals it);
  without ``early`` every translation of a phrase starts with the same article;
* ``topics``: some phrases are translated by the topic of the sentence, not by the speaker: the source shows the
  topic ("at the hospital i saw the X"), so the choice is predictable from the source alone. Each speaker talks of
  one topic most (four sentences in five), so that a memory of a speaker's words would learn a topic as theirs.
  These words are scored under the trait ``topic``;
* ``sizes``: every speaker says as many training sentences (``uniform``), or speakers of very different sizes
  (``zipf``: p(c) ∝ 1/c on 1 to 200 sentences, about 34 on average);
* ``random_share``: the share of speakers who have no style: each of their style words is drawn uniformly, each
  time anew (a value ``random`` of the style trait);
* ``styles``: the number of styles (80 over 400 speakers: many styles with few speakers each);
* ``deviation``: the share of phrases on which a speaker leaves their style, as in the styles mode.

The phrases of a structure are made-up words ("the dabiko" -> "le tumafe" / "le sorilu"), drawn for its seed, so
that items and ways can be as many as a structure asks; gender and address are marked as in the styles mode.

:data:`SUITE` holds the named structures, each with its fixed seed: the ``design`` half varies one dimension at a
time from ``base``; the ``judge`` half is drawn from :data:`DIMENSIONS` with :data:`JUDGE_SEED` (several
dimensions at once, seeds of their own), and :func:`draw_structures` draws a fresh judging half from any seed
(``drawn-SEED-I``, the I-th structure drawn with SEED, is a name every command accepts). A method is designed on
the first half and reported on the second; one that wins on the first and not on the second has learned the corpus.

:func:`write_structure` writes a structure's corpus as the styles mode writes its own (``{split}.{en,fr,spk,traits}``
for train, valid, test and heldout; ``speakers.tsv``; ``speakers.json``, the model and every speaker's truth),
so that ``trait_accuracy``, the demo's table, ``fairseq-speaker-onboarding-eval`` and the Bayes oracle of
:mod:`fairseq_speaker.toy.oracle` read it. From the command line::

    python -m fairseq_speaker.toy.corpus --list-structures
    python -m fairseq_speaker.toy.corpus --out raw --structure early
    python -m fairseq_speaker.toy.oracle raw --shots 0 1 3 10 30
"""

import json
import os
import random
import re
from dataclasses import dataclass, field, fields
from fractions import Fraction
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_speaker.analysis.speaker_words import Trait
from fairseq_speaker.toy.lexicon import (
    ADDRESS_VERBS, ADDRESSES, GENDERED_ADJECTIVES, GENDERS, INVARIABLE_ADJECTIVES, NOUNS, PLACES, PROFESSION_NOUNS,
    STYLE_ITEMS, STYLE_NOUN_SHARE, TIMES, Styles, remove_split, style_word, write_split)

#: the value of a trait whose speakers choose at random, each time anew
RANDOM = "random"
#: the trait of the words the topic of their sentence chooses
TOPIC = "topic"
#: with ``correlated``, the probability that a speaker keeps their style's form of address (or gender)
BELONGS = Fraction(9, 10)
#: with ``topics``, the probability that a topic sentence is of the speaker's own topic (else one drawn uniformly)
OWN_TOPIC = 0.8
#: the topics: name -> (English context, French context)
TOPICS = {"hospital": ("at the hospital", "à l' hôpital"), "police": ("at the police station", "au commissariat"),
          "school": ("at school", "à l' école")}
#: with ``topics``, the phrases whose translation the topic chooses
TOPIC_ITEMS = 6
#: the largest ``ways`` with ``early`` (le, la, les petits, les petites)
EARLY_WAYS = 4
#: with ``sizes`` = ``zipf``, the fewest and the most training sentences of a speaker
ZIPF_RANGE = (1, 200)


@dataclass(frozen=True)
class Structure:
    """A corpus structure: a point in :data:`DIMENSIONS`, its half, its seed and its sizes.

    ``speakers`` training speakers say ``sentences`` training sentences each (``uniform``; with ``zipf``, a number
    drawn per speaker), and ``eval_sentences`` in valid and in test each; ``heldout_speakers`` more say
    ``heldout_sentences`` in ``heldout`` only.
    """

    name: str
    half: str
    seed: int
    correlated: str = "none"
    styles: int = 6
    items: int = 16
    ways: int = 3
    early: bool = False
    topics: bool = False
    sizes: str = "uniform"
    random_share: Fraction = Fraction(0)
    deviation: Fraction = Fraction(1, 10)
    speakers: int = 400
    sentences: int = 30
    eval_sentences: int = 2
    heldout_speakers: int = 200
    heldout_sentences: int = 60

    def __post_init__(self):
        for axis, values in DIMENSIONS.items():
            if getattr(self, axis) not in values:
                raise ValueError(f"structure {self.name}: {axis} = {getattr(self, axis)!r}, not one of {values}")
        if self.half not in HALVES:
            raise ValueError(f"structure {self.name}: half {self.half!r}, not one of {HALVES}")
        if self.early and self.ways > EARLY_WAYS:
            raise ValueError(f"structure {self.name}: early commitment has at most {EARLY_WAYS} ways")

    def point(self) -> Tuple:
        """Its coordinates in :data:`DIMENSIONS`."""
        return tuple(getattr(self, axis) for axis in DIMENSIONS)

    def describe(self) -> str:
        base = Structure("", "design", 0)
        changed = [f"{axis} {_show(getattr(self, axis))}" for axis in DIMENSIONS
                   if getattr(self, axis) != getattr(base, axis)]
        return ", ".join(changed) or "the base point"


def _show(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


#: the dimensions a structure is drawn from: axis -> its values (the first of each is ``base``'s, but ``styles``)
DIMENSIONS = {
    "correlated": ("none", "address", "gender"),
    "styles": (6, 4, 12, 80),
    "items": (16, 4, 48, 160),
    "ways": (3, 2, 4),
    "early": (False, True),
    "topics": (False, True),
    "sizes": ("uniform", "zipf"),
    "random_share": (Fraction(0), Fraction(1, 4)),
    "deviation": (Fraction(1, 10), Fraction(1, 5)),
}
HALVES = ("design", "judge")
#: the seed the judging half is drawn with
JUDGE_SEED = 20261127
#: the number of structures of the judging half
JUDGE_COUNT = 6
#: the most structures one draw makes (``drawn-SEED-I``: I up to this)
MOST_DRAWN = 100

#: the design half: ``base`` and one dimension changed at a time, each with a fixed seed
DESIGN = [
    Structure("base", "design", 101),
    Structure("correlated-address", "design", 102, correlated="address"),
    Structure("binary-many", "design", 103, items=48, ways=2),
    Structure("multiway-few", "design", 104, items=4, ways=4),
    Structure("rare-words", "design", 105, items=160, ways=2),
    Structure("early", "design", 106, early=True),
    Structure("topic", "design", 107, topics=True),
    Structure("zipf", "design", 108, sizes="zipf"),
    Structure("random-choosers", "design", 109, random_share=Fraction(1, 4)),
    Structure("many-styles", "design", 110, styles=80),
]


def draw_structures(seed: int, count: int, prefix: Optional[str] = None, avoid: Sequence[Structure] = DESIGN
                    ) -> List[Structure]:
    """``count`` judging structures drawn with ``seed``, balanced on every axis of :data:`DIMENSIONS`: each axis
    deals its values in turn, in an order drawn anew for each round of them (so that every value comes about
    equally often and the axes are independent of each other); a point of ``avoid`` or one already drawn is
    drawn again. Each has a corpus seed of its own (from 1,000 up: the design half's are below). Named
    ``{prefix}-{i}`` (default ``drawn-{seed}-{i}``), i from 1."""
    if not 0 <= count <= MOST_DRAWN:
        raise ValueError(f"{count} structures drawn: 0 to {MOST_DRAWN}")
    rng = random.Random(f"suite-{seed}")
    taken = {s.point() for s in avoid}
    decks: Dict[str, List] = {axis: [] for axis in DIMENSIONS}
    drawn: List[Structure] = []
    prefix = f"drawn-{seed}" if prefix is None else prefix
    while len(drawn) < count:
        point = {}
        for axis, values in DIMENSIONS.items():
            if not decks[axis]:
                decks[axis] = rng.sample(values, len(values))
            point[axis] = decks[axis].pop()
        if tuple(point.values()) in taken or (point["early"] and point["ways"] > EARLY_WAYS):
            continue
        taken.add(tuple(point.values()))
        drawn.append(Structure(f"{prefix}-{len(drawn) + 1}", "judge", rng.randrange(1000, 10 ** 6), **point))
    return drawn


#: the judging half, drawn once from the dimensions (see :func:`draw_structures`)
JUDGE = draw_structures(JUDGE_SEED, JUDGE_COUNT, prefix="judge")
#: every named structure: name -> structure (the design half, then the judging half)
SUITE: Dict[str, Structure] = {s.name: s for s in DESIGN + JUDGE}


def get_structure(name: str) -> Structure:
    """The structure named ``name``: one of :data:`SUITE`, or ``drawn-SEED-I`` (the I-th of
    :func:`draw_structures` with SEED)."""
    if name in SUITE:
        return SUITE[name]
    drawn = re.fullmatch(r"drawn-(0|[1-9][0-9]*)-([1-9][0-9]*)", name)  # one spelling each: ASCII, no leading 0
    if drawn is not None and int(drawn.group(2)) <= MOST_DRAWN:
        return draw_structures(int(drawn.group(1)), int(drawn.group(2)))[-1]
    raise ValueError(f"no structure {name!r}; the structures: {', '.join(SUITE)} (or drawn-SEED-I, I from 1 to "
                     f"{MOST_DRAWN}: a fresh draw of the judging half's dimensions)")


# -- the generative model -------------------------------------------------------------------------------------


@dataclass
class TraitModel:
    """One trait of a structure's model: the phrases it marks and how each of its values translates them.

    ``items``: English phrase -> its translations (the last word of each scored); ``table[value]``: that value's
    translation of every phrase (every value but :data:`RANDOM`, whose speakers draw each time anew);
    ``deviation``: the probability that a speaker of a value leaves it on a phrase, for another translation drawn
    uniformly and then said every time.
    """

    name: str
    values: Tuple[str, ...]
    items: Dict[str, Tuple[str, ...]]
    table: Dict[str, Dict[str, str]]
    deviation: Fraction = Fraction(0)

    def __post_init__(self):
        words: Dict[str, str] = {}
        for item, options in self.items.items():
            if len(options) < 2:
                raise ValueError(f"trait {self.name}: the phrase {item!r} has {len(options)} translation(s)")
            for option in options:
                if words.setdefault(style_word(option), item) != item or \
                        sum(style_word(o) == style_word(option) for o in options) > 1:
                    raise ValueError(f"trait {self.name}: the word {style_word(option)!r} ends two translations")
        for value in self.values:
            if value == RANDOM:
                continue
            choices = self.table.get(value, {})
            if set(choices) != set(self.items) or any(choices[i] not in self.items[i] for i in choices):
                raise ValueError(f"trait {self.name}: value {value!r} must choose one translation of every phrase")
        if not 0 <= self.deviation <= 1:
            raise ValueError(f"trait {self.name}: deviation {self.deviation} is not a probability")

    def words(self, item: str) -> List[str]:
        return [style_word(o) for o in self.items[item]]

    def choice(self, value: str, item: str, word: str) -> Fraction:
        """p(a_i = word | value) for a speaker of a value other than :data:`RANDOM`."""
        n = len(self.items[item])
        if word == style_word(self.table[value][item]):
            return 1 - self.deviation
        return self.deviation / (n - 1)

    def to_json(self) -> Dict:
        return {"name": self.name, "values": list(self.values), "deviation": str(self.deviation),
                "items": {item: list(options) for item, options in self.items.items()}, "table": self.table}

    @classmethod
    def from_json(cls, data: Dict) -> "TraitModel":
        return cls(data["name"], tuple(data["values"]), {i: tuple(o) for i, o in data["items"].items()},
                   {v: dict(c) for v, c in data["table"].items()}, Fraction(data["deviation"]))


@dataclass
class StructureModel:
    """The generative model of a structure's corpus, all its Bayes oracle may know of it.

    ``traits``: the speaker's traits; ``joint``: the prior over their values, a tuple per speaker in the order of
    ``traits`` (a product when the traits are independent); ``topics``: topic -> its translation of every topic
    phrase (``topic_items``: English phrase -> its translations), chosen by the sentence's topic, which its
    source shows.
    """

    name: str
    traits: List[TraitModel]
    joint: Dict[Tuple[str, ...], Fraction]
    topic_items: Dict[str, Tuple[str, ...]] = field(default_factory=dict)
    topics: Dict[str, Dict[str, str]] = field(default_factory=dict)

    def __post_init__(self):
        if sum(self.joint.values()) != 1 or any(p < 0 for p in self.joint.values()):
            raise ValueError(f"the joint prior of {self.name} is not a distribution")
        for values in self.joint:
            if len(values) != len(self.traits) or any(v not in t.values for v, t in zip(values, self.traits)):
                raise ValueError(f"the joint prior of {self.name} names values {values} of no trait")
        for topic, choices in self.topics.items():
            if set(choices) != set(self.topic_items) or any(choices[i] not in self.topic_items[i] for i in choices):
                raise ValueError(f"topic {topic!r} must choose one translation of every topic phrase")

    def trait(self, name: str) -> TraitModel:
        for t in self.traits:
            if t.name == name:
                return t
        raise ValueError(f"the trait {name!r} is no trait of the structure {self.name} "
                         f"({', '.join(t.name for t in self.traits)})")

    def marginal(self, name: str) -> Dict[str, Fraction]:
        """The prior of one trait's values."""
        index = [t.name for t in self.traits].index(name)
        out: Dict[str, Fraction] = {}
        for values, p in self.joint.items():
            out[values[index]] = out.get(values[index], Fraction(0)) + p
        return out

    def to_json(self) -> Dict:
        return {"structure": self.name, "traits": [t.to_json() for t in self.traits],
                "joint": [[list(values), str(p)] for values, p in self.joint.items()],
                "topic_items": {item: list(options) for item, options in self.topic_items.items()},
                "topics": self.topics}

    @classmethod
    def from_json(cls, data: Dict) -> "StructureModel":
        return cls(data["structure"], [TraitModel.from_json(t) for t in data["traits"]],
                   {tuple(values): Fraction(p) for values, p in data["joint"]},
                   {i: tuple(o) for i, o in data.get("topic_items", {}).items()},
                   {t: dict(c) for t, c in data.get("topics", {}).items()})

    @classmethod
    def from_styles(cls, styles: Styles) -> "StructureModel":
        """The styles mode's model as a structure's: gender and address independent of the style, uniform; the
        same Bayes limit (a unit test compares them)."""
        prior = [Fraction(str(p)) for p in styles.prior]
        prior = [p / sum(prior) for p in prior]
        style = TraitModel("style", tuple(str(k) for k in range(styles.num_styles)), dict(styles.items),
                           {str(k): dict(choices) for k, choices in enumerate(styles.table)},
                           Fraction(str(styles.deviation)))
        joint = {(g, a, str(k)): Fraction(1, 4) * p for g in GENDERS for a in ADDRESSES for k, p in enumerate(prior)}
        return cls("styles", [gender_trait(), address_trait(), style], joint)


def gender_trait() -> TraitModel:
    """Gender, marked on the gendered adjectives and on "allé(e)", as in the other modes."""
    items = {adj: pair for adj, pair in GENDERED_ADJECTIVES.items()}
    items["went"] = ("allé", "allée")
    return TraitModel("gender", GENDERS, items, {"f": {i: o[1] for i, o in items.items()},
                                                 "m": {i: o[0] for i, o in items.items()}})


def address_trait() -> TraitModel:
    """The form of address, marked on "tu" / "vous", as in the other modes."""
    items = {"you": ("tu", "vous")}
    return TraitModel("address", ADDRESSES, items, {"informal": {"you": "tu"}, "formal": {"you": "vous"}})


#: the words of the other modes and of the sentence frames, which no made-up word may be
def _taken_words() -> set:
    phrases = [*NOUNS, *NOUNS.values(), *PLACES, *PLACES.values(), *TIMES, *TIMES.values(),
               *INVARIABLE_ADJECTIVES, *INVARIABLE_ADJECTIVES.values(), *GENDERED_ADJECTIVES,
               *(w for pair in GENDERED_ADJECTIVES.values() for w in pair), *STYLE_ITEMS, *PROFESSION_NOUNS,
               *(o for options in [*STYLE_ITEMS.values(), *PROFESSION_NOUNS.values()] for o in options),
               *(w for verb in ADDRESS_VERBS for w in verb), *(w for pair in TOPICS.values() for w in pair),
               "i am i was i went you are tu es vous êtes i saw j' ai vu je suis j' étais allé allée and et .",
               "le la les petit petite petits petites little the"]
    return {w for phrase in phrases for w in phrase.split()}


def _made_up_words(rng: random.Random, count: int) -> List[str]:
    """``count`` distinct made-up words of three syllables (``dabiko``), none a word of the corpus's frames."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    taken, words = _taken_words(), []
    seen = set()
    while len(words) < count:
        word = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(3))
        if word not in taken and word not in seen:
            seen.add(word)
            words.append(word)
    return words


#: early commitment: the article (and adjective) of each translation of a phrase, by its number of ways
_EARLY_FORMS = {2: ("le", "la"), 3: ("le", "la", "les"), 4: ("le petit", "la petite", "les petits", "les petites")}
_EARLY_ADJECTIVE = {2: ("le petit", "la petite"), 3: ("le petit", "la petite", "les petits")}


def _phrases(rng: random.Random, words: List[str], count: int, ways: int, early: bool
             ) -> Dict[str, Tuple[str, ...]]:
    """``count`` made-up phrases of ``ways`` translations each: with ``early``, their articles (and, for every
    other phrase, an adjective before the noun: "the little X") differ from the first word; else all start with
    the same article."""
    items = {}
    for j in range(count):
        english, nouns = words[j * (ways + 1)], words[j * (ways + 1) + 1:(j + 1) * (ways + 1)]
        if early:
            adjective = ways == 4 or j % 2 == 1
            forms = _EARLY_ADJECTIVE[ways] if adjective and ways < 4 else _EARLY_FORMS[ways]
            items[f"the {'little ' if adjective else ''}{english}"] = tuple(f"{f} {n}" for f, n in zip(forms, nouns))
        else:
            article = ("le", "la")[j % 2]
            items[f"the {english}"] = tuple(f"{article} {n}" for n in nouns)
    return items


def build_model(structure: Structure) -> StructureModel:
    """The generative model of ``structure`` (its phrases, styles and priors), drawn from its seed alone."""
    rng = random.Random(f"structure-{structure.seed}")
    topic_words = TOPIC_ITEMS * (len(TOPICS) + 1) if structure.topics else 0
    words = _made_up_words(rng, structure.items * (structure.ways + 1) + topic_words)
    items = _phrases(rng, words, structure.items, structure.ways, structure.early)
    names = [str(k) for k in range(structure.styles)]
    table = {k: {item: rng.choice(options) for item, options in items.items()} for k in names}
    values = tuple(names) + ((RANDOM,) if structure.random_share else ())
    style = TraitModel("style", values, items, table, structure.deviation)
    style_prior = {k: (1 - structure.random_share) / structure.styles for k in names}
    if structure.random_share:
        style_prior[RANDOM] = structure.random_share
    gender, address = gender_trait(), address_trait()
    joint = {}
    for k, pk in style_prior.items():
        for g in GENDERS:
            for a in ADDRESSES:
                pg = pa = Fraction(1, 2)
                if structure.correlated != "none" and k != RANDOM:  # style k's own: by its number, half each
                    own = (GENDERS if structure.correlated == "gender" else ADDRESSES)[int(k) % 2]
                    p = BELONGS if (g if structure.correlated == "gender" else a) == own else 1 - BELONGS
                    pg, pa = (p, pa) if structure.correlated == "gender" else (pg, p)
                joint[(g, a, k)] = pk * pg * pa
    topic_items, topics = {}, {}
    if structure.topics:
        topic_items = _phrases(rng, words[len(words) - topic_words:], TOPIC_ITEMS, len(TOPICS), False)
        orders = {item: rng.sample(range(len(TOPICS)), len(TOPICS)) for item in topic_items}
        topics = {t: {item: topic_items[item][orders[item][i]] for item in topic_items} for i, t in enumerate(TOPICS)}
    return StructureModel(structure.name, [gender, address, style], joint, topic_items, topics)


# -- speakers and sentences -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StructureSpeaker:
    """A speaker of a structure: the value of each trait, the phrases where they leave their style
    ((phrase, their own translation), in sorted order), their topic (with ``topics``)."""

    name: str
    values: Tuple[Tuple[str, str], ...]
    deviations: Tuple[Tuple[str, str], ...] = ()
    topic: Optional[str] = None

    def value(self, trait: str) -> str:
        return dict(self.values)[trait]

    def truth(self) -> Dict:
        return {**dict(self.values), "deviations": dict(self.deviations), "topic": self.topic}


def _draw(rng: random.Random, weights: Dict, keys: Sequence):
    u, acc = rng.random(), 0.0
    for key in keys:
        acc += float(weights[key])
        if u < acc:
            return key
    return keys[-1]


def make_structure_speakers(model: StructureModel, count: int, rng: random.Random, prefix: str = "spk"
                            ) -> List[StructureSpeaker]:
    """``count`` speakers drawn independently from ``model``: the traits' values from the joint prior, then the
    phrases where they leave their style (each with the style's deviation rate, for a translation drawn uniformly
    among the others), then their topic (uniform)."""
    keys = sorted(model.joint)
    speakers = []
    for i in range(count):
        values = _draw(rng, model.joint, keys)
        deviations = []
        for trait, value in zip(model.traits, values):
            if value == RANDOM or not trait.deviation:
                continue
            for item in sorted(trait.items):
                if rng.random() < trait.deviation:
                    deviations.append((item, rng.choice([o for o in trait.items[item]
                                                         if o != trait.table[value][item]])))
        topic = rng.choice(sorted(model.topics)) if model.topics else None
        speakers.append(StructureSpeaker(f"{prefix}{i:03d}", tuple((t.name, v) for t, v in zip(model.traits, values)),
                                         tuple(deviations), topic))
    return speakers


class _SentenceBuilder:
    """The sentences of a structure: the styles mode's frames, the phrases of the structure's traits in them."""

    def __init__(self, rng: random.Random, model: StructureModel, speaker: StructureSpeaker):
        self.rng, self.model, self.speaker = rng, model, speaker
        self.traits: List[Trait] = []

    def say(self, trait_name: str, item: str) -> str:
        trait = self.model.trait(trait_name)
        value = self.speaker.value(trait_name)
        if value == RANDOM:
            chosen = self.rng.choice(trait.items[item])
        else:
            chosen = dict(self.speaker.deviations).get(item, trait.table[value][item]) if trait_name == "style" \
                else trait.table[value][item]
        self.record(trait_name, chosen, trait.items[item])
        return chosen

    def record(self, trait: str, chosen: str, options: Sequence[str]) -> None:
        self.traits.append(Trait(trait, style_word(chosen), tuple(style_word(o) for o in options if o != chosen)))

    def noun(self) -> Tuple[str, str]:
        if self.rng.random() < STYLE_NOUN_SHARE:
            en = self.rng.choice(sorted(self.model.trait("style").items))
            return en, self.say("style", en)
        en = self.rng.choice(sorted(NOUNS))
        return en, NOUNS[en]

    def you(self) -> bool:
        """Whether the speaker says "vous" (recorded)."""
        return self.say("address", "you") == "vous"

    def clause(self) -> Tuple[str, str]:
        kind = self.rng.randrange(7 if self.model.topics else 6)
        if kind == 0:
            adj = self.rng.choice(sorted(GENDERED_ADJECTIVES))
            return f"i am {adj}", f"je suis {self.say('gender', adj)}"
        if kind == 1:
            adj = self.rng.choice(sorted(GENDERED_ADJECTIVES))
            time = self.rng.choice(sorted(TIMES))
            return f"i was {adj} {time}", f"j' étais {self.say('gender', adj)} {TIMES[time]}"
        if kind == 2:
            place = self.rng.choice(sorted(PLACES))
            return f"i went {place}", f"je suis {self.say('gender', 'went')} {PLACES[place]}"
        if kind == 3:
            en_verb, informal, formal = self.rng.choice(ADDRESS_VERBS)
            fr_verb = formal if self.you() else informal
            en_noun, fr_noun = self.noun()
            return f"{en_verb} {en_noun}", f"{fr_verb} {fr_noun}"
        if kind == 4:
            adj = self.rng.choice(sorted(INVARIABLE_ADJECTIVES))
            return f"you are {adj}", f"{'vous êtes' if self.you() else 'tu es'} {INVARIABLE_ADJECTIVES[adj]}"
        if kind == 5:
            en_noun, fr_noun = self.noun()
            time = self.rng.choice(sorted(TIMES))
            return f"i saw {en_noun} {time}", f"j' ai vu {fr_noun} {TIMES[time]}"
        topic = self.speaker.topic if self.rng.random() < OWN_TOPIC else self.rng.choice(sorted(self.model.topics))
        item = self.rng.choice(sorted(self.model.topic_items))
        chosen = self.model.topics[topic][item]
        self.record(TOPIC, chosen, self.model.topic_items[item])
        en_context, fr_context = TOPICS[topic]
        return f"{en_context} i saw {item}", f"{fr_context} j' ai vu {chosen}"


def make_structure_sentence(rng: random.Random, model: StructureModel, speaker: StructureSpeaker
                            ) -> Tuple[str, str, List[Trait]]:
    """One (English, French, speaker words) triple of ``speaker``."""
    builder = _SentenceBuilder(rng, model, speaker)
    parts = [builder.clause() for _ in range(1 if rng.random() < 0.6 else 2)]
    return " and ".join(p[0] for p in parts) + " .", " et ".join(p[1] for p in parts) + " .", builder.traits


def training_sizes(structure: Structure) -> List[int]:
    """The training sentences of each training speaker: ``sentences`` each, or with ``zipf`` drawn from
    p(c) ∝ 1/c on :data:`ZIPF_RANGE`."""
    if structure.sizes == "uniform":
        return [structure.sentences] * structure.speakers
    rng = random.Random(f"sizes-{structure.seed}")
    counts = list(range(ZIPF_RANGE[0], ZIPF_RANGE[1] + 1))
    return rng.choices(counts, weights=[1 / c for c in counts], k=structure.speakers)


def _sentences(rng: random.Random, model: StructureModel, speakers: Sequence[StructureSpeaker], sizes: Sequence[int]
               ) -> List[Tuple[str, str, str, List[Trait]]]:
    rows = []
    for speaker, size in zip(speakers, sizes):
        for _ in range(size):
            en, fr, traits = make_structure_sentence(rng, model, speaker)
            rows.append((en, fr, speaker.name, traits))
    rng.shuffle(rows)
    return rows


def _heldout_rows(rng: random.Random, model: StructureModel, speakers: Sequence[StructureSpeaker], size: int
                  ) -> List[Tuple[str, str, str, List[Trait]]]:
    """The held-out speakers' sentences, dealt round-robin (each speaker's in the order they are known)."""
    rows = []
    for _ in range(size):
        for speaker in speakers:
            en, fr, traits = make_structure_sentence(rng, model, speaker)
            rows.append((en, fr, speaker.name, traits))
    return rows


def write_structure(out: str, structure: Structure, src: str = "en", tgt: str = "fr") -> List[StructureSpeaker]:
    """Write ``structure``'s corpus to ``out`` (see the module's docstring); returns its speakers, training ones
    (``spk000``, ...) then held-out ones (``new000``, ...)."""
    model = build_model(structure)
    train = make_structure_speakers(model, structure.speakers, random.Random(f"speakers-{structure.seed}"))
    heldout = make_structure_speakers(model, structure.heldout_speakers,
                                      random.Random(f"heldout-speakers-{structure.seed}"), prefix="new")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(f"sentences-{structure.seed}")
    write_split(out, "train", _sentences(rng, model, train, training_sizes(structure)), src, tgt)
    for split in ("valid", "test"):
        write_split(out, split, _sentences(rng, model, train, [structure.eval_sentences] * len(train)), src, tgt)
    if heldout:
        write_split(out, "heldout", _heldout_rows(random.Random(f"heldout-sentences-{structure.seed}"), model,
                                                   heldout, structure.heldout_sentences), src, tgt)
    else:
        remove_split(out, "heldout", src, tgt)  # an earlier corpus's held-out speakers, not this one's
    names = [t.name for t in model.traits]
    with open(os.path.join(out, "speakers.tsv"), "w", encoding="utf-8") as f:
        f.write("\t".join(["speaker", *names, "deviations", "topic"]) + "\n")
        for s in train + heldout:
            own = "; ".join(f"{item} = {french}" for item, french in s.deviations) or "-"
            f.write("\t".join([s.name, *(s.value(n) for n in names), own, s.topic or "-"]) + "\n")
    with open(os.path.join(out, "speakers.json"), "w", encoding="utf-8") as f:
        json.dump(dict(model.to_json(), dimensions=structure_json(structure),
                       speakers={s.name: s.truth() for s in train + heldout}), f, ensure_ascii=False, indent=1)
        f.write("\n")
    return train + heldout


def structure_json(structure: Structure) -> Dict:
    """A structure's fields, as JSON (fractions as text)."""
    return {f.name: (str(getattr(structure, f.name)) if isinstance(getattr(structure, f.name), Fraction)
                     else getattr(structure, f.name)) for f in fields(structure)}


def list_structures() -> str:
    """One line per named structure: its name, half, seed and where it differs from ``base``."""
    width = max(len(name) for name in SUITE)
    return "\n".join(f"{s.name:<{width}}  {s.half:<6}  seed {s.seed:<6}  {s.describe()}" for s in SUITE.values())

