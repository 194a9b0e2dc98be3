"""Speaker words: the words of a reference that depend on its speaker, and how many a system got right.

A traits file (``{split}.traits``, JSON lines) holds, for every sentence, its speaker-dependent words:
``[{"trait": "gender", "expected": "fatiguée", "alternatives": ["fatigué"]}, ...]``. The toy corpus
(:mod:`fairseq_speaker.toy.corpus`) writes them; the demo and
``fairseq-speaker-onboarding-eval`` score hypotheses against them with :func:`trait_accuracy`.
"""

import json
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple


@dataclass
class Trait:
    """One speaker-dependent word of a reference: the word expected and its rivals."""

    trait: str
    expected: str
    alternatives: Tuple[str, ...]


def read_traits(path: str) -> List[List[Trait]]:
    with open(path, encoding="utf-8") as f:
        return [[Trait(t["trait"], t["expected"], tuple(t["alternatives"])) for t in json.loads(line)]
                for line in f]


def trait_accuracy(hypotheses: Sequence[str], traits: Sequence[Sequence[Trait]]) -> Dict[str, float]:
    """Share of speaker-dependent words a system got right, overall and per trait.

    A word counts as right when the hypothesis contains the expected word and none
    of its rivals (saying both is not knowing which).
    """
    if len(hypotheses) != len(traits):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(traits)} lines of traits")
    right: Dict[str, int] = {}
    total: Dict[str, int] = {}
    for hyp, sentence_traits in zip(hypotheses, traits):
        words = set(hyp.split())
        for t in sentence_traits:
            ok = t.expected in words and not any(a in words for a in t.alternatives)
            for key in ("all", t.trait):
                total[key] = total.get(key, 0) + 1
                right[key] = right.get(key, 0) + int(ok)
    return {key: right[key] / total[key] for key in total}
