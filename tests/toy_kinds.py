"""Kinds of speaker with a known answer for the toy corpus: its gender agreements as one trait of two kinds.

The toy's 8 training speakers are too few for ``fairseq-speaker-words`` to find kinds of its own (each trait comes out
with one kind), so the tests that show what a speaker's words suggest give the memory these: a woman says "fatiguée",
a man "fatigué" (``fairseq_speaker/toy/lexicon.py``), and ``speakers.tsv`` records who is which.
"""

import csv
import os
from typing import Dict, List, Tuple

import numpy as np

from fairseq_speaker.modules.speaker_words import speaker_words_of
from fairseq_speaker.modules.word_kinds import TraitKinds
from fairseq_speaker.toy.lexicon import GENDERED_ADJECTIVES

#: the agreements of the toy's sentences, (masculine, feminine)
GENDERED: List[Tuple[str, str]] = list(GENDERED_ADJECTIVES.values()) + [("allé", "allée")]


def attach_gender_kinds(translator) -> Dict[str, List[str]]:
    """Give the translator's memory of its speakers' words (it must have one) the gender trait as kinds 1 (men) and
    2 (women), and a trait of one kind (which tells nothing, so no speaker is shown it). Returns the words of each
    kind: {"m": [...], "f": [...]}."""
    dictionary = translator.task.target_dictionary
    pairs = [pair for pair in GENDERED if all(word in dictionary.indices for word in pair)]
    choices = [np.array([dictionary.index(m), dictionary.index(f)]) for m, f in pairs]
    gender = TraitKinds(choices, np.array([0.5, 0.5]), [np.array([[0.9, 0.1], [0.1, 0.9]]) for _ in pairs])
    everyone = TraitKinds(choices[:1], np.array([1.0]), [np.array([[0.5, 0.5]])])
    speaker_words_of(translator.model).kinds = [gender, everyone]
    return {"m": [m for m, _ in pairs], "f": [f for _, f in pairs]}


def genders(raw: str) -> Dict[str, str]:
    """Each toy speaker's gender, "m" or "f", as the corpus generator recorded it (``raw/speakers.tsv``)."""
    with open(os.path.join(raw, "speakers.tsv"), encoding="utf-8") as f:
        return {row["speaker"]: row["gender"] for row in csv.DictReader(f, delimiter="\t")}
