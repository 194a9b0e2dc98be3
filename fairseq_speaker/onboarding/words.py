"""``fairseq-speaker-words``: a checkpoint that remembers every trained speaker's words.

Reads the target side of every known speaker's sentences in a split of the data the model was trained on (default:
``train``) and writes a copy of the checkpoint whose decoder keeps them (:mod:`fairseq_speaker.modules.speaker_words`):
generation (``fairseq-generate``, ``fairseq-interactive``, ``SpeakerTranslator``, the service) then re-ranks the words
the network finds plausible by what each speaker and the speakers most like them said. Speakers onboarded into the
written checkpoint get the words of their own sentences. Nothing is trained; the network and the speakers' rows are
copied as they are.

Usage::

    fairseq-speaker-words DATA --path checkpoints/checkpoint_best.pt --save words.pt \
        [--weight 6 --window 2 --add-to log_probs --rank-choices posterior --kinds-prior 0.3]
"""

import argparse
import math
import os
import time
from typing import List, Optional, Sequence

import numpy as np

from fairseq_speaker.analysis.choices import corpus_kinds
from fairseq_speaker.errors import command
from fairseq_speaker.modules import speaker_words
from fairseq_speaker.modules.speaker_words import WordOptions
from fairseq_speaker.onboarding.refit import open_with_sentences
from fairseq_speaker.runtime import add_runtime_arguments, check_threads, configure_output, start_threads


def _non_negative(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value!r}") from None
    if not (math.isfinite(number) and number >= 0):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value!r}")
    return number


def _positive(value: str) -> float:
    number = _non_negative(value)
    if number == 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value!r}")
    return number


def _share(value: str) -> float:
    number = _non_negative(value)
    if number > 1:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {value!r}")
    return number


def build_parser() -> argparse.ArgumentParser:
    defaults = WordOptions()
    parser = argparse.ArgumentParser(
        prog="fairseq-speaker-words",
        description="Write a copy of a checkpoint that remembers the words every trained speaker said, so that "
                    "decoding chooses among the words the network finds plausible as each speaker and the speakers "
                    "most like them did (docs/speaker_learning.md, \"The speakers' words\").")
    parser.add_argument("data", help="the data directory the model was trained on (dictionaries, binarized data and "
                        "speaker files)")
    parser.add_argument("--path", required=True, help="the trained checkpoint")
    parser.add_argument("--save", required=True, help="where to write the checkpoint with its speakers' words (a new file)")
    parser.add_argument("--subset", default="train", help="the split whose target sentences are remembered (the one the "
                        "speakers were trained on)")
    parser.add_argument("--weight", type=_non_negative, default=defaults.weight,
                        help="nats per unit of log ratio of a speaker's rate of a word to everyone's (0: no effect)")
    parser.add_argument("--window", type=_non_negative, default=defaults.window,
                        help="a generation step re-ranks the words within this many nats of its most probable word")
    parser.add_argument("--own", type=_share, default=defaults.own,
                        help="the share of a speaker's rate of a word taken from their own sentences")
    parser.add_argument("--neighbours", type=_share, default=defaults.neighbours,
                        help="the share taken from the sentences of the speakers most like them (the rest: everyone's)")
    parser.add_argument("--neighbours-k", type=int, default=defaults.k, metavar="K",
                        help="how many speakers most like a speaker are read")
    parser.add_argument("--power", type=_non_negative, default=defaults.power,
                        help="the neighbours' weights are their similarity to the speaker to this power")
    parser.add_argument("--evidence", type=_non_negative, default=defaults.evidence,
                        help="a speaker's bias is scaled by m / (m + this), m the distinct words they said: the less "
                        "is known of a speaker, the less it moves their words")
    parser.add_argument("--add-to", choices=speaker_words.ADD_TO, default=defaults.add_to,
                        help="what a generation step's bias is added to: the step's log-probabilities, so that a "
                        "speaker's noun also chooses the article before it (default), or its logits, renormalized "
                        "at the step (0.6.0 and before)")
    parser.add_argument("--kinds", action=argparse.BooleanOptionalAction, default=True,
                        help="learn the word choices the speakers make, the traits that group them and each trait's "
                        "kinds of speaker from the split's sentence pairs (docs/speaker_learning.md, \"The choices a "
                        "corpus shows\"), so that a speaker's rivals they never said follow their posterior over the "
                        "kinds rather than their neighbours' votes (default; --no-kinds: the neighbours alone)")
    parser.add_argument("--rank-choices", choices=speaker_words.RANK_CHOICES, default=defaults.rank_choices,
                        help="how the alternatives of a choice of the kinds are ranked: by the speaker's posterior "
                        "predictive, their own choices first, every other word then only raised (default), or by "
                        "their rate ratio as every other word (0.7.0)")
    parser.add_argument("--kinds-prior", type=_positive, default=defaults.kinds_prior, metavar="ALPHA",
                        help="how many of a speaker's own choices the kinds' prediction of a choice counts as (below "
                        "1: an alternative the speaker said outranks any they did not)")
    parser.add_argument("--user-dir", default=None,
                        help="a package registering more speaker bias variants or model families")
    add_runtime_arguments(parser)
    return parser


def learned_kinds(sentences) -> List[speaker_words.TraitKinds]:
    """The traits' kinds of speaker of the sentence pairs of each speaker (name -> [(source ids, target ids)]), their
    choices as target word ids (:func:`fairseq_speaker.analysis.choices.corpus_kinds`, on the ids as words)."""
    sources, targets, labels = [], [], []
    for name, pairs in sentences.items():
        for source, target in pairs:
            sources.append([str(i) for i in source.tolist()])
            targets.append([str(i) for i in target.tolist()])
            labels.append(name)
    return [speaker_words.TraitKinds([np.array([int(w) for w in c.alternatives]) for c in trait], model.prior,
                                     model.alternatives)
            for trait, model in corpus_kinds(sources, targets, labels)]


@command("fairseq-speaker-words")
def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_output(args.verbose)
    if args.neighbours_k < 1:
        parser.error(f"--neighbours-k must be at least 1, got {args.neighbours_k}")
    if args.own + args.neighbours > 1:
        parser.error(f"--own and --neighbours are shares of one rate: their sum must be at most 1, got "
                     f"{args.own} + {args.neighbours}")
    check_threads(parser, args)
    if os.path.abspath(args.save) == os.path.abspath(args.path):
        parser.error("--save must not be the checkpoint given by --path: write the new model to a new file")
    start_threads(args.threads)
    start = time.perf_counter()
    checkpoint, sentences = open_with_sentences(args)
    dictionary = checkpoint.task.target_dictionary
    options = WordOptions(weight=args.weight, window=args.window, own=args.own, neighbours=args.neighbours,
                          k=args.neighbours_k, power=args.power, evidence=args.evidence, add_to=args.add_to,
                          rank_choices=args.rank_choices, kinds_prior=args.kinds_prior)
    speakers = checkpoint.task.speaker_dictionary
    words = speaker_words.remembered(dictionary, checkpoint.speaker_bias.num_speakers,
                                     {speakers.index(name): [target for _, target in pairs]
                                      for name, pairs in sentences.items()}, options)
    before = speaker_words.speaker_words_of(checkpoint.model)
    kept = []  # a checkpoint that remembers words already: its speakers onboarded since keep theirs
    if before is not None:
        split = {speakers.index(name) for name in sentences}
        for row in range(words.num_speakers):
            if row not in split and len(before.words_of(row)):
                words.set_words(row, [before.words_of(row)])
                kept.append(row)
    if args.kinds:
        words.kinds = learned_kinds(sentences)
        print("kinds of speaker: " + ("; ".join(f"trait {i}: {len(t.choices)} choices, {len(t.prior)} kinds"
                                                for i, t in enumerate(words.kinds, 1)) or "no choice found"))
    speaker_words.attach(checkpoint.model, words)
    checkpoint.save(args.save)
    counts = sorted(len(words.words_of(speakers.index(name))) for name in sentences)
    print(f"the words of {len(sentences)} speakers ({counts[len(counts) // 2]} distinct words each on median) "
          f"remembered in {time.perf_counter() - start:.1f} s"
          + (f", those of {len(kept)} more kept from {args.path}" if kept else "") + f"; saved to {args.save}")


if __name__ == "__main__":
    main()
