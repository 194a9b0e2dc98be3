"""How well a model learns new speakers from n of their sentences: ``fairseq-speaker-onboarding-eval``.

For every held-out speaker (one the model never saw), fit the speaker's parameters on their first n
sentences (the network frozen, as ``fairseq-speaker-adapt`` does), then translate their remaining
sentences as that speaker. The sentences translated are the same for every n (those after each
speaker's first max(n)), so the numbers compare across n; n = 0 is no adaptation at all: the mean
speaker, as for any unknown speaker.

Usage::

    fairseq-speaker-onboarding-eval DATA_DIR --path checkpoint_best.pt --heldout-prefix raw/heldout \\
        --shots 0 1 2 5 10 20 --out onboarding

``PREFIX.{src}``, ``PREFIX.{tgt}`` and ``PREFIX.{speaker suffix}`` hold the held-out speakers'
sentences, one a line, in the form the model was trained on; each speaker's sentences are taken in
file order. With ``PREFIX.traits`` (the toy corpus's, ``python -m fairseq_speaker.toy.corpus
--heldout``) the speaker-dependent words are scored too, and for a corpus of the styles mode (its
``speakers.json`` beside the held-out files, or ``--oracle PATH``) every n gets the Bayes limit beside it: the
share of those words that the best decision given the corpus's model and the speaker's first n sentences gets
right (:func:`fairseq_speaker.toy.oracle.onboarding_oracle`), in the table, the JSON and the plot. Writes
``OUT/onboarding.md`` (the table), ``OUT/onboarding.json``, ``OUT/onboarding.png`` and ``OUT/hypotheses.n{N}.txt`` (the
translations of the evaluation sentences, whose line numbers in the held-out files are in the JSON). An ``OUT`` folder
that already holds files is refused, so that two runs' results never mix: give another folder, or
``--force`` to replace the earlier run's results.

The model is loaded once; for each n every speaker is adapted with one
:class:`~fairseq_speaker.onboarding.adapter.SpeakerAdapter` under the name ``SPEAKER@n``, which starts
from the mean speaker of the model as loaded (so adaptations for one n do not change those for
another), and the evaluation sentences of every speaker are translated in batches.
"""

import argparse
import logging
import os
import re
import statistics
import sys
import time
from typing import Dict, List, Optional, Sequence

import sacrebleu
import torch

from fairseq_speaker.analysis.speaker_words import Trait, read_traits, trait_accuracy
from fairseq_speaker.atomic_write import atomic_path, make_folder, write_json, write_text
from fairseq_speaker.command_registry import program_name
from fairseq_speaker.data import check_utf8
from fairseq_speaker.errors import UserError, command, fail
from fairseq_speaker.modules.speaker_words import speaker_words_of
from fairseq_speaker.onboarding.adaptation_sentences import read_adaptation_files
from fairseq_speaker.onboarding.checkpoint import OnboardingError, SpeakerCheckpoint
from fairseq_speaker.onboarding.fit_options import MAX_L2, FitOptions
from fairseq_speaker.onboarding.translator import SpeakerTranslator
from fairseq_speaker.runtime import (
    add_runtime_arguments,
    check_at_least,
    check_threads,
    configure_output,
    parse_seed,
    start_threads,
)
from fairseq_speaker.user_dir import add_user_dir_argument, import_user_dir

PROG = program_name(__name__)
#: what a run writes in --out, beside hypotheses.n{N}.txt
RESULT_FILES = ("onboarding.md", "onboarding.json", "onboarding.png")
DEFAULT_SHOTS = [0, 1, 2, 5, 10, 20]
#: the toy corpus's traits, in the order of the demo's table; other traits follow alphabetically
TRAIT_ORDER = ("gender", "address", "profession")
BLEU_TOKENIZERS = tuple(getattr(sacrebleu.metrics.bleu.BLEU, "TOKENIZERS", ("none", "13a", "intl")))


def load_translator(path: str, data: str, batch_size: int, fit: FitOptions, overrides: Dict):
    """A :class:`~fairseq_speaker.onboarding.translator.SpeakerTranslator` of ``path`` whose unknown speakers
    get the mean speaker; refused (:class:`OnboardingError`) if speakers cannot be added to it."""
    overrides = dict(overrides, unknown_speaker="mean", batch_size=batch_size)
    checkpoint = SpeakerCheckpoint.load(path, data=data, overrides=overrides)
    checkpoint.check_adaptable()
    return SpeakerTranslator.from_checkpoint(checkpoint, fit)


def read_heldout(prefix: str, source_lang: str, target_lang: str, suffix: str):
    """Sources, targets, speaker labels and (if ``PREFIX.traits`` exists, else None) traits of the held-out file."""
    sources, targets, labels = read_adaptation_files(prefix, source_lang, target_lang, suffix)
    path = f"{prefix}.traits"
    if not os.path.isfile(path):
        return sources, targets, labels, None
    check_utf8(path)
    try:
        traits = read_traits(path)
    except (ValueError, KeyError, TypeError) as e:
        raise OnboardingError(f"{path}: not a traits file (JSON lines, as python -m fairseq_speaker.toy.corpus "
                              f"writes them): {type(e).__name__}: {e}") from None
    if len(traits) != len(sources):
        raise OnboardingError(f"{path} has {len(traits)} lines but {prefix}.{source_lang} has {len(sources)}: "
                              f"one line of traits per sentence, or remove the file")
    return sources, targets, labels, traits


def oracle_path(option: str, prefix: str, traits) -> Optional[str]:
    """The ``speakers.json`` whose model gives the Bayes limit (``--oracle``): ``auto``, the one beside the held-out
    files if there is one and the speaker words are scored; ``none``; or a path, which must exist."""
    if option == "none":
        return None
    if option == "auto":
        path = os.path.join(os.path.dirname(prefix) or ".", "speakers.json")
        return path if traits is not None and os.path.isfile(path) else None
    if not os.path.isfile(option):
        raise OnboardingError(f"--oracle {option}: not found; give the speakers.json of a styles-mode toy corpus "
                              f"(python -m fairseq_speaker.toy.corpus --styles K), or --oracle none")
    if traits is None:
        raise OnboardingError(f"--oracle {option}: the oracle scores the speaker words of {prefix}.traits, which is "
                              f"not there; give the held-out files of the corpus the oracle is of, or --oracle none")
    return option


def bayes_oracle(path: str, labels: Sequence[str], traits: Sequence[Sequence[Trait]],
                 shots: Sequence[int]) -> List[Dict]:
    """The Bayes limit for each n of ``shots`` (each speaker known from their first n sentences, scored on their
    sentences after the first max(shots), as :func:`evaluate` scores the model): ``[{"n", "traits"}]``."""
    from fairseq_speaker.toy.corpus import read_styles
    from fairseq_speaker.toy.oracle import onboarding_oracle

    check_utf8(path)
    try:
        styles = read_styles(path)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise OnboardingError(f"{path}: not the speakers.json of a styles-mode toy corpus ({type(e).__name__}: {e}); "
                              f"give the right one with --oracle PATH, or --oracle none") from None
    try:
        return [{"n": n, "traits": onboarding_oracle(styles, labels, traits, n, max(shots))} for n in sorted(shots)]
    except (KeyError, ValueError) as e:
        raise OnboardingError(f"{path}: its model does not fit the speaker words of the held-out files "
                              f"({type(e).__name__}: {e}): give the speakers.json of their corpus with --oracle "
                              f"PATH, or --oracle none") from None


def split_speakers(labels: Sequence[str], first: int, where: str) -> Dict[str, List[int]]:
    """Each speaker's line indices (file order, speakers in order of first appearance), checked to leave at
    least one sentence to evaluate after the ``first`` ones adapted on."""
    lines: Dict[str, List[int]] = {}
    for i, label in enumerate(labels):
        lines.setdefault(label, []).append(i)
    short = [(name, len(ids)) for name, ids in lines.items() if len(ids) <= first]
    if short:
        name, count = short[0]
        more = f" (and {len(short) - 1} more speaker(s))" if len(short) > 1 else ""
        raise OnboardingError(
            f"{where}: speaker {name!r} has {count} sentence(s){more}, but --shots {first} needs at least "
            f"{first + 1} per speaker ({first} to adapt on, 1 or more to evaluate): lower the largest --shots "
            f"or give each speaker more sentences")
    return lines


def evaluate(translator, sources: List[str], targets: List[str], labels: List[str],
             traits: Optional[List[List[Trait]]], shots: List[int], beam: int = 5, tokenize: str = "none",
             where: str = "<heldout>", **generation) -> Dict:
    """Adapt on the first n sentences of each speaker for each n of ``shots``, translate every speaker's
    sentences after the first max(shots), score them. Returns what ``onboarding.json`` holds, with the
    hypotheses of each n under ``"hypotheses"``."""
    lines = split_speakers(labels, max(shots), where)
    evaluated = sorted(i for ids in lines.values() for i in ids[max(shots):])
    references = [targets[i] for i in evaluated]
    adapter = translator.adapter
    adapt_on = sorted(i for ids in lines.values() for i in ids[:max(shots)])
    pairs = dict(zip(adapt_on, translator.encode_pairs([sources[i] for i in adapt_on],
                                                       [targets[i] for i in adapt_on])))
    known = translator.task.speaker_dictionary
    rows, hypotheses = [], {}
    for n in sorted(shots):  # n = 0 first: the mean speaker is the mean of the table, which adapting grows
        names = {speaker: f"{speaker}@{n}" for speaker in lines}
        taken = [name for name in names.values() if name in known]
        if taken:
            raise OnboardingError(f"the model already has a speaker {taken[0]!r}: rename the speakers of {where}")
        start = time.perf_counter()
        reports = {}
        if n > 0:
            reports = adapter.adapt({names[speaker]: [pairs[i] for i in ids[:n]] for speaker, ids in lines.items()})
        adapt_seconds = time.perf_counter() - start
        start = time.perf_counter()
        task_log = logging.getLogger("fairseq_speaker.tasks.speaker_translation")
        level = task_log.level
        if n == 0:  # unknown by design: the mean speaker is what n = 0 measures, not a mistake to warn about
            task_log.setLevel(logging.ERROR)
        try:
            hyps = translator.translate([sources[i] for i in evaluated], [names[labels[i]] for i in evaluated],
                                        beam=beam, **generation)
        finally:
            task_log.setLevel(level)
        words = speaker_words_of(translator.model)
        if words is not None and n > 0:  # the next n's speakers are these people again: not their own neighbours
            words.forget([translator.task.speaker_dictionary.index(name) for name in names.values()])
        row: Dict[str, object] = {
            "n": n, "bleu": sacrebleu.corpus_bleu(hyps, [references], tokenize=tokenize, force=True).score,
            "adapt_seconds": round(adapt_seconds, 3), "translate_seconds": round(time.perf_counter() - start, 3)}
        if reports:  # what the fits took, the median over the speakers (through the decoder, a pass per evaluation)
            row["fit_iterations"] = statistics.median(r.iterations for r in reports.values())
            row["fit_evaluations"] = statistics.median(r.evaluations for r in reports.values())
        if traits is not None:
            row["traits"] = trait_accuracy(hyps, [traits[i] for i in evaluated])
        rows.append(row)
        hypotheses[n] = hyps
    return {"speakers": len(lines), "adapt_sentences": max(shots), "eval_sentences": len(evaluated),
            "eval_lines": [i + 1 for i in evaluated], "beam": beam, "tokenize": tokenize, "rows": rows,
            "hypotheses": hypotheses}


def trait_names(rows: List[Dict]) -> List[str]:
    found = {t for row in rows for t in row.get("traits", {}) if t != "all"}
    return [t for t in TRAIT_ORDER if t in found] + sorted(found - set(TRAIT_ORDER))


def oracle_by_n(result: Dict) -> Dict[int, Dict[str, float]]:
    """The Bayes limit's accuracies of each n, if the result has them (else empty)."""
    return {row["n"]: row["traits"] for row in result.get("oracle") or ()}


def format_table(result: Dict) -> str:
    """The markdown table: one row per n, each followed by the Bayes limit's for that n where there is one."""
    traits = trait_names(result["rows"])
    scored = any("traits" in row for row in result["rows"])
    oracle = oracle_by_n(result)
    # the seconds last: the one column that differs between two runs of the same command
    header = ["n", "BLEU", *(["speaker words", *traits] if scored else []), "fit evaluations", "adapt s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def accuracies(accuracy: Dict[str, float]) -> List[str]:
        return ["-" if accuracy.get(t) is None else f"{100 * accuracy[t]:.1f}%" for t in ["all", *traits]]

    for row in result["rows"]:
        cells = [str(row["n"]), f"{row['bleu']:.2f}"]
        if scored:
            cells += accuracies(row.get("traits", {}))
        cells.append(f"{row['fit_evaluations']:g}" if "fit_evaluations" in row else "-")
        cells.append(f"{row['adapt_seconds']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
        if scored and row["n"] in oracle:
            lines.append("| " + " | ".join([f"{row['n']}, Bayes limit", "-", *accuracies(oracle[row["n"]]), "-", "-"])
                         + " |")
    return "\n".join(lines)


def describe(result: Dict, checkpoint: str, prefix: str) -> str:
    return (f"Onboarding {checkpoint} on the held-out speakers of {prefix}: {result['speakers']} speakers, each "
            f"adapted on their first n sentences (n = 0: none, the mean speaker) and evaluated on their sentences "
            f"after the first {result['adapt_sentences']} ({result['eval_sentences']} sentences in all, the same for "
            f"every n). BLEU: sacrebleu, tokenize {result['tokenize']}; beam {result['beam']}. 'speaker words': the "
            f"share of the speaker-dependent words of the references that the translation gets right; 'fit "
            f"evaluations': the median over the speakers of the evaluations of the objective their fit made (through "
            f"the decoder, a pass of the network each); 'adapt s': seconds to adapt every speaker for that n (the "
            f"network's pass over their sentences and the fits)."
            + (" 'Bayes limit': the share of those words that the best decision given the corpus's model "
               f"({result['oracle_model']}) and each speaker's first n sentences gets right." if result.get("oracle")
               else ""))


def plot(result: Dict, path: str) -> None:
    """BLEU and speaker-word accuracy against n (categorical x axis), side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    x, ticks = range(len(rows)), [str(row["n"]) for row in rows]
    scored = any("traits" in row for row in rows)
    fig, axes = plt.subplots(1, 2 if scored else 1, figsize=(10 if scored else 5, 3.8), squeeze=False)
    axes[0][0].plot(x, [row["bleu"] for row in rows], marker="o")
    axes[0][0].set(title="BLEU", xlabel="adaptation sentences per speaker (n)", ylabel="BLEU")
    if scored:
        ax = axes[0][1]
        oracle = oracle_by_n(result)
        for trait in ["all", *trait_names(rows)]:
            values = [100 * row.get("traits", {}).get(trait, float("nan")) for row in rows]
            label = "speaker words" if trait == "all" else trait
            (line,) = ax.plot(x, values, marker="o", label=label, linewidth=2.5 if trait == "all" else 1.2)
            if oracle:  # the Bayes limit of the same words, dashed, in the same colour
                limit = [100 * oracle.get(row["n"], {}).get(trait, float("nan")) for row in rows]
                ax.plot(x, limit, linestyle="--", color=line.get_color(), linewidth=1.0,
                        label=f"{label}: Bayes limit" if trait in ("all", "style") else None)
        ax.set(title="Speaker words right", xlabel="adaptation sentences per speaker (n)", ylabel="%", ylim=(0, 103))
        ax.legend(fontsize=8)
    for ax in axes[0]:
        ax.set_xticks(list(x))
        ax.set_xticklabels(ticks)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(result: Dict, out: str, checkpoint: str, prefix: str) -> str:
    """``onboarding.md``, ``onboarding.json``, ``onboarding.png`` and the hypotheses in ``out``; returns the text."""
    make_folder(out, "--out")
    for name in os.listdir(out):  # an earlier run's results (--force): none of them stays beside the new ones
        if name in RESULT_FILES or re.fullmatch(r"hypotheses\.n\d+\.txt", name):
            os.remove(os.path.join(out, name))
    text = describe(result, checkpoint, prefix) + "\n\n" + format_table(result) + "\n"
    summary = {k: v for k, v in result.items() if k != "hypotheses"}
    write_json(os.path.join(out, "onboarding.json"), dict(summary, checkpoint=checkpoint, heldout_prefix=prefix))
    for n, hyps in result["hypotheses"].items():
        write_text(os.path.join(out, f"hypotheses.n{n}.txt"), "".join(h + "\n" for h in hyps))
    with atomic_path(os.path.join(out, "onboarding.png")) as tmp:
        plot(result, tmp)
    write_text(os.path.join(out, "onboarding.md"), text)  # last: the table is there once everything is
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("data", metavar="DATA_DIR", help="the data directory the model was trained on (dictionaries)")
    parser.add_argument("--path", required=True, metavar="CHECKPOINT", help="the trained speaker model")
    parser.add_argument("--heldout-prefix", required=True, metavar="PREFIX",
                        help="the held-out speakers' sentences: PREFIX.{src}, PREFIX.{tgt}, PREFIX.{speaker suffix} "
                        "and optionally PREFIX.traits")
    parser.add_argument("--shots", type=int, nargs="+", default=DEFAULT_SHOTS, metavar="N",
                        help="numbers of adaptation sentences per speaker (default: %(default)s; 0 = the mean speaker)")
    parser.add_argument("--out", default="onboarding", help="folder for the table, JSON, plot and hypotheses (a new "
                        "or empty one, unless --force)")
    parser.add_argument("--force", action="store_true",
                        help="write into an --out folder that holds files, replacing the results of an earlier run")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-len-b", type=int, default=200, help="longest translation, in tokens (as fairseq's)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per translation batch")
    parser.add_argument("--tokenize", default="none", choices=sorted(BLEU_TOKENIZERS),
                        help="sacrebleu's tokenizer (default: score the text as the model reads it, tokenized)")
    parser.add_argument("--adapt-l2", type=float, default=FitOptions.l2,
                        help="weight of the pull towards the mean speaker (as fairseq-speaker-adapt)")
    parser.add_argument("--adapt-max-iter", type=int, default=FitOptions.max_iter, help="L-BFGS iterations at most")
    parser.add_argument("--oracle", default="auto", metavar="SPEAKERS_JSON",
                        help="the speakers.json of a styles-mode toy corpus, whose Bayes limit is shown beside every "
                        "n; 'auto' (the default): the one beside the held-out files, if any; 'none': no oracle")
    parser.add_argument("--source-lang", help="if the data directory has more than one language pair")
    parser.add_argument("--target-lang")
    parser.add_argument("--seed", type=parse_seed, default=1)
    add_user_dir_argument(parser)
    add_runtime_arguments(parser)
    return parser


@command(named_errors=False)
def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_output(args.verbose)
    check_threads(parser, args)
    if min(args.shots) < 0:
        parser.error("--shots: numbers of sentences must be 0 or more")
    twice = sorted({n for n in args.shots if args.shots.count(n) > 1})
    if twice:  # one row was written for them
        parser.error(f"--shots: {', '.join(map(str, twice))} given twice: give each number once")
    check_at_least(parser, args, ["beam", "batch_size", "adapt_max_iter"])
    if not 0 <= args.adapt_l2 <= MAX_L2:
        parser.error(f"--adapt-l2 must be a number from 0 to {MAX_L2:g}, got {args.adapt_l2}")
    if args.max_len_b < 1:  # the search's check named --min-len and --max-len-a, which this command does not take
        parser.error(f"--max-len-b must be at least 1 (a translation of at least one token), got {args.max_len_b}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"--out {args.out} is a file: give a folder for the results")
    if os.path.isdir(args.out) and os.listdir(args.out) and not args.force:
        parser.error(f"--out {args.out} already holds files (an earlier run?): give another folder, or --force to "
                     f"replace the results written there")
    shots = sorted(set(args.shots))
    start_threads(args.threads)
    torch.manual_seed(args.seed)
    overrides = {k: getattr(args, k) for k in ("source_lang", "target_lang") if getattr(args, k)}
    try:
        import_user_dir(args.user_dir)
        translator = load_translator(args.path, args.data, args.batch_size,
                                     FitOptions(l2=args.adapt_l2, max_iter=args.adapt_max_iter), overrides)
        cfg = translator.task.cfg
        sources, targets, labels, traits = read_heldout(args.heldout_prefix, cfg.source_lang, cfg.target_lang,
                                                        cfg.speaker_suffix)
        seen = sorted(set(labels) & set(translator.speakers))
        if seen:
            print(f"{PROG}: note: {len(seen)} speaker(s) of {args.heldout_prefix}.{cfg.speaker_suffix} were seen in "
                  f"training or onboarded ({', '.join(map(repr, seen[:3]))}{' ...' if len(seen) > 3 else ''}): they "
                  f"are evaluated as new speakers, but their own rows and words stay in the model, where a fit may "
                  f"start from them: for figures of new speakers, evaluate a model that never saw them",
                  file=sys.stderr)
        oracle = oracle_path(args.oracle, args.heldout_prefix, traits)
        # before the evaluation: a speakers.json that does not fit is said at once, not after every n is translated
        limits = bayes_oracle(oracle, labels, traits, shots) if oracle is not None else None
        result = evaluate(translator, sources, targets, labels, traits, shots, beam=args.beam, tokenize=args.tokenize,
                          where=f"{args.heldout_prefix}.{cfg.speaker_suffix}", max_len_b=args.max_len_b)
        if limits is not None:
            result.update(oracle=limits, oracle_model=oracle)
        text = write_outputs(result, args.out, args.path, args.heldout_prefix)
    except (UserError, FloatingPointError) as e:
        fail(str(e), PROG)
    print(text.rstrip())
    print(f"\n(written to {os.path.join(args.out, 'onboarding.md')}, onboarding.json, onboarding.png)")


if __name__ == "__main__":
    main()
