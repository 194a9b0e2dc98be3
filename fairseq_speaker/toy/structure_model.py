"""The generative model of a structure of the corpus suite (:mod:`fairseq_speaker.toy.structures`), all its Bayes
oracle (:mod:`fairseq_speaker.toy.oracle`) may know of it: its traits (:class:`TraitModel`: the phrases each marks and
how each value translates them), the joint prior over the traits' values and the words the topic of a sentence
chooses (:class:`StructureModel`), drawn from the structure's seed alone by :func:`build_model` (the phrases made-up
words, none a word of the corpus's frames). Its siblings: :mod:`fairseq_speaker.toy.structures` (the structures of the
suite) and :mod:`fairseq_speaker.toy.structure_corpus` (the speakers and sentences drawn from the model).
"""

import random
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Dict, List, Tuple

from fairseq_speaker.toy.lexicon import (
    ADDRESS_VERBS, ADDRESSES, GENDERED_ADJECTIVES, GENDERS, INVARIABLE_ADJECTIVES, NOUNS, PLACES, PROFESSION_NOUNS,
    STYLE_ITEMS, TIMES, Styles, style_word)
from fairseq_speaker.toy.structures import Structure

#: the value of a trait whose speakers choose at random, each time anew
RANDOM = "random"
#: the trait of the words the topic of their sentence chooses
TOPIC = "topic"
#: with ``correlated``, the probability that a speaker keeps their style's form of address (or gender)
BELONGS = Fraction(9, 10)
#: the topics: name -> (English context, French context)
TOPICS = {"hospital": ("at the hospital", "à l' hôpital"), "police": ("at the police station", "au commissariat"),
          "school": ("at school", "à l' école")}
#: with ``topics``, the phrases whose translation the topic chooses
TOPIC_ITEMS = 6


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

