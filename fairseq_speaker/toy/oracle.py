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
"""

from typing import Dict, List, Sequence, Set, Tuple

from fairseq_speaker.analysis.speaker_words import Trait

ORACLES = ("traits revealed", "words seen")


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
