"""Small models of the corpus suite's structures, shared by the tests of the oracle (tests/unit/test_structures.py)
and of the learned-tables oracle (tests/unit/test_learned_tables.py)."""

import itertools
import math
import random
from dataclasses import replace
from fractions import Fraction

from fairseq_speaker.analysis.speaker_words import Trait
from fairseq_speaker.toy.corpus import style_word
from fairseq_speaker.toy.structure_model import (
    RANDOM,
    TOPICS,
    StructureModel,
    TraitModel,
    _phrases,
    address_trait,
)
from fairseq_speaker.toy.structures import Structure


def tiny_model(rng: random.Random, correlated: bool = True, random_share: bool = False, early: bool = False,
               topics: bool = False) -> StructureModel:
    """A style of 2-3 values (and ``random``) over 2-3 phrases of 2-3 translations, an address and a gender of one
    phrase each; the joint prior a random distribution over the values (a product of random marginals if not
    ``correlated``); with ``topics``, two topic phrases chosen by three topics."""
    ways = [rng.choice([2, 3]) for _ in range(rng.choice([2, 3]))]
    if early:
        items = {}
        for j, n in enumerate(ways):
            items.update(_phrases(rng, [f"w{j}x{i}" for i in range(n + 1)], 1, n, True))
    else:
        items = {f"the {c}": tuple(f"le {c}{i}" for i in range(n)) for c, n in zip("abc", ways)}
    values = [str(k) for k in range(rng.choice([2, 3]))]
    table = {k: {item: rng.choice(options) for item, options in items.items()} for k in values}
    style = TraitModel("style", tuple(values) + ((RANDOM,) if random_share else ()), items, table,
                       rng.choice([Fraction(0), Fraction(1, 10), Fraction(3, 10), Fraction(3, 5)]))
    gender = TraitModel("gender", ("f", "m"), {"tired": ("fatigué", "fatiguée")},
                        {"f": {"tired": "fatiguée"}, "m": {"tired": "fatigué"}})
    address = address_trait()
    traits = [gender, address, style]
    if correlated:
        weights = {z: Fraction(rng.randint(1, 9)) for z in itertools.product(*(t.values for t in traits))}
    else:
        marginals = [{v: Fraction(rng.randint(1, 9)) for v in t.values} for t in traits]
        weights = {z: math.prod(m[v] for m, v in zip(marginals, z)) for z in itertools.product(*marginals)}
    total = sum(weights.values())
    topic_items, chosen = {}, {}
    if topics:
        topic_items = {f"the t{j}": tuple(f"le t{j}y{i}" for i in range(3)) for j in range(2)}
        chosen = {t: {item: options[i] for item, options in topic_items.items()} for i, t in enumerate(TOPICS)}
    return StructureModel("tiny", traits, {z: w / total for z, w in weights.items()}, topic_items, chosen)


def word_of(model: StructureModel, trait: str, item: str, translation: str) -> Trait:
    options = model.trait(trait).items[item]
    return Trait(trait, style_word(translation), tuple(style_word(o) for o in options if o != translation))


def small(structure: Structure) -> Structure:
    """The structure's model at a size for a unit test."""
    return replace(structure, speakers=16, sentences=6, eval_sentences=1, heldout_speakers=4, heldout_sentences=8)
