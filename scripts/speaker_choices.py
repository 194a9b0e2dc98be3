#!/usr/bin/env python
"""The word choices a corpus's speakers make and the traits that group them, found from the parallel text alone
(fairseq_speaker/analysis/choices.py; docs/speaker_learning.md, "The choices a corpus shows")::

    python scripts/speaker_choices.py st/raw/train --source-lang en --target-lang fr

reads ``PREFIX.{src}``, ``PREFIX.{tgt}`` and ``PREFIX.spk`` (tokenized text, one sentence a line) and prints each
trait: its choices (the source word each translates, and the alternatives), the number of kinds of speaker BIC chose,
and the BIC of every number tried. ``--oracle speakers.json`` (a styles-mode toy corpus's model) also says which of
the corpus's ambiguous phrases were found with exactly their translations.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fairseq_speaker.analysis.choices import corpus_kinds  # noqa: E402
from fairseq_speaker.data import read_lines  # noqa: E402
from fairseq_speaker.errors import UserError  # noqa: E402


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
        speakers = [line.strip() for line in read_lines(f"{args.prefix}.{args.speaker_suffix}")]
    except UserError as e:  # a file missing or not UTF-8: the message names it
        sys.exit(str(e))
    if not len(sources) == len(targets) == len(speakers):
        sys.exit(f"{args.prefix}: {len(sources)} source lines, {len(targets)} target lines and {len(speakers)} "
                 f"speaker labels; they must be as many")
    found = corpus_kinds(sources, targets, speakers)
    choices = [choice for trait, _ in found for choice in trait]
    print(f"{len(set(speakers))} speakers, {len(sources)} sentences: {len(choices)} choices")
    print("\n| trait | choices (source word: alternatives) | kinds | BIC by kinds |\n|---|---|---|---|")
    for i, (trait, model) in enumerate(found, 1):
        listed = "; ".join(f"{choice.anchor}: {' '.join(choice.alternatives)}" for choice in trait)
        bic = ", ".join(f"{k}: {value:.0f}" for k, value in model.bic.items())
        print(f"| {i} | {listed} | {model.k} | {bic} |")
    if args.oracle:
        with open(args.oracle, encoding="utf-8") as f:
            items = json.load(f)["items"]
        truth = {phrase: {t.split()[-1] for t in translations} for phrase, translations in items.items()}
        alternatives = [set(c.alternatives) for c in choices]
        exact = [p for p, words in truth.items() if words in alternatives]
        part = [p for p, words in truth.items() if p not in exact and any(a < words for a in alternatives)]
        print(f"\nof the corpus's {len(truth)} phrases, {len(exact)} found with exactly their translations, "
              f"{len(part)} with some of them, {len(truth) - len(exact) - len(part)} not found")
    print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
