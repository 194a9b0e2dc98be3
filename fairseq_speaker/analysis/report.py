"""One command from ``fairseq-generate`` outputs to a report: BLEU/chrF with significance, the speaker
classifier, and what the speaker biases learned.

Writes ``OUT/report.md`` with PNG plots beside it, ``OUT/scores.json`` and the
trained classifier ``OUT/classifier.pt``. Every input is checked before anything is
written, and every file is written whole or not at all (an interrupted run leaves the
earlier version, or none).

Usage::

    fairseq-speaker-report --out report --references data/text/test.fr --tokenize none \\
        --system base=runs/base/test.generate --system fact_bias=runs/fact_bias/test.generate \\
        --train-text data/text/train.fr --train-speakers data/text/train.spk \\
        --test-speakers data/text/test.spk \\
        --checkpoint fact_bias=runs/fact_bias/sgd/checkpoint_best.pt --data data/bin
"""

import argparse
import logging
import os
import sys
import unicodedata
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_speaker.analysis.classifier import train_classifier
from fairseq_speaker.analysis.inspect_bias import BiasInspection
from fairseq_speaker.analysis.scores import SIGNIFICANCE, SystemScore, detokenize, read_hypotheses, score_systems
from fairseq_speaker.atomic_write import atomic_path, check_not_an_input, make_folder, write_json, write_text
from fairseq_speaker.command_registry import program_name
from fairseq_speaker.data import read_lines, read_speaker_file
from fairseq_speaker.data.speaker_labels import described_character, visible_form
from fairseq_speaker.data.text_files import check_not_a_pipe
from fairseq_speaker.errors import UserError, command
from fairseq_speaker.runtime import (
    add_runtime_arguments,
    check_threads,
    configure_output,
    options_given,
    parse_seed,
    start_threads,
)
from fairseq_speaker.user_dir import add_user_dir_argument, import_user_dir

PROG = program_name(__name__)
#: the most bootstrap samples --bootstrap may ask for (drawn at once, one row of sentence indices each)
MAX_BOOTSTRAP = 10_000
logger = logging.getLogger("fairseq_speaker.report")


def _pairs(values: Sequence[str], flag: str) -> List[Tuple[str, str]]:
    pairs: List[Tuple[str, str]] = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise UserError(f"{flag} takes NAME=PATH, got {value!r}")
        bad = next((i for i, c in enumerate(name) if c == "|" or not c.isprintable()), None)
        if bad is not None:  # a '|' shifted the columns of report.md's row, a line end split it
            raise UserError(f"{flag} {name!r}: a NAME is a column of the report's tables, and this one holds "
                            f"{described_character(name[bad])} at character {bad + 1}: give one without '|' or "
                            f"characters that do not print (line ends, tabs and other control characters, invisible "
                            f"ones, spaces other than U+0020)")
        if not visible_form(name):  # a row whose name column is blank
            raise UserError(f"{flag} {name!r}: a NAME that shows nothing: give each a name a reader sees")
        if not os.path.exists(path):
            raise UserError(f"{flag} {name}: file not found: {path}")
        if name in (seen for seen, _ in pairs):
            raise UserError(f"{flag} {name} is given twice (the report would show one under the name): give each "
                            f"a name of its own")
        twin = next((seen for seen, _ in pairs if visible_form(seen) == visible_form(name)), None)
        if twin is not None:  # two rows a reader cannot tell apart
            raise UserError(f"{flag} {name!r} looks like {twin!r}, given before (another space, invisible characters "
                            f"or another Unicode normalization): the report's rows could not be told apart; give "
                            f"each a name of its own")
        pairs.append((name, path))
    return pairs


def _progress(message: str) -> None:
    print(f"[report] {message}", file=sys.stderr, flush=True)


def significance_legend(baseline: str, samples: int) -> str:
    """What the † of the scores table means (in report.md and on the console, beside the table)."""
    return (f"† marks a BLEU that differs from {baseline}'s with p < {SIGNIFICANCE} (paired bootstrap resampling, "
            f"{samples} samples), as in the paper's Table 3")


def scores_table(scores: List[SystemScore]) -> List[str]:
    """The scores as a markdown table, one row per system, † where BLEU differs from the baseline's."""
    lines = ["| system | BLEU | chrF | p (BLEU) | p (chrF) | BLEU 95% CI |", "|---|---|---|---|---|---|"]
    for s in scores:
        mark = " †" if s.significant else ""
        p_bleu = "baseline" if s.bleu_p is None else f"{s.bleu_p:.4f}"
        p_chrf = "" if s.chrf_p is None else f"{s.chrf_p:.4f}"
        ci = "" if s.bleu_ci is None else f"± {s.bleu_ci:.2f}"
        lines.append(f"| {s.name} | {s.bleu:.2f}{mark} | {s.chrf:.2f} | {p_bleu} | {p_chrf} | {ci} |")
    return lines


def scores_section(scores: List[SystemScore], signatures: Dict[str, str], baseline: str, samples: int) -> List[str]:
    lines = ["## Translation quality", "",
             f"Paired bootstrap resampling ({samples} samples) of every system against **{baseline}**.", ""]
    lines += scores_table(scores) + ["", significance_legend(baseline, samples) + "."]
    lines += ["", "sacrebleu signatures:", ""] + [f"- {m}: `{sig}`" for m, sig in signatures.items()] + [""]
    return lines


def console_summary(scores: List[SystemScore], baseline: str, samples: int,
                    accuracies: Optional[List[Tuple[str, float]]], out: str) -> str:
    """What the command prints: the scores table with its legend, the classifier's accuracies, the files."""
    lines = scores_table(scores) + ([significance_legend(baseline, samples)] if len(scores) > 1 else [])
    if accuracies:
        lines += ["", "| text | speaker classifier accuracy |", "|---|---|"]
        lines += [f"| {name} | {100 * acc:.2f}% |" for name, acc in accuracies]
    lines += ["", f"(report in {os.path.join(out, 'report.md')}; every figure in {os.path.join(out, 'scores.json')})"]
    return "\n".join(lines)


def classifier_section(accuracies: List[Tuple[str, float]], num_speakers: int, majority: float,
                       plot: str, epochs: int) -> List[str]:
    lines = ["## Speaker classifier", "",
             f"A continuous bag of unigrams and bigrams (the paper's Appendix C; {epochs} epochs) trained on "
             f"the target side of the training set recognizes the speaker of each test sentence. Higher "
             f"accuracy on a system's output means the translation kept more of the speaker's style "
             f"(the paper's Figure 2). Chance: {100 / num_speakers:.2f}% ({num_speakers} speakers); "
             f"always guessing the most frequent test speaker: {100 * majority:.2f}%.", "",
             f"![classifier accuracy]({os.path.basename(plot)})", "",
             "| text | accuracy |", "|---|---|"]
    lines += [f"| {name} | {100 * acc:.2f}% |" for name, acc in accuracies]
    return lines + [""]


def inspect_speakers(inspection: BiasInspection, speakers: List[str], k: int) -> Dict[str, Dict]:
    """For each speaker: the words their bias raises and lowers most, and their nearest speakers
    (when the variant has speaker vectors to compare them by)."""
    figures: Dict[str, Dict] = {}
    for speaker in speakers:
        figures[speaker] = {}
        if inspection.has_bias:  # a variant acting only on the decoder's state raises and lowers no word itself
            raises, lowers = inspection.top_words(speaker, k)
            figures[speaker] = {"raises": raises, "lowers": lowers}
        if inspection.has_speaker_vectors:
            figures[speaker]["nearest"] = inspection.nearest(speaker, 5)
    return figures


#: at most this many vectors of one kind are listed word by word
MAX_VECTORS = 20


def inspection_section(name: str, inspection: BiasInspection, figures: Dict[str, Dict], k: int,
                       plot: Optional[str]) -> List[str]:
    def words(pairs):
        return ", ".join(f"{w} ({v:+.2f})" for w, v in pairs)

    lines = [f"## What the speaker bias learned: {name} (`--speaker-bias {inspection.variant}`)", ""]
    for speaker, figure in figures.items():
        lines += [f"### Speaker {speaker}", ""]
        if "raises" in figure:
            lines += [f"- raises: {words(figure['raises'])}", f"- lowers: {words(figure['lowers'])}"]
        if "nearest" in figure:
            near = ", ".join(f"{s} ({v:.2f})" for s, v in figure["nearest"])
            lines.append(f"- nearest speakers (cosine of their {inspection.speaker_vector_label}): {near}")
        lines.append("")
    for label, vectors in inspection.vocabulary_vector_words(k).items():
        shown = vectors[:MAX_VECTORS]
        more = f" (the first {len(shown)} of {len(vectors)})" if len(vectors) > len(shown) else ""
        lines += [f"### {label[0].upper() + label[1:]}{more}", "", "| vector | highest words | lowest words |",
                  "|---|---|---|"]
        for j, (up, down) in enumerate(shown):
            lines.append(f"| {j} | {', '.join(w for w, _ in up)} | {', '.join(w for w, _ in down)} |")
        lines.append("")
    if plot:
        lines += [f"![speakers projected on two dimensions]({os.path.basename(plot)})", ""]
    return lines


def plot_bars(accuracies: List[Tuple[str, float]], chance: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(accuracies), 3.5))
    names = [n for n, _ in accuracies]
    ax.bar(names, [100 * a for _, a in accuracies], color=["#777777"] + ["#3b75af"] * (len(names) - 1))
    ax.axhline(100 * chance, color="#c44e52", linestyle="--", linewidth=1, label="chance")
    ax.set_ylabel("speaker classifier accuracy (%)")
    ax.legend(loc="upper right")
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


def plot_projection(inspection: BiasInspection, highlight: List[str], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = inspection.projection()
    fig, ax = plt.subplots(figsize=(5, 4.5))
    ax.scatter(points[:, 0], points[:, 1], s=8, alpha=0.6, color="#3b75af")
    for speaker in highlight:
        i = inspection.speakers.index(speaker)
        ax.annotate(speaker, (float(points[i, 0]), float(points[i, 1])), fontsize=8)
    ax.set_title(title)
    ax.set_xlabel("first principal component")
    ax.set_ylabel("second principal component")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


def load_inspection(name: str, checkpoint: str, data: str, speakers: List[str]) -> BiasInspection:
    """The inspection of a ``--checkpoint``, with the ``--speaker`` names checked if its variant has
    speakers of its own; a checkpoint that cannot be inspected ends the run with its reason."""
    try:
        inspection = BiasInspection.from_checkpoint(checkpoint, data=data)
        if inspection.has_speakers:
            inspection.check_speakers(speakers)
    except ValueError as e:
        raise UserError(f"--checkpoint {name}: {e}") from None
    return inspection


def read_systems(references_path: str, systems: List[Tuple[str, str]],
                 lines: str) -> Tuple[List[str], Dict[str, List[str]]]:
    """The references and every system's hypotheses, checked before any work: none empty, as many
    hypotheses as references."""
    option = f"--references {references_path}"
    try:
        references = read_lines(references_path)
        outputs = {}  # each read once: a pipe (<(command)) is empty the second time
        for name, path in systems:
            option = f"--system {name}={path}"
            outputs[name] = read_hypotheses(path, lines, references)
    except ValueError as e:  # a UserError, or a fairseq-generate output with missing sentences or an id twice
        raise UserError(f"{option}: {e}") from None
    references = _nfc(references, f"--references {references_path}")
    outputs = {name: _nfc(outputs[name], f"--system {name}={path}") for name, path in systems}
    if not references:
        raise UserError(f"--references {references_path} is empty: there is nothing to score against")
    filled = len(references)
    while filled and not references[filled - 1].strip():
        filled -= 1
    blank = len(references) - filled
    for (name, path), hyps in zip(systems, outputs.values()):
        if blank and len(hyps) == filled:
            lines = f"line {filled + 1}" if blank == 1 else f"lines {filled + 1}-{len(references)}"
            raise UserError(f"--references {references_path} ends in {blank} blank line{'s' if blank > 1 else ''} "
                            f"({lines}), which no system's output has (--system {name}={path}: {len(hyps)} hypotheses, "
                            f"as many as its other lines): remove the blank line{'s' if blank > 1 else ''} at its end")
        if len(hyps) != len(references):
            raise UserError(f"--system {name}={path}: {len(hyps)} hypotheses for the {len(references)} references "
                             f"of {references_path}; give the output of the same test set")
    return references, outputs


def _nfc(texts: List[str], where: str) -> List[str]:
    """``texts`` in Unicode's normal form NFC, said in a warning where one was not: BLEU and chrF compare code points,
    and an output in NFD ('é' as 'e' and an accent) scored 54 against references it equalled (89)."""
    normalized = [unicodedata.normalize("NFC", text) for text in texts]
    changed = [i for i, (text, nfc) in enumerate(zip(texts, normalized)) if nfc != text]
    if changed:
        logger.warning(f"{where}: {len(changed)} sentence(s) (the first: sentence {changed[0] + 1}) not in Unicode's "
                       f"normal form NFC (decomposed accents?): scored as NFC, as a reader sees them")
    return normalized


def _sacrebleu_tokenizers() -> List[str]:
    """The names of sacrebleu's BLEU tokenizers (``BLEU.TOKENIZERS``; 13a and none where it has no such table)."""
    from sacrebleu.metrics.bleu import BLEU
    return list(getattr(BLEU, "TOKENIZERS", None) or ["13a", "none"])


def _outputs(args, systems: List[Tuple[str, str]], checkpoints: List[Tuple[str, str]]) -> None:
    """Refuse (:class:`UserError`) a file of ``--out`` the report writes that is one it reads (``--references`` as
    OUT/report.md, a system's output as OUT/scores.json, by their names or a link's): it was replaced by the report."""
    inputs = [("the --references", args.references), *((f"the output of --system {n}", p) for n, p in systems),
              ("the --train-text", args.train_text), ("the --train-speakers", args.train_speakers),
              ("the --test-speakers", args.test_speakers), *((f"the --checkpoint {n}", p) for n, p in checkpoints)]
    names = ["report.md", "scores.json", "classifier.pt", "classifier.png",
             *(f"speakers_{name}.png" for name, _ in checkpoints)]
    for name in names:
        check_not_an_input(os.path.join(args.out, name), "--out", inputs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for report.md, its plots, scores.json, classifier.pt")
    parser.add_argument("--references", required=True, help="reference translations of the test set, one a line")
    parser.add_argument("--system", action="append", default=[], metavar="NAME=FILE", required=True,
                        help="a system's output: fairseq-generate output or one hypothesis a line (repeat)")
    parser.add_argument("--baseline", help="the system the others are tested against (default: the first)")
    parser.add_argument("--lines", choices=["H", "D"], default="H",
                        help="which lines of fairseq-generate output to read: H (tokenized) or D (detokenized)")
    parser.add_argument("--detok", metavar="LANG", help="Moses-detokenize hypotheses and references before BLEU/chrF")
    parser.add_argument("--tokenize", default="13a", choices=_sacrebleu_tokenizers(),  # 'bogus' was a KeyError
                        help="sacrebleu's tokenizer ('none' for pre-tokenized text)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="paired bootstrap samples")
    parser.add_argument("--seed", type=parse_seed, default=12345, help="seed of the bootstrap resampling")
    group = parser.add_argument_group("speaker classifier (all three files, or none)")
    group.add_argument("--train-text", help="target side of the training set")
    group.add_argument("--train-speakers", help="speaker labels of the training set")
    group.add_argument("--test-speakers", help="speaker labels of the test set")
    group.add_argument("--classifier-epochs", type=int, default=50)
    group.add_argument("--classifier-batch-size", type=int, default=32)
    group = parser.add_argument_group("bias inspection")
    group.add_argument("--checkpoint", action="append", default=[], metavar="NAME=FILE",
                       help="a checkpoint whose speaker bias to inspect, of any variant with speaker parameters "
                       "or shared vocabulary vectors (repeat)")
    group.add_argument("--data", help="the data directory of the checkpoints (for the target dictionary)")
    group.add_argument("--speaker", action="append", default=[],
                       help="speakers to inspect (default: the most frequent)")
    group.add_argument("--inspect-speakers", type=int, default=3, help="how many speakers, without --speaker")
    group.add_argument("--top-words", type=int, default=10)
    add_user_dir_argument(group)
    add_runtime_arguments(parser)
    return parser


@command()
def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_output(args.verbose)
    for name in ("bootstrap", "classifier_epochs", "classifier_batch_size", "inspect_speakers", "top_words"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.bootstrap > MAX_BOOTSTRAP:  # the samples are drawn at once: 1e8 asked numpy for 35.8 GiB
        parser.error(f"--bootstrap must be at most {MAX_BOOTSTRAP} (1000 is the usual), got {args.bootstrap}")
    check_threads(parser, args)
    import_user_dir(args.user_dir)
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UserError(f"--out {args.out} is a file: give a folder for the report (it is made if missing)")
    if args.baseline is not None and args.baseline not in [v.partition("=")[0] for v in args.system]:
        raise UserError(f"--baseline {args.baseline}: not the NAME of a --system")
    systems = _pairs(args.system, "--system")
    checkpoints = _pairs(args.checkpoint, "--checkpoint")
    _outputs(args, systems, checkpoints)
    classifier_files = [args.train_text, args.train_speakers, args.test_speakers]
    if any(classifier_files) and not all(classifier_files):
        raise UserError("the speaker classifier needs --train-text, --train-speakers and --test-speakers")
    if checkpoints and not args.data:
        raise UserError("--checkpoint needs --data, the data directory with the target dictionary")
    if args.speaker and options_given(parser, args, ("inspect_speakers",)):  # the speakers named were inspected alone
        raise UserError(f"--inspect-speakers {args.inspect_speakers} and --speaker both choose the speakers inspected: "
                        f"give one")
    # the options of a section that is not written (they were taken without a word)
    for section, needs, written, options in (
            ("the speaker classifier", "--train-text, --train-speakers and --test-speakers", any(classifier_files),
             ("classifier_epochs", "classifier_batch_size")),
            ("the bias inspection", "--checkpoint", bool(checkpoints), ("speaker", "inspect_speakers", "top_words"))):
        idle = options_given(parser, args, options)
        if idle and not written:
            raise UserError(f"{' and '.join(idle)}: options of {section}, a section written only with {needs}: give "
                            f"{'those' if ',' in needs else 'it'}, or leave {'them' if len(idle) > 1 else 'it'} out")
    # every input is read and checked before any work or output: a wrong dictionary, speaker or file
    # ends the run before the slow parts, with nothing written
    inspections = [(name, load_inspection(name, path, args.data, args.speaker)) for name, path in checkpoints]
    references, outputs = read_systems(args.references, systems, args.lines)
    if all(classifier_files):
        for option in ("--train-text", "--train-speakers", "--test-speakers"):
            check_not_a_pipe(getattr(args, option[2:].replace("-", "_")), option)
        train_text = read_lines(args.train_text)
        train_speakers = read_speaker_file(args.train_speakers, len(train_text))
        test_speakers = read_speaker_file(args.test_speakers, len(references))
    make_folder(args.out, "--out")
    start_threads(args.threads)
    baseline = args.baseline or systems[0][0]
    scored = ({n: detokenize(h, args.detok) for n, h in outputs.items()}, detokenize(references, args.detok)) \
        if args.detok else (outputs, references)
    _progress(f"BLEU and chrF of {len(outputs)} systems, {args.bootstrap} bootstrap samples against {baseline}")
    scores, signatures = score_systems(scored[0], scored[1], baseline, tokenize=args.tokenize,
                                       samples=args.bootstrap, seed=args.seed)
    report = ["# Speaker-aware translation report", "",
              f"Test set: {len(references)} sentences ({args.references}); systems: "
              + ", ".join(f"{n} ({p})" for n, p in systems) + ".", ""]
    report += scores_section(scores, signatures, baseline, args.bootstrap)
    results: Dict = {"scores": [s.__dict__ for s in scores], "signatures": signatures}

    accuracies = None
    if all(classifier_files):
        _progress(f"training the speaker classifier on {len(train_text)} sentences, {args.classifier_epochs} epochs")
        classifier = train_classifier(train_text, train_speakers, epochs=args.classifier_epochs,
                                      batch_size=args.classifier_batch_size)
        with atomic_path(os.path.join(args.out, "classifier.pt")) as tmp:
            classifier.save(tmp)
        accuracies = [("references", classifier.accuracy(references, test_speakers))]
        accuracies += [(name, classifier.accuracy(hyps, test_speakers)) for name, hyps in outputs.items()]
        majority = max(test_speakers.count(s) for s in set(test_speakers)) / len(test_speakers)
        bars = os.path.join(args.out, "classifier.png")
        plot_bars(accuracies, 1 / len(classifier.speakers), bars)
        report += classifier_section(accuracies, len(classifier.speakers), majority, bars, args.classifier_epochs)
        results["classifier"] = dict(accuracies)

    for name, inspection in inspections:
        _progress(f"inspecting the speaker bias of {name}")
        figures, plot = {}, None
        speakers = args.speaker or inspection.speakers[: args.inspect_speakers]
        if inspection.has_speakers:
            figures = inspect_speakers(inspection, speakers, args.top_words)
        if inspection.has_speaker_vectors:
            plot = os.path.join(args.out, f"speakers_{name}.png")
            plot_projection(inspection, speakers, plot, f"{name}: speakers ({inspection.speaker_vector_label})")
        report += inspection_section(name, inspection, figures, args.top_words, plot)
        results.setdefault("inspection", {})[name] = figures

    write_json(os.path.join(args.out, "scores.json"), results)
    write_text(os.path.join(args.out, "report.md"), "\n".join(report) + "\n")  # last: the report is complete
    print(console_summary(scores, baseline, args.bootstrap, accuracies, args.out), flush=True)


if __name__ == "__main__":
    main()
