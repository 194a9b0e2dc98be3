"""``fairseq-speaker-words``: a checkpoint that remembers every trained speaker's words.

Reads the target side of every known speaker's sentences in a split of the data the model was trained on (default:
``train``) and writes a copy of the checkpoint whose decoder keeps them (:mod:`fairseq_speaker.modules.speaker_words`):
generation (``fairseq-generate``, ``fairseq-interactive``, ``SpeakerTranslator``, the service) then re-ranks the words
the network finds plausible by what each speaker and the speakers most like them said. Speakers onboarded into the
written checkpoint get the words of their own sentences. Nothing is trained; the network and the speakers' rows are
copied as they are.

The weight, the window and whether the traits' kinds of speaker are used are chosen on held-out sentences of the
corpus (:mod:`fairseq_speaker.onboarding.calibrate`): the ``valid`` split where it holds enough sentences of the
speakers, else held-out sentences of each speaker (cross-fitted). The network alone (weight 0) is a candidate: where
no setting beats it on the held-out sentences, the memory is written with weight 0, decoding as the network alone,
and the command says so. ``--weight``, ``--window`` and ``--kinds``/``--no-kinds`` fix their setting instead.

Usage::

    fairseq-speaker-words DATA --path checkpoints/checkpoint_best.pt --save words.pt \
        [--calibrate auto --heldout-subset valid] [--weight 6 --window 2 --no-kinds] \
        [--add-to log_probs --rank-choices posterior --kinds-prior 0.3]
"""

import argparse
import logging
import math
import os
import time
from typing import Optional, Sequence

from fairseq_speaker.atomic_write import check_not_an_input
from fairseq_speaker.errors import command
from fairseq_speaker.modules import speaker_words
from fairseq_speaker.modules.words_options import ADD_TO, MAX_COUNT, MAX_WEIGHT, MAX_WINDOW, RANK_CHOICES, WordOptions
from fairseq_speaker.onboarding import calibrate
from fairseq_speaker.onboarding.checkpoint import open_with_sentences
from fairseq_speaker.onboarding.words_settings import HELDOUT_SUBSET, calibrated, describe_kinds, memory_of
from fairseq_speaker.runtime import add_runtime_arguments, check_threads, configure_output, options_given, start_threads


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


def _kinds_prior(value: str) -> float:
    number = _positive(value)
    if number > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"expected a number above 0 and at most {MAX_COUNT:g}, got {value!r} (a count "
                                         f"of a speaker's choices: beyond it a speaker's own choices weigh nothing)")
    return number


def _bounded(most: float, why: str = "beyond it the memory overrides every word the network proposes",
             zero: Optional[str] = None):
    """A number from 0 to ``most`` (``why``: the reason of the bound); above 0 where ``zero`` says why."""
    def parse(value: str) -> float:
        number = _non_negative(value)
        if zero is not None and number == 0:
            raise argparse.ArgumentTypeError(f"expected a number above 0 and at most {most:g}, got {value!r} ({zero})")
        if number > most:
            raise argparse.ArgumentTypeError(f"expected a number between 0 and {most:g}, got {value!r} ({why})")
        return number
    return parse


def _share(value: str) -> float:
    number = _non_negative(value)
    if number > 1:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {value!r}")
    return number


#: the choices of --calibrate
CALIBRATE = ("auto", "split", "cross-fit", "off")
#: the default of --calibration-beam
CALIBRATION_BEAM = 5


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
    parser.add_argument("--calibrate", choices=CALIBRATE, default=None,
                        help="where the weight, the window and the kinds' use are chosen: on --heldout-subset where "
                        f"it holds at least {calibrate.MIN_SENTENCES} sentences of the speakers, else on held-out "
                        "sentences of each speaker (auto, the default); on the split only (split); on held-out "
                        "sentences of each speaker, the memory built from the others (cross-fit); or not at all, "
                        f"the defaults then (weight {defaults.weight:g}, window {defaults.window:g}, kinds on) taken "
                        "as they are (off)")
    parser.add_argument("--heldout-subset", default=None, metavar="SPLIT",
                        help=f"the split of held-out sentences of the same speakers that --calibrate auto and split "
                        f"read (default: {HELDOUT_SUBSET}; a split named here must be there)")
    parser.add_argument("--calibrate-by", choices=("decoding", "tokens"), default=None,
                        help="what chooses: the reference's words that the beam's translations of the held-out "
                        f"sentences get (at most {calibrate.MAX_DECODED} sentences, each setting the held-out tokens "
                        "do not reject; default), or the held-out tokens alone, teacher-forced (faster; blind to a "
                        "word's bias choosing the article before it)")
    parser.add_argument("--calibration-beam", type=int, default=None, metavar="N",
                        help=f"the beam of --calibrate-by decoding (the beam you decode with; default "
                        f"{CALIBRATION_BEAM})")
    parser.add_argument("--weight", type=_bounded(MAX_WEIGHT), default=None,
                        help="nats per unit of log ratio of a speaker's rate of a word to everyone's (0: no effect); "
                        "given, it is not chosen on held-out sentences")
    parser.add_argument("--window", type=_bounded(MAX_WINDOW, "a wider window puts a speaker's bias on nearly every "
                                                  "word: every translation one word repeated",
                                         zero="at 0 no word is re-ranked against another; for a memory that does "
                                              "nothing, give --weight 0"), default=None,
                        help="a generation step re-ranks the words within this many nats of its most probable word; "
                        "given, it is not chosen on held-out sentences")
    parser.add_argument("--own", type=_share, default=defaults.own,
                        help="the share of a speaker's rate of a word taken from their own sentences")
    parser.add_argument("--neighbours", type=_share, default=defaults.neighbours,
                        help="the share taken from the sentences of the speakers most like them (the rest: everyone's)")
    parser.add_argument("--neighbours-k", type=int, default=defaults.k, metavar="K",
                        help="how many speakers most like a speaker are read")
    parser.add_argument("--power", type=_non_negative, default=defaults.power,
                        help="the neighbours' weights are their similarity to the speaker to this power")
    parser.add_argument("--evidence", type=_bounded(MAX_COUNT, "a count of words: beyond it every speaker's bias is 0, "
                                                    "a memory that does nothing"), default=defaults.evidence,
                        help="a speaker's bias is scaled by m / (m + this), m the distinct words they said: the less "
                        "is known of a speaker, the less it moves their words")
    parser.add_argument("--add-to", choices=ADD_TO, default=defaults.add_to,
                        help="what a generation step's bias is added to: the step's log-probabilities, so that a "
                        "speaker's noun also chooses the article before it (default), or its logits, renormalized "
                        "at the step (0.6.0 and before)")
    parser.add_argument("--kinds", action=argparse.BooleanOptionalAction, default=None,
                        help="learn the word choices the speakers make, the traits that group them and each trait's "
                        "kinds of speaker from the split's sentence pairs (docs/speaker_learning.md, \"The choices a "
                        "corpus shows\"), so that a speaker's rivals they never said follow their posterior over the "
                        "kinds rather than their neighbours' votes (--no-kinds: the neighbours alone; neither: "
                        "chosen on held-out sentences)")
    parser.add_argument("--rank-choices", choices=RANK_CHOICES, default=None,
                        help="how the alternatives of a choice of the kinds are ranked: by the speaker's posterior "
                        f"predictive, their own choices first, every other word then only raised (default: "
                        f"{defaults.rank_choices}), or by their rate ratio as every other word (0.7.0)")
    parser.add_argument("--kinds-prior", type=_kinds_prior, default=None, metavar="ALPHA",
                        help="how many of a speaker's own choices the kinds' prediction of a choice counts as (below "
                        f"1: an alternative the speaker said outranks any they did not; default {defaults.kinds_prior})")
    parser.add_argument("--floor", action=argparse.BooleanOptionalAction, default=defaults.floor,
                        help="keep the words within the window at or above its edge, so that the memory only re-ranks "
                        "the words the network proposes (default; --no-floor: as 0.8.0, where lowering the network's "
                        "best word could let a word outside the window win)")
    parser.add_argument("--user-dir", default=None,
                        help="a package registering more speaker bias variants or model families")
    add_runtime_arguments(parser)
    return parser


def _check_calibration(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse the calibration's options that would have no effect, then fill in their defaults: each is read only
    where the settings are chosen (not with --calibrate off, nor where --weight 0, or --weight, --window and
    --kinds/--no-kinds all, fix them), --heldout-subset only by --calibrate auto and split, --calibration-beam only by
    --calibrate-by decoding. A --heldout-subset given must be there (``args.heldout_named``)."""
    idle = [option for option, value in (("--window", args.window), ("--kinds" if args.kinds else "--no-kinds",
                                                                       args.kinds)) if value is not None]
    # the estimator's own options, given other than their defaults: how a memory that acts reads the words
    estimator = options_given(parser, args, ("own", "neighbours", "neighbours_k", "power", "evidence", "add_to",
                                             "rank_choices", "kinds_prior"))
    estimator += ["--floor" if args.floor else "--no-floor"] if args.floor != parser.get_default("floor") else []
    idle += estimator
    if args.neighbours == 0:
        unread = [option for option in ("--neighbours-k", "--power") if option in estimator]
        if unread:
            parser.error(f"{' and '.join(unread)}: how the speakers most like a speaker are read, and --neighbours 0 "
                         f"reads none: drop {'it' if len(unread) == 1 else 'them'}, or give --neighbours a share")
    if args.weight == 0 and idle:
        parser.error(f"{' and '.join(idle)}: how the memory acts, and --weight 0 writes a memory that does not act (the "
                     f"network alone): drop {'it' if len(idle) == 1 else 'them'}, or give a weight above 0")
    fixed = args.weight == 0 or (args.weight is not None and args.window is not None and args.kinds is not None)
    given = [f"{option} {value}" for option, value in (("--calibrate", args.calibrate),
                                                       ("--heldout-subset", args.heldout_subset),
                                                       ("--calibrate-by", args.calibrate_by),
                                                       ("--calibration-beam", args.calibration_beam))
             if value is not None and not (option == "--calibrate" and value == "off")]
    if given and args.calibrate == "off":
        parser.error(f"{' '.join(given)}: --calibrate off chooses no settings on held-out sentences: drop "
                     f"{'it' if len(given) == 1 else 'them'}, or drop --calibrate off")
    if given and fixed:
        why = "--weight 0 writes a memory that does not act" if args.weight == 0 else \
            "--weight, --window and --kinds/--no-kinds fix every setting"
        parser.error(f"{' '.join(given)}: {why}, so nothing is chosen on held-out sentences: drop "
                     f"{'it' if len(given) == 1 else 'them'}")
    if args.calibration_beam is not None and args.calibrate_by == "tokens":
        parser.error(f"--calibration-beam {args.calibration_beam} is the beam of --calibrate-by decoding, and "
                     f"--calibrate-by tokens decodes nothing: drop one of them")
    if args.calibration_beam is not None and args.calibration_beam < 1:
        parser.error(f"--calibration-beam must be at least 1, got {args.calibration_beam}")
    if args.heldout_subset is not None and args.calibrate == "cross-fit":
        parser.error(f"--heldout-subset {args.heldout_subset} names a split for --calibrate auto or split, and "
                     f"--calibrate cross-fit holds out sentences of the remembered split itself: drop one of them")
    args.heldout_named = args.heldout_subset is not None
    args.calibrate = args.calibrate or "auto"
    args.heldout_subset = args.heldout_subset or HELDOUT_SUBSET
    args.calibrate_by = args.calibrate_by or "decoding"
    args.calibration_beam = args.calibration_beam or CALIBRATION_BEAM
    if args.heldout_subset == args.subset and (args.calibrate == "split" or args.heldout_named):
        parser.error(f"--heldout-subset {args.heldout_subset} is the split remembered (--subset): held-out sentences "
                     f"must be others")


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
    # the same file under another name too (a link, a hard link), or a file of the data folder
    check_not_an_input(args.save, "--save", [("the checkpoint given by --path", args.path)],
                       [("the data folder", args.data.split(os.pathsep)[0])])
    _check_calibration(parser, args)
    kinds_options = [f"{option} {value}" for option, value in (("--rank-choices", args.rank_choices),
                                                               ("--kinds-prior", args.kinds_prior)) if value is not None]
    if kinds_options and args.kinds is False:
        parser.error(f"{' '.join(kinds_options)}: how the kinds of speaker are used, and --no-kinds learns none: "
                     f"drop {'it' if len(kinds_options) == 1 else 'them'}, or drop --no-kinds")
    start_threads(args.threads)
    start = time.perf_counter()
    checkpoint, sentences = open_with_sentences(args)
    dictionary = checkpoint.task.target_dictionary
    before = speaker_words.speaker_words_of(checkpoint.model)  # read before the calibration attaches its own
    defaults = WordOptions()
    options = WordOptions(weight=defaults.weight if args.weight is None else args.weight,
                          window=defaults.window if args.window is None else args.window, own=args.own,
                          neighbours=args.neighbours, k=args.neighbours_k, power=args.power, evidence=args.evidence,
                          add_to=args.add_to,
                          rank_choices=defaults.rank_choices if args.rank_choices is None else args.rank_choices,
                          kinds_prior=defaults.kinds_prior if args.kinds_prior is None else args.kinds_prior,
                          floor=args.floor)
    use_kinds = args.kinds is not False
    fixed = args.weight is not None and args.window is not None and args.kinds is not None
    if args.calibrate != "off" and not (fixed or args.weight == 0):
        options, use_kinds, result = calibrated(args, checkpoint, sentences, options)
        print(result.table())
        chosen = result.chosen
        if chosen.weight == 0:
            logging.getLogger("fairseq_speaker.words").warning(
                "no setting of the memory beat the network alone on %s held-out tokens (%s): the memory is written "
                "with weight 0 and decoding is the network's; --weight fixes one anyway", result.tokens, result.heldout)
        else:
            ours, theirs = result.score(chosen), result.score(result.network.candidate)
            if ours < theirs:
                logging.getLogger("fairseq_speaker.words").warning(
                    "with --weight %g the memory does worse than the network alone on the held-out sentences (%s): "
                    "%.2f%% against %.2f%%; without --weight the command chooses", chosen.weight, result.heldout,
                    100 * ours, 100 * theirs)
        print(f"chosen: {chosen.describe()}")
    speakers = checkpoint.task.speaker_dictionary
    words = memory_of(dictionary, speakers, checkpoint.speaker_bias.num_speakers, sentences, options, kinds=use_kinds)
    kept = []  # a checkpoint that remembers words already: its speakers onboarded since keep theirs
    if before is not None:
        split = {speakers.index(name) for name in sentences}
        for row in range(words.num_speakers):
            if row not in split and len(before.words_of(row)):
                words.set_words(row, [before.words_of(row)])
                kept.append(row)
    if use_kinds:
        print("kinds of speaker: " + describe_kinds(words.kinds))
        if not words.kinds:
            logging.getLogger("fairseq_speaker.words").warning(
                "no trait of the %r split has kinds of speaker that predict held-out speakers' choices better than "
                "everyone's rates (too few sentences per speaker, or speakers who choose alike?): the memory ranks "
                "the words by the speakers' and their neighbours' rates alone", args.subset)
    words.rebuild()
    speaker_words.attach(checkpoint.model, words)
    checkpoint.save(args.save)
    counts = sorted(len(words.words_of(speakers.index(name))) for name in sentences)
    print(f"the words of {len(sentences)} speakers ({counts[len(counts) // 2]} distinct words each on median) "
          f"remembered in {time.perf_counter() - start:.1f} s"
          + (f", those of {len(kept)} more kept from {args.path}" if kept else "") + f"; saved to {args.save}")


if __name__ == "__main__":
    main()
