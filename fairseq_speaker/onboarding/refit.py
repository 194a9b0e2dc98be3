"""``fairseq-speaker-refit``: every trained speaker estimated again on the frozen network.

Training learns a speaker's rows with the network, from the updates their few sentences take part in; the
rows end where the optimizer left them, and the variant's shared parameters (``fact``'s r bias vectors)
where a label-smoothed loss over moving logits left them. Here the network is frozen and:

1. for a variant on the output (``--shared auto``), its shared parameters are fitted together with every
   speaker's rows on the cached scores of all training sentences (:func:`fit_jointly`: L-BFGS, the
   label-smoothed loss with half of training's e, ridge ``--l2`` on the rows);
2. a mixture prior (K components, chosen by BIC unless ``--components`` says) is fitted to the speakers'
   rows (empirical Bayes, :mod:`fairseq_speaker.onboarding.prior`);
3. every speaker's rows are refitted under that prior on their training sentences (the onboarding solver:
   cached logits for an output bias, the frozen decoder for a variant acting on its state), ``--iterations``
   times; the prior they were last fitted under is saved in the checkpoint.

Speakers onboarded later into the saved checkpoint (``fairseq-speaker-adapt``, ``-onboarding-eval``,
``SpeakerTranslator.add_speaker``) are fitted under the same prior, so that a new speaker's first
sentences are read as the trained speakers' were. Measured effects: docs/speaker_learning.md.

Usage::

    fairseq-speaker-refit DATA --path checkpoints/checkpoint_best.pt --save refit.pt [--components auto]
"""

import argparse
import math
import os
import sys
import time
from typing import Dict, List, Optional, Sequence

import torch
from torch import Tensor

from fairseq_speaker.atomic_write import check_not_an_input
from fairseq_speaker.command_registry import program_name
from fairseq_speaker.errors import command
from fairseq_speaker.modules.speaker_bias import variant_spelling
from fairseq_speaker.onboarding.adapter import SpeakerAdapter
from fairseq_speaker.onboarding.checkpoint import (
    OnboardingError,
    open_with_sentences,
    replace_speakers,
    split_sentences,
    stacked_rows,
)
from fairseq_speaker.onboarding.fit import fit_speakers
from fairseq_speaker.onboarding.fit_loss import data_nll
from fairseq_speaker.onboarding.fit_options import MAX_L2, FitOptions
from fairseq_speaker.onboarding.prior import CHECKPOINT_KEY, SpeakerPrior, best_start, describe, fit_mixture
from fairseq_speaker.onboarding.scoring import Pair, TokenScores
from fairseq_speaker.onboarding.styles import candidate_counts, choose_styles, fit_styles
from fairseq_speaker.runtime import (
    add_runtime_arguments,
    check_at_least,
    check_threads,
    configure_output,
    parse_seed,
    start_threads,
)
from fairseq_speaker.tasks.speaker_translation import SplitNotFound

PROG = program_name(__name__)


def fit_jointly(adapter: SpeakerAdapter, sentences: Dict[str, List[Pair]], rows: Dict[str, Dict[str, Tensor]],
                l2: float, heldout: Optional[Dict[str, List[Pair]]] = None, max_iter: int = 200,
                label_smoothing: float = 0.0,
                max_cache_bytes: int = 4 << 30, progress=None) -> None:
    """Fit every speaker's ``rows`` (updated in place) and the variant's shared parameters (copied into the
    model) together on the frozen network's cached scores: the direct factorization of the speakers'
    sentences, ridge ``l2`` on the rows, stopped where the loss of the ``heldout`` sentences stops improving."""
    bias, names = adapter.bias, list(sentences)
    problems, size = {}, 0
    for group in adapter.score_groups(names):
        for name, chunks in group:
            problems[name] = chunks
            size += sum(c.nbytes() if isinstance(c, TokenScores) else 0 for c in chunks)
            if size > max_cache_bytes:
                raise OnboardingError(
                    f"fitting the shared parameters keeps every training sentence's scores in memory: more than "
                    f"{max_cache_bytes / 2 ** 30:.1f} GB here; pass --shared keep (or a larger --max-cache-gb)")
    held = None
    if heldout:
        held = [adapter.chunks(heldout[name]) if heldout.get(name) else [] for name in names]
    zero = {k: torch.zeros_like(v) for k, v in rows[names[0]].items()}
    options = FitOptions(l2=l2, max_iter=max_iter, label_smoothing=label_smoothing)
    started = time.perf_counter()
    fitted, shared, report = fit_speakers(bias, [problems[n] for n in names], options, init=[rows[n] for n in names],
                                          prior=[zero] * len(names), heldout=held, fit_shared=True)
    with torch.no_grad():
        for key, value in shared.items():
            bias.get_parameter(key).copy_(value)
    for name, r in zip(names, fitted):
        rows[name] = {k: v.float() for k, v in r.items()}
    if progress:
        held_text = (f", held-out {report.heldout_before:.4f} -> {report.heldout_after:.4f}"
                     if report.heldout_after is not None else "")
        progress(f"speakers and shared parameters fitted together: training loss per token {report.loss_before:.4f} "
                 f"-> {report.loss_after:.4f}{held_text}, {report.iterations} iterations "
                 f"({time.perf_counter() - started:.1f} s)")


def refit_speakers(adapter: SpeakerAdapter, sentences: Dict[str, List[Pair]], components="auto",
                   iterations: int = 1, seed: int = 1, progress=None, shared: bool = False, l2: float = 0.01,
                   heldout: Optional[Dict[str, List[Pair]]] = None, max_cache_bytes: int = 4 << 30,
                   shared_max_iter: int = 200, label_smoothing: float = 0.0, styles=None,
                   style_precision="fit") -> SpeakerPrior:
    """Refit the speakers of ``sentences`` (name -> pairs; all known to the model) in place: with ``shared``,
    first together with the variant's shared parameters (:func:`fit_jointly`); then alternating the prior's fit
    and the speakers' (see the module documentation). With ``styles`` (a number of styles, or ``"auto"``), the
    first prior is a mixture over styles learned from the speakers' sentences by EM
    (:mod:`fairseq_speaker.onboarding.styles`, pull ``style_precision``) instead of one fitted to their rows.
    Returns the prior the speakers were last fitted under."""
    bias, task = adapter.bias, adapter.task
    names = list(sentences)
    index = [task.speaker_dictionary.index(name) for name in names]
    exported = bias.export_speakers(index)
    rows = {name: {k: v[i : i + 1].float() for k, v in exported.items()} for i, name in enumerate(names)}
    adapter.sentences = {name: list(pairs) for name, pairs in sentences.items()}
    if shared:
        fit_jointly(adapter, sentences, rows, l2, heldout, max_iter=shared_max_iter, label_smoothing=label_smoothing,
                    max_cache_bytes=max_cache_bytes, progress=progress)
    scored = None  # with styles, every speaker's scored sentences, kept for the style fit and the first round
    for iteration in range(iterations):
        started = time.perf_counter()
        if styles is not None and iteration == 0:
            scored = {name: chunks for group in adapter.score_groups(names) for name, chunks in group}
            prior = _styles_prior(adapter.bias, names, scored, rows, styles, style_precision, seed, label_smoothing,
                                  progress)
        else:
            prior = fit_mixture([rows[n] for n in names], components, seed=seed + iteration, variant=bias.name)
        before = after = 0.0
        tokens = 0
        groups = [[(name, scored[name]) for name in names]] if scored is not None else adapter.score_groups(names)
        scored = None  # later rounds score again, a group at a time
        for group in groups:
            for name, chunks in group:
                with torch.no_grad():
                    before += float(data_nll(bias, rows[name], chunks))
                # under styles learned from the sentences, a speaker starts at the style their sentences make most
                # probable (as a new speaker does), not at the style nearest to their rows
                start = (best_start(prior, chunks, lambda r, c: data_nll(bias, r, c))
                         if styles is not None and iteration == 0 else rows[name])
                new, _, report = fit_speakers(bias, [chunks], adapter.options, init=[start], prior=[prior])
                rows[name] = {k: v.float() for k, v in new[0].items()}
                with torch.no_grad():
                    after += float(data_nll(bias, rows[name], chunks))
                tokens += report.tokens
        if progress:
            progress(f"iteration {iteration + 1}/{iterations}: {describe(prior)}; training loss per token "
                     f"{before / max(tokens, 1):.4f} -> {after / max(tokens, 1):.4f} "
                     f"({time.perf_counter() - started:.1f} s)")
    dtype = {name: p.dtype for name, p in bias.speaker_parameters().items()}
    replace_speakers(adapter.model, task, names, stacked_rows([{k: v.to(dtype[k]) for k, v in rows[n].items()}
                                                         for n in names]), keep_words=True)
    # the prior the speakers were last fitted under, not one fitted to the refitted rows: those sit closer to
    # their components than the evidence of a few sentences warrants, and a prior fitted to them would be
    # ever narrower (the collapse of hard EM)
    return prior


def _styles_prior(bias, names: List[str], scored: Dict[str, list], rows: Dict[str, Dict[str, Tensor]], styles,
                  precision, seed: int, label_smoothing: float, progress=None) -> SpeakerPrior:
    """The mixture over ``styles`` (a number, or ``"auto"``: by BIC) learned from the speakers' ``scored``
    sentences, each style's rows fitted with the label smoothing the shared fit uses."""
    options = FitOptions(l2=0.01, max_iter=50, label_smoothing=label_smoothing)
    args = ([scored[n] for n in names], [rows[n] for n in names])
    if styles == "auto":
        return choose_styles(bias, *args, options, candidate_counts(len(names)), seed=seed, precision=precision,
                             progress=progress)
    return fit_styles(bias, *args, styles, options, seed=seed, precision=precision, progress=progress)[0]


def _word_or_number(value: str, word: str, convert, valid, expected: str):
    """``word`` itself, or ``value`` converted by ``convert`` if ``valid`` holds for it; argparse's error otherwise."""
    if value == word:
        return value
    try:
        number = convert(value)
    except ValueError:
        number = None
    if number is None or not valid(number):
        raise argparse.ArgumentTypeError(f"must be {word!r} or {expected}, got {value!r}")
    return number


def parse_components(value: str):
    """``--components``, ``--styles``: 'auto' or a whole number >= 1."""
    return _word_or_number(value, "auto", int, lambda k: k >= 1, "a whole number >= 1")


def parse_precision(value: str):
    """``--style-precision``: 'fit' or a positive (finite) number."""
    return _word_or_number(value, "fit", float, lambda tau: math.isfinite(tau) and 0 < tau <= MAX_L2,
                           f"a positive number up to {MAX_L2:g}")


def parse_smoothing(value: str):
    """``--label-smoothing``: 'auto' or a number e, 0 <= e < 1."""
    return _word_or_number(value, "auto", float, lambda e: 0 <= e < 1, "a number from 0 to below 1")


def training_smoothing(state: dict) -> float:
    """The label smoothing the checkpoint's model was trained with (0 if its criterion had none)."""
    criterion = (state.get("cfg") or {}).get("criterion") or {}
    value = criterion.get("label_smoothing", 0.0) if hasattr(criterion, "get") else 0.0
    return float(value or 0.0)


#: the options of the shared parameters' fit (--shared fit), with their defaults
#: the most memory --max-cache-gb may name (1 PB: beyond, the count of bytes overflows)
MAX_CACHE_GB = 1e6
SHARED_DEFAULTS = {"l2": 0.01, "label_smoothing": "auto", "shared_max_iter": 200, "max_cache_gb": 4.0}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Estimate every trained speaker again on the frozen network, under a prior learned from all "
                    "speakers (a mixture over kinds of speakers); the prior is saved for onboarding.")
    parser.add_argument("data", help="the data directory the model was trained on (dictionaries, binarized "
                        "training data and its speaker file)")
    parser.add_argument("--path", required=True, help="the trained checkpoint")
    parser.add_argument("--save", required=True, help="where to write the refitted checkpoint (a new file)")
    parser.add_argument("--subset", default="train", help="the split whose sentences the speakers are refitted on")
    parser.add_argument("--components", type=parse_components, default=None,
                        help="components of the mixture prior fitted to the speakers' rows: a number, or 'auto' (the "
                        "default: 1 to 32, by BIC); not with --styles")
    parser.add_argument("--styles", type=parse_components, default=None, metavar="K",
                        help="learn the prior as K styles of speakers from the speakers' sentences by EM (a number, or "
                        "'auto': by BIC) instead of fitting it to their rows; default: the rows' mixture "
                        "(--components)")
    parser.add_argument("--style-precision", type=parse_precision, default=None,
                        help="with --styles only: how hard a speaker is pulled to their style, in nats per squared "
                        "unit of their rows ('fit': from the spread of the speakers' rows around their styles)")
    parser.add_argument("--iterations", type=int, default=1, help="rounds of prior fit and speaker refit")
    parser.add_argument("--shared", choices=("auto", "keep", "fit"), default="auto",
                        help="fit the variant's shared parameters (e.g. fact's r bias vectors) together with every "
                        "speaker first, on cached scores (fit), or keep them as trained (keep); auto: fit for a "
                        "variant on the output, keep for one acting on the decoder's state")
    parser.add_argument("--l2", type=float, default=None,
                        help="when the shared parameters are fitted: the pull of the speakers' rows towards zero, per "
                        f"token (default: {SHARED_DEFAULTS['l2']})")
    parser.add_argument("--label-smoothing", type=parse_smoothing, default=None,
                        help="when the shared parameters are fitted: e of the label-smoothed loss it fits (0: the "
                        "likelihood); 'auto': half the label smoothing the model was trained with "
                        "(docs/speaker_learning.md)")
    parser.add_argument("--shared-max-iter", type=int, default=None,
                        help="when the shared parameters are fitted: L-BFGS iterations of the joint fit at most "
                        f"(default: {SHARED_DEFAULTS['shared_max_iter']})")
    parser.add_argument("--heldout-subset", default="none",
                        help="when the shared parameters are fitted: a split whose sentences stop the fit where "
                        "their loss stops improving (default: none; on the styles corpus the per-token loss of "
                        "held-out sentences stops improving before their speaker words do)")
    parser.add_argument("--max-cache-gb", type=float, default=None,
                        help="when the shared parameters are fitted: the memory the cached scores of the training "
                        f"sentences may take (default: {SHARED_DEFAULTS['max_cache_gb']})")
    parser.add_argument("--max-iter", type=int, default=100, help="L-BFGS iterations per speaker at most")
    parser.add_argument("--batch-sentences", type=int, default=256, help="sentences the network scores at once")
    parser.add_argument("--seed", type=parse_seed, default=1)
    parser.add_argument("--user-dir", default=None,
                        help="a package registering more speaker bias variants or model families")
    add_runtime_arguments(parser)
    return parser


@command(also=(FloatingPointError,))
def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_output(args.verbose)
    if args.shared == "keep":  # the options of the shared parameters' fit would be ignored without a word
        idle = [f"--{name.replace('_', '-')}" for name in SHARED_DEFAULTS if getattr(args, name) is not None]
        idle += ["--heldout-subset"] if args.heldout_subset != "none" else []
        if idle:
            them = "it" if len(idle) == 1 else "them"
            parser.error(f"{', '.join(idle)} {'applies' if len(idle) == 1 else 'apply'} when the shared parameters "
                         f"are fitted, and --shared keep keeps them as trained: drop {them}, or use --shared fit")
    for name, default in SHARED_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    check_at_least(parser, args, ["iterations", "max_iter", "shared_max_iter", "batch_sentences"])
    if not (math.isfinite(args.l2) and 0 <= args.l2 <= MAX_L2):
        parser.error(f"--l2 must be a number from 0 to {MAX_L2:g}, got {args.l2}")
    if not args.max_cache_gb > 0:
        parser.error(f"--max-cache-gb must be positive, got {args.max_cache_gb}")
    if not args.max_cache_gb <= MAX_CACHE_GB:  # inf and 1e300 overflowed in bytes, after loading
        parser.error(f"--max-cache-gb must be at most {MAX_CACHE_GB:g}, got {args.max_cache_gb}")
    # options of one prior given with the other's would be ignored without a word
    if args.styles is not None and args.components is not None:
        parser.error(f"--components {args.components} sets the mixture fitted to the speakers' rows, and --styles "
                     f"{args.styles} learns the prior as styles instead: give one or the other")
    if args.style_precision is not None and args.styles is None:
        parser.error(f"--style-precision {args.style_precision} is the pull of the --styles prior: give --styles K "
                     f"(or auto) too, or drop --style-precision")
    args.components = "auto" if args.components is None else args.components
    args.style_precision = "fit" if args.style_precision is None else args.style_precision
    check_threads(parser, args)
    if os.path.abspath(args.save) == os.path.abspath(args.path):
        parser.error("--save must not be the checkpoint given by --path: write the refitted model to a new file")
    # the same file under another name too (a link, a hard link), or a file of the data folder
    check_not_an_input(args.save, "--save", [("the checkpoint given by --path", args.path)],
                       [("the data folder", args.data.split(os.pathsep)[0])])
    if args.heldout_subset == args.subset:
        parser.error(f"--heldout-subset {args.heldout_subset} is the split refitted (--subset): held-out sentences "
                     f"must be others (the default valid, or none: no held-out stop)")
    start_threads(args.threads)
    checkpoint, sentences = open_with_sentences(args)
    for option, count in (("--components", args.components), ("--styles", args.styles)):
        if isinstance(count, int) and count > len(sentences):  # the mixture would have components of no speaker
            raise OnboardingError(f"{option} {count}: more than the {len(sentences)} speakers with sentences in the "
                                  f"{args.subset} split, which a mixture of {count} cannot be fitted to: give at most "
                                  f"{len(sentences)}, or auto")
    adapter = SpeakerAdapter(checkpoint.model, checkpoint.task, FitOptions(max_iter=args.max_iter),
                             batch_sentences=args.batch_sentences, max_unknown_rate=1.0)
    start = time.perf_counter()
    bias = checkpoint.speaker_bias
    # a model trained with label smoothing e has logits that never rule a word out; a bias fitted to the
    # likelihood alone rules out every word a speaker did not say (measured: it breaks the Transformer's beam
    # search); half of training's e keeps the biases calibrated and keeps the gain
    smoothing = training_smoothing(checkpoint.state) / 2 if args.label_smoothing == "auto" else args.label_smoothing
    shared = args.shared == "fit" or (args.shared == "auto" and not bias.acts_on_state)
    if shared and bias.acts_on_state:
        raise OnboardingError(f"--shared fit fits on cached scores, which a variant acting on the decoder's state "
                              f"({bias.name}) does not have: use --shared keep")
    if shared and smoothing < training_smoothing(checkpoint.state) / 2:
        print(f"warning: fitting the shared parameters with --label-smoothing {smoothing:g}, less than half of "
              f"training's {training_smoothing(checkpoint.state):g}: the speakers' biases can become far more "
              f"confident than their sentences warrant (docs/speaker_learning.md); compare the refitted model with "
              f"the trained one on held-out data before using it", file=sys.stderr)
    heldout = None
    if shared and args.heldout_subset != "none":
        try:
            heldout = split_sentences(checkpoint.task, args.heldout_subset)
        except (FileNotFoundError, SplitNotFound):
            raise OnboardingError(f"{args.data}: no binarized {args.heldout_subset!r} split; --heldout-subset "
                                  f"none fits without a held-out stop") from None
    prior = refit_speakers(adapter, sentences, args.components, args.iterations, args.seed,
                           progress=lambda line: print(f"[refit] {line}", flush=True), shared=shared, l2=args.l2,
                           heldout=heldout, max_cache_bytes=int(args.max_cache_gb * 2 ** 30),
                           shared_max_iter=args.shared_max_iter,
                           label_smoothing=smoothing, styles=args.styles, style_precision=args.style_precision)
    checkpoint.state[CHECKPOINT_KEY] = prior.state_dict()
    checkpoint.save(args.save)
    print(f"{len(sentences)} speakers refitted ({variant_spelling(checkpoint.speaker_bias)} bias) in "
          f"{time.perf_counter() - start:.1f} s; {describe(prior)}; saved to {args.save}")
