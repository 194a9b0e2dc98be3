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
oracle over all their traits at once (:class:`~fairseq_speaker.toy.posterior.StructurePosterior`): a posterior over the joint of the speaker's
values (traits may be correlated), speakers who choose at random, and words chosen by the sentence's topic, which
it predicts from the source. :func:`bayes_accuracy` and :func:`onboarding_oracle` take either model.

:func:`bayes_accuracy` scores a test split of the training speakers; :func:`onboarding_oracle`
scores held-out speakers from their first n sentences (``heldout.*``, as
``fairseq-speaker-onboarding-eval`` adapts on them). From the command line::

    python -m fairseq_speaker.toy.oracle RAW --shots 0 1 3 10 30

The module holds the oracles' scores of a corpus's splits (:func:`oracle_accuracy`, :func:`bayes_accuracy`,
:func:`onboarding_oracle`) and the command (:func:`main`); what a speaker's sentences tell the Bayes oracle, the
posterior math of both models (:class:`~fairseq_speaker.toy.posterior.SpeakerPosterior`,
:class:`~fairseq_speaker.toy.posterior.StructurePosterior`), is :mod:`fairseq_speaker.toy.posterior`.
"""

import argparse
import json
import os
from fractions import Fraction
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from fairseq_speaker.analysis.speaker_words import Trait, read_traits
from fairseq_speaker.toy.corpus import TRAITS, Styles, read_styles
from fairseq_speaker.toy.learned_tables import LearnedTables
from fairseq_speaker.toy.posterior import SCORES, SpeakerPosterior, StructurePosterior, speaker_posterior
from fairseq_speaker.toy.structure_model import StructureModel

ORACLES = ("traits revealed", "words seen")
#: the exact oracle of the styles mode
BAYES = "Bayes"


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


def _split(parser, raw: str, split: str):
    """The speaker labels and traits of ``split``, one of each a sentence (else a parser error naming both files)."""
    try:
        labels = _lines(os.path.join(raw, f"{split}.spk"))
        traits = read_traits(os.path.join(raw, f"{split}.traits"))
    except OSError as e:  # a traceback
        parser.error(f"{e.filename}: {e.strerror}: the oracle reads each split's speakers ({split}.spk) and traits "
                     f"({split}.traits), as python -m fairseq_speaker.toy.corpus writes them")
    if len(labels) != len(traits):  # a ValueError's traceback that named no file
        parser.error(f"{os.path.join(raw, split + '.spk')} has {len(labels)} speaker labels but "
                     f"{os.path.join(raw, split + '.traits')} {len(traits)} lines: one of each a sentence, in the "
                     f"same order")
    return labels, traits


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="The Bayes limit of a styles corpus: the share of speaker words "
                                     "the Bayes decision gets right, for the test split and for held-out speakers "
                                     "known from their first n sentences.")
    parser.add_argument("raw", help="the corpus's folder (python -m fairseq_speaker.toy.corpus --styles K)")
    parser.add_argument("--shots", type=int, nargs="+", default=None, metavar="N",
                        help="sentences of each held-out speaker learned from (heldout.*), each n scored on the "
                        "speakers' sentences after their first max(N) (default: 0 1 3 10 30)")
    parser.add_argument("--score", choices=SCORES, default="decision",
                        help="decision: the Bayes decision against the test's words; posterior: its expected accuracy")
    parser.add_argument("--tables", choices=TABLES, default="known",
                        help="known: the structure's tables, as the generative model has them (the Bayes limit); "
                        "learned: as the training split shows them to an oracle told every other training speaker's "
                        "values (a corpus of the suite only; the limit of a learner of this corpus)")
    args = parser.parse_args(argv)
    shots_given = args.shots is not None
    args.shots = args.shots if shots_given else [0, 1, 3, 10, 30]
    if min(args.shots) < 0:  # a ValueError's traceback
        parser.error(f"--shots: numbers of sentences must be 0 or more, got {min(args.shots)}")
    twice = sorted({n for n in args.shots if args.shots.count(n) > 1})
    if twice:  # the row was printed twice
        parser.error(f"--shots: {', '.join(map(str, twice))} given twice: give each number once")
    if shots_given and not os.path.exists(os.path.join(args.raw, "heldout.spk")):
        parser.error(f"--shots: {args.raw} has no held-out speakers (heldout.spk), whose first n sentences it counts: "
                     f"write the corpus with held-out speakers, or leave --shots out")
    path = os.path.join(args.raw, "speakers.json")
    if not os.path.exists(path):
        parser.error(f"{path} not found: the Bayes oracle needs a corpus of the styles mode (--styles K) or of the "
                     f"corpus suite (--structure NAME)")
    try:
        styles = read_styles(path)
    except (ValueError, KeyError, TypeError) as e:  # not JSON (a traceback), or not a corpus's
        parser.error(f"{path}: not the speakers.json of a corpus ({type(e).__name__}: {e}): write the corpus again "
                     f"(python -m fairseq_speaker.toy.corpus)")
    train_speakers, train_traits = _split(parser, args.raw, "train")
    test_speakers, test_traits = _split(parser, args.raw, "test")
    strangers = [(i, label) for i, label in enumerate(test_speakers, 1) if label not in set(train_speakers)]
    if strangers:  # scored as a speaker known from no sentence, without a word
        parser.error(f"{os.path.join(args.raw, 'test.spk')}:{strangers[0][0]}: speaker {strangers[0][1]!r} has no "
                     f"training sentence (train.spk): the test split's speakers are the training speakers")
    tables = None
    if args.tables == "learned":
        if not isinstance(styles, StructureModel):
            parser.error(f"--tables learned: {path} is a corpus of the styles mode; learned tables are a reference of "
                         f"the corpus suite's structures (python -m fairseq_speaker.toy.corpus --structure NAME)")
        tables = learned_tables(path, train_speakers, train_traits)
    rows = [("test", bayes_accuracy(styles, train_speakers, train_traits, test_speakers, test_traits, args.score,
                                    tables))]
    if os.path.exists(os.path.join(args.raw, "heldout.spk")):
        labels, traits = _split(parser, args.raw, "heldout")
        fewest = min(labels.count(s) for s in set(labels))
        if max(args.shots) >= fewest:
            parser.error(f"a held-out speaker has {fewest} sentences: --shots must stay below, to leave some to score")
        for n in sorted(args.shots):
            rows.append((f"held out, n = {n}",
                         onboarding_oracle(styles, labels, traits, n, max(args.shots), args.score, tables)))
    print(_format(rows))


if __name__ == "__main__":
    main()
