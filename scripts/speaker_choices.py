#!/usr/bin/env python
"""The word choices a corpus's speakers make and the traits that group them, found from the parallel text alone
(fairseq_speaker/analysis/choices.py; docs/speaker_learning.md, "The choices a corpus shows")::

    python scripts/speaker_choices.py st/raw/train --source-lang en --target-lang fr

reads ``PREFIX.{src}``, ``PREFIX.{tgt}`` and ``PREFIX.spk`` (tokenized text, one sentence a line) and prints each
trait: its choices (the source word each translates, and the alternatives), the number of kinds of speaker chosen by
the held-out speakers' choices, how much better than everyone's rates the kinds predict them (nats a choice; a trait
of 0 is not kept in the memory) and the held-out log-likelihood of every number tried. ``--oracle speakers.json`` (a styles-mode toy corpus's model) also says which of
the corpus's ambiguous phrases were found with exactly their translations.
"""

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fairseq_speaker.analysis.choices import corpus_kinds  # noqa: E402
from fairseq_speaker.data import check_utf8, read_lines, read_speaker_file  # noqa: E402
from fairseq_speaker.errors import UserError, fail  # noqa: E402

PROG = "speaker_choices.py"
ORACLE_FIX = "give the speakers.json of a styles-mode toy corpus (python -m fairseq_speaker.toy.corpus --styles K)"


def read_oracle(path: str) -> dict:
    """The ambiguous phrases of a styles-mode toy corpus's ``speakers.json`` and their translations (its
    ``items``); a :class:`UserError` naming the file when it is missing or not such a file."""
    if not os.path.isfile(path):
        raise UserError(f"--oracle {path}: not found; {ORACLE_FIX}")
    check_utf8(path)
    with open(path, encoding="utf-8") as f:
        try:
            items = json.load(f).get("items")
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{e.lineno}: not JSON ({e.msg}); {ORACLE_FIX}") from None
        except AttributeError:  # JSON, but not an object
            items = None
    if not isinstance(items, dict) or not all(isinstance(t, list) for t in items.values()):
        raise UserError(f"{path}: not the speakers.json of a styles-mode toy corpus (no 'items': phrase -> "
                        f"translations); {ORACLE_FIX}")
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prefix", help="the corpus's files without their extension (st/raw/train)")
    parser.add_argument("--source-lang", default="en")
    parser.add_argument("--target-lang", default="fr")
    parser.add_argument("--speaker-suffix", default="spk")
    parser.add_argument("--oracle", help="a styles-mode corpus's speakers.json, to compare the choices found with")
    args = parser.parse_args()

    start = time.perf_counter()
    try:
        sources = [line.split() for line in read_lines(f"{args.prefix}.{args.source_lang}")]
        targets = [line.split() for line in read_lines(f"{args.prefix}.{args.target_lang}")]
        # the speaker files' one reader and rules (docs/usage.md, "File formats"): a byte-order mark starting the
        # file is dropped, one inside a label refused
        speakers = read_speaker_file(f"{args.prefix}.{args.speaker_suffix}")
        items = read_oracle(args.oracle) if args.oracle else None
    except UserError as e:  # a file missing, not UTF-8 or not what it should be: the message names it
        fail(str(e), PROG)
    if not len(sources) == len(targets) == len(speakers):
        fail(f"{args.prefix}: {len(sources)} source lines, {len(targets)} target lines and {len(speakers)} "
             f"speaker labels; they must be as many", PROG)
    found = corpus_kinds(sources, targets, speakers, keep_everyones=True)
    choices = [choice for trait, _ in found for choice in trait]
    print(f"{len(set(speakers))} speakers, {len(sources)} sentences: {len(choices)} choices")
    print("\n| trait | choices (source word: alternatives) | kinds | held-out gain | held-out by kinds |\n"
          "|---|---|---|---|---|")
    unscored = 0
    for i, (trait, model) in enumerate(found, 1):
        listed = "; ".join(f"{choice.anchor}: {' '.join(choice.alternatives)}" for choice in trait)
        heldout = ", ".join(f"{k}: {value:.3f}" for k, value in model.heldout.items())
        gain = "-" if math.isnan(model.gain) else f"{model.gain:.3f}"  # it printed nan, unexplained
        unscored += gain == "-"
        print(f"| {i} | {listed} | {model.k} | {gain} | {heldout} |")
    if unscored:
        print(f"\n-: {unscored} trait(s) not scored on held-out speakers (too few speakers made its choices to hold "
              f"some out)")
    if items is not None:
        truth = {phrase: {t.split()[-1] for t in translations} for phrase, translations in items.items()}
        alternatives = [set(c.alternatives) for c in choices]
        exact = [p for p, words in truth.items() if words in alternatives]
        part = [p for p, words in truth.items() if p not in exact and any(a < words for a in alternatives)]
        print(f"\nof the corpus's {len(truth)} phrases, {len(exact)} found with exactly their translations, "
              f"{len(part)} with some of them, {len(truth) - len(exact) - len(part)} not found")
    print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
