#!/usr/bin/env python
"""Where new speakers' style words are lost in a model with its speakers' words: the memory's own choice beside the
decoded one (docs/speaker_learning.md, "Where new speakers' style words are lost").

For each n of a ``fairseq-speaker-onboarding-eval`` run on a styles-mode corpus, every held-out speaker is given the
words of their first n sentences in the checkpoint's memory (as onboarding gives them), and each style word of their
evaluated sentences is counted by

- whether the speaker said it, or one of its rivals, in those n sentences (``said``) or not (``unseen``);
- the memory's choice: right when its bias for the expected word is above its bias for every rival (no network);
- the decoded choice: right as ``fairseq-speaker-onboarding-eval`` scores it (the expected word and no rival);
- for a word the memory chose right and the decoding did not: whether the rival decoded takes another article
  (``la bécane`` for ``le vélo``: a choice made a step before the noun, where the memory's bias is not added) or
  the same one (``le mec`` for ``le gars``)::

    fairseq-speaker-onboarding-eval st/bin --path words.pt --heldout-prefix ho/heldout --shots 0 1 3 10 30 --out oe
    python scripts/words_choices.py st/bin --path words.pt --onboarding oe --heldout-prefix ho/heldout

The corpus's phrases and articles are read from the ``speakers.json`` beside the held-out files (``--oracle``).
"""

import argparse
import collections
import json
import os
import sys
from typing import Dict, List

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fairseq.data import Dictionary  # noqa: E402

from fairseq_speaker.analysis.speaker_words import read_traits  # noqa: E402
from fairseq_speaker.data import read_lines  # noqa: E402
from fairseq_speaker.modules.speaker_words import CHECKPOINT_KEY, from_state  # noqa: E402


def articles(speakers_json: str) -> Dict[str, str]:
    """Each variant's noun -> its article (``bécane`` -> ``la``), from a styles-mode corpus model."""
    with open(speakers_json, encoding="utf-8") as f:
        items = json.load(f)["items"]
    return {phrase.rsplit(" ", 1)[1]: phrase.rsplit(" ", 1)[0] for variants in items.values() for phrase in variants}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", help="the data directory the model was trained on (its target dictionary)")
    parser.add_argument("--path", required=True, help="the checkpoint with its speakers' words that was evaluated")
    parser.add_argument("--onboarding", required=True, help="the fairseq-speaker-onboarding-eval --out folder")
    parser.add_argument("--heldout-prefix", required=True)
    parser.add_argument("--target-lang", default="fr")
    parser.add_argument("--oracle", help="the corpus model (default: speakers.json beside the held-out files)")
    args = parser.parse_args()

    dictionary = Dictionary.load(os.path.join(args.data, f"dict.{args.target_lang}.txt"))
    state = torch.load(args.path, map_location="cpu", weights_only=False)["model"]
    if CHECKPOINT_KEY not in state:
        sys.exit(f"{args.path}: no speakers' words (write them with fairseq-speaker-words)")
    words = from_state(state[CHECKPOINT_KEY], len(dictionary), args.path)
    known = words.num_speakers
    article = articles(args.oracle or os.path.join(os.path.dirname(args.heldout_prefix), "speakers.json"))

    targets = read_lines(f"{args.heldout_prefix}.{args.target_lang}")
    labels = read_lines(f"{args.heldout_prefix}.spk")
    traits = read_traits(f"{args.heldout_prefix}.traits")
    lines: Dict[str, List[int]] = collections.OrderedDict()
    for i, label in enumerate(labels):
        lines.setdefault(label, []).append(i)
    with open(os.path.join(args.onboarding, "onboarding.json"), encoding="utf-8") as f:
        run = json.load(f)
    evaluated = [i - 1 for i in run["eval_lines"]]
    row_of = {label: known + j for j, label in enumerate(lines)}

    print("| n | said: style words | decoded right | unseen: style words | memory's choice right | decoded right "
          "| memory right, decoded wrong: another article | the same article |")
    print("|---|---|---|---|---|---|---|---|")
    for n in sorted(r["n"] for r in run["rows"] if r["n"] > 0):
        hypotheses = dict(zip(evaluated, read_lines(os.path.join(args.onboarding, f"hypotheses.n{n}.txt"))))
        words.resize(known)
        for label, ids in lines.items():
            words.set_words(row_of[label], [dictionary.encode_line(targets[i], add_if_not_exist=False) for i in ids[:n]])
        count = collections.Counter()
        for label, ids in lines.items():
            bias = words.bias_row(row_of[label])
            said = {dictionary[int(w)] for w in words.words_of(row_of[label])}
            for i in ids[run["adapt_sentences"]:]:
                decoded_words = set(hypotheses[i].split())
                for t in traits[i]:
                    if t.trait != "style":
                        continue
                    kind = "said" if ({t.expected, *t.alternatives} & said) else "unseen"
                    decoded = t.expected in decoded_words and not any(a in decoded_words for a in t.alternatives)
                    memory = float(bias[dictionary.index(t.expected)]) > max(
                        float(bias[dictionary.index(a)]) for a in t.alternatives)
                    count[kind] += 1
                    count[kind, "decoded"] += decoded
                    count[kind, "memory"] += memory
                    rivals = [a for a in t.alternatives if a in decoded_words]
                    if kind == "unseen" and memory and not decoded and rivals:
                        same = article.get(rivals[0]) == article.get(t.expected)
                        count["same" if same else "other"] += 1

        def share(a, b):
            return f"{100 * a / b:.1f}%" if b else "-"

        print(f"| {n} | {count['said']} | {share(count['said', 'decoded'], count['said'])} | {count['unseen']} "
              f"| {share(count['unseen', 'memory'], count['unseen'])} | {share(count['unseen', 'decoded'], count['unseen'])} "
              f"| {count['other']} | {count['same']} |")


if __name__ == "__main__":
    main()
