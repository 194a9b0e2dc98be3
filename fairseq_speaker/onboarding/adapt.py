"""Onboarding speakers into a trained model: ``fairseq-speaker-adapt`` (the :class:`SpeakerAdapter` behind it is in
:mod:`fairseq_speaker.onboarding.adapter`).

Usage::

    fairseq-speaker-adapt DATA_DIR --path checkpoint_best.pt --adapt-prefix new/adapt \\
        --save checkpoint_new_speakers.pt [--heldout-prefix new/heldout] [--adapt-l2 1.0]

``new/adapt.{src}``, ``new/adapt.{tgt}`` and ``new/adapt.spk`` (``--speaker-suffix``) hold the new
speakers' sentences, one a line, in the form the model was trained on (or raw text with the
model's ``--tokenizer``/``--bpe`` flags, as for fairseq-interactive; or raw text with ``--raw-text``, read
with the preprocessing the checkpoint recorded, as fairseq-interactive reads it). Only what the variant marks
as the speakers' own parameters is learned (the V-vector of ``full``, the r weights of ``fact``,
the embedding of ``proj``, ...); the network is frozen, and every speaker the model already had
translates exactly as before. A variant acting on the decoder's state (``hyper_lhuc``, ...) is
fitted through the frozen decoder rather than on cached logits (slower: a decoder pass per
iteration). With ``--adapt-shared`` the variant's shared parameters are fitted
too (then the other speakers change as well). The result loads in stock ``fairseq-generate`` and
``fairseq-interactive``, where the new speakers are known by name.
"""

import argparse
import glob
import logging
import math
import os
import sys
import time
from typing import Dict, List, Optional, Sequence

import torch

from fairseq_speaker.atomic_write import check_not_an_input, same_file
from fairseq_speaker.command_registry import program_name
from fairseq_speaker.data import preprocessing
from fairseq_speaker.data.speaker_labels import live_names
from fairseq_speaker.errors import UserError, command, fail
from fairseq_speaker.modules.speaker_bias import variant_spelling
from fairseq_speaker.onboarding.adaptation_sentences import group_by_speaker, read_adaptation_files
from fairseq_speaker.onboarding.adapter import SpeakerAdapter
from fairseq_speaker.onboarding.checkpoint import (
    OnboardingError,
    SpeakerCheckpoint,
)
from fairseq_speaker.onboarding.fit import FitReport
from fairseq_speaker.onboarding.fit_options import MAX_L2, FitOptions
from fairseq_speaker.onboarding.prior import prior_of_checkpoint
from fairseq_speaker.onboarding.scoring import Pair
from fairseq_speaker.runtime import MAX_SEED, add_runtime_arguments, check_threads, configure_output, start_threads
from fairseq_speaker.user_dir import import_user_dir_early

PROG = program_name(__name__)
logger = logging.getLogger(__name__)

#: the options of fairseq's parser the command reads, besides its own (the data, the checkpoint, the languages, the
#: speaker files' suffix, the preprocessing of --raw-text and the seed) and those of the --tokenizer/--bpe given
FAIRSEQ_OPTIONS_READ = ("data", "path", "user_dir", "task", "source_lang", "target_lang", "speaker_suffix", "tokenizer",
                        "bpe", "seed", "cpu")


def build_parser() -> argparse.ArgumentParser:
    from fairseq import options

    parser = options.get_generation_parser(default_task="speaker_translation")
    add_adapt_arguments(parser.add_argument_group("speaker adaptation"))
    return parser


def options_not_read(args, argv: Sequence[str]) -> List[str]:
    """The options of fairseq's whole generation parser given to the command (``args`` parsed from ``argv``) that it
    does not read (``--beam``, ``--fp16``, ``--unknown-speaker``, ...), each as written on a command line; those that
    fairseq derives from a given one (``--max-tokens-valid`` from ``--max-tokens``) are not named again."""
    import dataclasses as dc

    from fairseq import options
    from fairseq.registry import REGISTRIES

    own = argparse.ArgumentParser(add_help=False)
    add_adapt_arguments(own)
    read = set(FAIRSEQ_OPTIONS_READ) | set(vars(own.parse_args(["--adapt-prefix", "p", "--save", "s"])))
    minimal = [args.data, "--task", args.task, "--adapt-prefix", args.adapt_prefix, "--save", args.save]
    for kind in ("tokenizer", "bpe", "user_dir"):
        choice = getattr(args, kind, None)
        if choice:
            minimal += [f"--{kind.replace('_', '-')}", choice]
            config = REGISTRIES[kind]["dataclass_registry"].get(choice) if kind in REGISTRIES else None
            read |= {f.name for f in dc.fields(config)} if config is not None else set()
    defaults = vars(options.parse_args_and_arch(build_parser(), input_args=minimal))
    missing = object()
    differ = [f"--{name.replace('_', '-')}" for name, value in vars(args).items()
              if name not in read and defaults.get(name, missing) != value]
    written = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    return [option for option in differ if option in written] or differ


def add_adapt_arguments(group) -> None:
    """The command's own options (onto ``group``, an argument group or a parser)."""
    group.add_argument("--adapt-prefix", required=True, metavar="PREFIX",
                       help="the new speakers' sentences: PREFIX.{source-lang}, PREFIX.{target-lang}, "
                       "PREFIX.{speaker-suffix}")
    group.add_argument("--heldout-prefix", metavar="PREFIX",
                       help="held-out sentences of the same speakers (same three files): the fit stops where "
                       "their loss stops improving")
    group.add_argument("--save", required=True, metavar="CHECKPOINT", help="where to write the new checkpoint")
    group.add_argument("--adapt-l2", type=float, default=FitOptions.l2,
                       help="weight of the pull towards the mean speaker's parameters, in units of one word's loss")
    group.add_argument("--adapt-max-iter", type=int, default=FitOptions.max_iter, help="L-BFGS iterations at most")
    group.add_argument("--adapt-shared", action="store_true",
                       help="also fit the variant's shared parameters (e.g. fact's shared bias vectors) on the "
                       "new speakers' sentences: every other speaker changes too")
    group.add_argument("--max-unknown-rate", type=float, default=0.1, metavar="SHARE",
                       help="refuse adaptation text with more than this share of words outside the model's "
                       "dictionaries (text not tokenized or BPE-encoded as the training data); 1 accepts any")
    group.add_argument("--adapt-prior", choices=("checkpoint", "mean"), default="checkpoint",
                       help="what new speakers are pulled towards: the prior fairseq-speaker-refit saved in the "
                       "checkpoint (if any; else the mean speaker), or the mean speaker with --adapt-l2")
    group.add_argument("--replace", action="store_true",
                       help="fit speakers the model already has again, from these sentences alone")
    group.add_argument("--raw-text", action="store_true",
                       help="the adaptation and held-out files are raw text: tokenize them as the training data was, "
                       "with the preprocessing the checkpoint recorded (examples/sated/prepare.py's, as "
                       "fairseq-interactive does) unless --tokenizer/--bpe say otherwise; by default the files are "
                       "read as the model's tokens")
    add_runtime_arguments(group)


@command(named_errors=False)
def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = list(argv) if argv is not None else sys.argv[1:]
    configure_output(verbose="--verbose" in argv)  # before fairseq's parser, which imports --user-dir
    from fairseq import options
    from fairseq.data import encoders

    import fairseq_speaker  # noqa: F401  (registers the task and models)

    parser = build_parser()
    try:  # fairseq's parser imports --user-dir too: a folder that is not there, said here in one line
        import_user_dir_early(argv)
    except UserError as e:
        fail(str(e), PROG)
    args = options.parse_args_and_arch(parser, input_args=argv)
    if not args.path:
        parser.error("--path CHECKPOINT is required")
    if os.path.abspath(args.save) == os.path.abspath(args.path):
        parser.error("--save must not be the checkpoint given by --path: write the adapted model to a new file")
    if not 0 <= args.max_unknown_rate <= 1:
        parser.error(f"--max-unknown-rate is a share of words, from 0 to 1; got {args.max_unknown_rate}")
    if not (math.isfinite(args.adapt_l2) and 0 <= args.adapt_l2 <= MAX_L2):
        parser.error(f"--adapt-l2 must be a number from 0 to {MAX_L2:g}, got {args.adapt_l2}")
    if args.adapt_max_iter < 1:
        parser.error(f"--adapt-max-iter must be at least 1, got {args.adapt_max_iter}")
    # the checkpoint under another name (a link), a file of the data folder or of the sentences read
    read = [(f"a file of the {what} sentences ({option})", path)
                 for what, option, prefix in (("adaptation", "--adapt-prefix", args.adapt_prefix),
                                              ("held-out", "--heldout-prefix", args.heldout_prefix)) if prefix
                 for path in glob.glob(glob.escape(prefix) + ".*")]
    check_not_an_input(args.save, "--save", [("the checkpoint given by --path", args.path), *read],
                       [("the data folder", args.data.split(os.pathsep)[0])])
    check_threads(parser, args)
    if args.heldout_prefix is not None and _same_sentences(args.heldout_prefix, args.adapt_prefix):
        parser.error(f"--heldout-prefix {args.heldout_prefix} is the adaptation sentences (--adapt-prefix): the fit "
                     f"would stop on the loss it minimizes; give other sentences of the same speakers, or leave it out")
    unread = options_not_read(args, argv)
    if unread:
        parser.error(f"{', '.join(unread)}: fairseq-speaker-adapt does not read {'them' if len(unread) > 1 else 'it'} "
                     f"(it fits the speakers and saves the model with its own options: give decoding options such as "
                     f"--beam or --unknown-speaker to fairseq-generate or -interactive when translating): leave "
                     f"{'them' if len(unread) > 1 else 'it'} out")
    if not 0 <= args.seed <= MAX_SEED:  # fairseq's parser takes any whole number; the other commands refuse these
        parser.error(f"--seed must be from 0 to {MAX_SEED} (numpy's seeds), got {args.seed}")
    start_threads(args.threads)
    torch.manual_seed(args.seed)
    overrides = {k: getattr(args, k) for k in ("source_lang", "target_lang") if getattr(args, k, None)}
    try:
        checkpoint = SpeakerCheckpoint.load(args.path, data=args.data, overrides=overrides)
        checkpoint.check_adaptable()
        task = checkpoint.task
        src, tgt = task.cfg.source_lang, task.cfg.target_lang
        # the checkpoint's speaker suffix (SATED's usr) unless given here
        suffix = args.speaker_suffix if any(a.startswith("--speaker-suffix") for a in argv) else task.cfg.speaker_suffix
        if args.raw_text:  # the checkpoint's recorded preprocessing, unless --tokenizer/--bpe are given
            tokenizer, bpe = task.build_tokenizer(args), task.build_bpe(args)
            if tokenizer is None and bpe is None:
                raise OnboardingError(
                    f"{args.path}: --raw-text, but the checkpoint records no preprocessing of its training data; give "
                    f"the model's --tokenizer / --bpe options instead, or tokenize the files as the training data was "
                    f"and leave out --raw-text")
        else:
            tokenizer, bpe = encoders.build_tokenizer(args), encoders.build_bpe(args)
        # the targets are in the target language: a tokenizer with languages (Moses) takes that language's rules
        target_tokenizer = preprocessing.for_target(tokenizer)

        def encoder(tok):
            def encode_fn(x: str) -> str:
                if tok is not None:
                    x = tok.encode(x)
                return bpe.encode(x) if bpe is not None else x
            return encode_fn

        encode_fn, encode_target_fn = encoder(tokenizer), encoder(target_tokenizer)

        adapter = SpeakerAdapter(checkpoint.model, task,
                                 FitOptions(l2=args.adapt_l2, max_iter=args.adapt_max_iter),
                                 max_unknown_rate=args.max_unknown_rate,
                                 prior=prior_of_checkpoint(checkpoint.state, checkpoint.speaker_bias)
                                 if args.adapt_prior == "checkpoint" else None)
        sources, targets, labels = read_adaptation_files(args.adapt_prefix, src, tgt, suffix, "--adapt-prefix")
        sentences = group_by_speaker(labels, adapter.encode(sources, targets, encode_fn,
                                                            where=f"{args.adapt_prefix}.{{{src},{tgt}}}",
                                                            encode_target_fn=encode_target_fn))
        heldout = None
        if args.heldout_prefix:
            h_src, h_tgt, h_labels = read_adaptation_files(args.heldout_prefix, src, tgt, suffix,
                                                           "--heldout-prefix")
            heldout = group_by_speaker(h_labels, adapter.encode(h_src, h_tgt, encode_fn,
                                                                where=f"{args.heldout_prefix}.{{{src},{tgt}}}",
                                                                encode_target_fn=encode_target_fn))
            strangers = sorted(set(heldout) - set(sentences))
            if strangers:
                raise OnboardingError(
                    f"{args.heldout_prefix}.{suffix}: speaker(s) {', '.join(map(repr, strangers[:5]))} have held-out "
                    f"lines but no adaptation lines in {args.adapt_prefix}.{suffix}")
        known = set(live_names(task.speaker_dictionary.names))
        start = time.perf_counter()
        reports = adapter.adapt(sentences, heldout, replace=args.replace, fit_shared=args.adapt_shared)
        seconds = time.perf_counter() - start
        checkpoint.save(args.save)
    except (UserError, FloatingPointError) as e:
        fail(str(e), PROG)
    print(format_reports(reports, sentences, seconds, variant_spelling(checkpoint.speaker_bias), args.save))
    if args.replace and not known & set(sentences):  # the option did nothing: said, not refused (a script's default)
        print(f"--replace: none of the {len(sentences)} speaker(s) of {args.adapt_prefix}.{suffix} was the model's, "
              f"so none was replaced: each was added")


def _same_sentences(heldout: str, adapt: str) -> bool:
    """Whether the files of the prefix ``heldout`` are those of ``adapt``: the same prefix, or each file of one the
    other's under another name (a link, a hard link: the fit early-stopped on the sentences it was fitted on)."""
    if os.path.abspath(heldout) == os.path.abspath(adapt):
        return True
    pairs = [(path, adapt + path[len(heldout):]) for path in glob.glob(glob.escape(heldout) + ".*")]
    pairs = [(one, other) for one, other in pairs if os.path.exists(other)]
    return bool(pairs) and all(same_file(one, other) for one, other in pairs)


def format_reports(reports: Dict[str, FitReport], sentences: Dict[str, List[Pair]], seconds: float, variant: str,
                   path: str) -> str:
    lines = [f"{len(reports)} speaker(s) fitted ({variant} bias) in {seconds:.2f} s, saved to {path}",
             f"  {'speaker':<24}{'sentences':>10}{'words':>8}{'loss before':>13}{'after':>8}"
             f"{'held-out before':>17}{'after':>8}{'iterations':>12}"]
    for name, r in reports.items():
        held = (f"{r.heldout_before:>17.3f}{r.heldout_after:>8.3f}" if r.heldout_before is not None
                else f"{'-':>17}{'-':>8}")
        lines.append(f"  {name:<24}{len(sentences[name]):>10}{_tokens(sentences[name]):>8}"
                     f"{r.loss_before:>13.3f}{r.loss_after:>8.3f}{held}{r.iterations:>12}")
    return "\n".join(lines)


def _tokens(pairs: List[Pair]) -> int:
    return sum(len(t) for _, t in pairs)


if __name__ == "__main__":
    main()
