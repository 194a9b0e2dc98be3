"""From nothing to a results table: toy corpus, fairseq-preprocess, fairseq-train, fairseq-generate.

Generates the synthetic corpus of :mod:`fairseq_speaker.toy.corpus` (speaker
traits the source never shows), trains each system with the stock fairseq
command lines, decodes the test set with beam 5 and prints BLEU (sacrebleu) and
the share of speaker-dependent words each system got right; then writes the
evaluation report (``fairseq-speaker-report``) to ``WORKDIR/report``. Small
enough for a few minutes on 2 CPU cores.

``--beams 1 5`` decodes each trained system with every beam size given: a row per system and beam
(does beam search recover what greedy decoding with an output bias misses?).

A system is a preset (``lstm_fact_bias``, ``transformer_base``, ...), optionally
with another speaker bias variant (``lstm_base:simplex``, ``transformer_base:fact+topic``)
or the speaker token (``lstm_base+spk_token``). When a system of the run has the topic variant, a
topic model of the source side is fitted once (``fairseq-speaker-topics``) and given to every system
(``--topic-model``): variants that read the source use it, the others ignore it.

With ``--styles K`` the corpus is of the styles mode (K styles of translating ambiguous phrases,
shared by the speakers, each speaker leaving theirs on a share ``--deviation`` of the phrases; see
:mod:`fairseq_speaker.toy.corpus`): the table has a ``style`` column instead of ``profession`` and a
third oracle, ``oracle: Bayes``, the exact limit of a learner of each speaker's training sentences
(:mod:`fairseq_speaker.toy.oracle`).

Usage::

    fairseq-speaker-demo --workdir demo-work
    fairseq-speaker-demo --archs lstm_base lstm_fact_bias transformer_base transformer_fact_bias
    fairseq-speaker-demo --styles 6 --deviation 0.1 --speakers 96
    fairseq-speaker-demo --archs lstm_fact_bias transformer_base:fact+hyper_lhuc --beams 1 5
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

import sacrebleu

from fairseq_speaker import commands
from fairseq_speaker.errors import command
from fairseq_speaker.commands import family
from fairseq_speaker.commands import run_fairseq as fairseq
from fairseq_speaker.data import read_lines
from fairseq_speaker.generate_output import read_generate_output
from fairseq_speaker.models import FAMILY_REGISTRY, get_family, preset_variant, speaker_presets
from fairseq_speaker.modules.speaker_bias import parse_variant_name
from fairseq_speaker.analysis.speaker_words import read_traits, trait_accuracy
from fairseq_speaker.sequence_generator import check_beam_within
from fairseq_speaker.toy.corpus import DEFAULT_DEVIATION, TRAITS, check_out_folder, read_styles, write_corpus
from fairseq_speaker.toy.oracle import BAYES, bayes_accuracy, oracle_accuracy, oracle_rows
from fairseq_speaker.runtime import add_runtime_arguments, check_at_least, check_threads, configure_output, parse_seed, start_threads

DEFAULT_SYSTEMS = ["lstm_base", "lstm_fact_bias", "transformer_fact_bias"]
#: the beam of the paper's decoding, the demo's unless --beams says otherwise
DEFAULT_BEAM = 5


def family_args(name: str) -> List[str]:
    """Model sizes and optimisation of a family, small enough for a CPU in minutes: what its declaration
    gives the demo (its ``demo`` sizes, its output tied as in the paper, its ``demo_options``)."""
    declared = get_family(name)
    return [*declared.scale_args("demo"), *declared.tie_output, *declared.demo_options]


def prepare(workdir: str, sizes: Dict[str, int], speakers: int, threads: int, topics: int, styles: int = 0,
            deviation: float = DEFAULT_DEVIATION) -> str:
    raw = os.path.join(workdir, "raw")
    write_corpus(raw, sizes, num_speakers=speakers, styles=styles, deviation=deviation)
    data = binarize(workdir, raw, threads)
    if topics:  # only when a system of the run has the topic variant
        from fairseq_speaker.topic_model import main as fit_topics

        fit_topics([data, "--topics", str(topics), "--out", os.path.join(data, "topics.npz"), "--top-words", "0"])
    return data


def binarize(workdir: str, raw: str, threads: int) -> str:
    """The corpus in ``raw`` (train, valid and test, en-fr) binarized in ``workdir/bin`` (made anew), with its speaker
    files beside; that folder."""
    data = os.path.join(workdir, "bin")
    if os.path.isdir(data):
        shutil.rmtree(data)
    fairseq("preprocess", [
        "--source-lang", "en", "--target-lang", "fr",
        "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid", "--testpref", f"{raw}/test",
        "--destdir", data, "--workers", str(threads),
    ], os.path.join(workdir, "preprocess.log"), threads)
    for split in ("train", "valid", "test"):
        shutil.copy(os.path.join(raw, f"{split}.spk"), data)
    return data


def uses_topics(systems: Sequence[str]) -> bool:
    """Whether a system of ``systems`` (``ARCH[:VARIANT][+spk_token]``) has the topic variant, which reads the
    topic model that :func:`prepare` fits."""
    for system in systems:
        args = commands.system_args(system)
        if "--speaker-bias" in args and "topic" in parse_variant_name(args[args.index("--speaker-bias") + 1]):
            return True
    return False


def train(workdir: str, data: str, system: str, args, extra: Sequence[str] = (),
          progress: Optional[Callable[[str], None]] = print) -> str:
    """Train ``system`` as the demo does (``extra``: more fairseq-train options, which win); its best checkpoint."""
    name = system_name(system)
    topics = os.path.join(data, "topics.npz")
    save_dir = os.path.join(workdir, "checkpoints", name)
    if os.path.isdir(save_dir):
        shutil.rmtree(save_dir)
    fairseq("train", commands.train_args(
        data, save_dir, commands.system_args(system), *family_args(family(system)),
        *(["--topic-model", topics] if os.path.exists(topics) else []), "--lr", str(args.lr[family(system)]),
        "--max-tokens", "1000", "--max-epoch", str(args.epochs), "--seed", str(args.seed),
        "--no-epoch-checkpoints", "--no-progress-bar", "--log-interval", "50", *extra,
    ), os.path.join(workdir, f"train.{name}.log"), args.threads, progress=progress)
    return os.path.join(save_dir, "checkpoint_best.pt")


def system_name(system: str) -> str:
    """The name of a system's files (``transformer_base:fact+topic`` -> ``transformer_base-fact+topic``)."""
    return system.replace(":", "-")


#: the suffix of a system decoded with its speakers' words (``--words``)
WORDS = "+words"


def remember_words(data: str, checkpoint: str, threads: int) -> Optional[str]:
    """``checkpoint`` with its speakers' words (``fairseq-speaker-words`` on the training split), written beside it;
    None for a model whose speakers have no parameters of their own (a speaker-agnostic or speaker-token one)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    # the checkpoint's speakers as fairseq-speaker-speakers lists them (the demo runs the commands, as a user would)
    listing = json.loads(subprocess.run([sys.executable, "-m", "fairseq_speaker.onboarding.speakers", checkpoint,
                                         "--json"], check=True, env=env, stdout=subprocess.PIPE, text=True).stdout)
    if not listing["parameters_per_speaker"] or listing["variant"] == "spk_token":
        return None
    out = os.path.join(os.path.dirname(checkpoint), "words.pt")
    subprocess.run([sys.executable, "-m", "fairseq_speaker.onboarding.words", data, "--path", checkpoint, "--save", out,
                    "--threads", str(threads)], check=True, env=env, stdout=subprocess.DEVNULL)
    return out


def output_path(workdir: str, system: str, beam: int = DEFAULT_BEAM) -> str:
    """Where the test set's translations by ``system`` with ``beam`` are kept: ``generate.NAME.txt`` for the
    demo's beam, ``generate.NAME.beamB.txt`` for another."""
    suffix = "" if beam == DEFAULT_BEAM else f".beam{beam}"
    return os.path.join(workdir, f"generate.{system_name(system)}{suffix}.txt")


def translate(workdir: str, data: str, system: str, checkpoint: str, threads: int,
              beam: int = DEFAULT_BEAM) -> List[str]:
    """Decode the test set with ``system``'s ``checkpoint`` and ``beam`` (1: greedy); its hypotheses, in the test
    set's order, also kept in :func:`output_path`."""
    path = output_path(workdir, system, beam)
    out = fairseq("generate", commands.generate_args(
        data, checkpoint, "--beam", str(beam), "--batch-size", "64",
        "--gen-subset", "test", "--speaker-file", os.path.join(workdir, "raw", "test.spk"),
    ), path[:-len(".txt")] + ".log", threads)
    with open(path, "w", encoding="utf-8") as f:
        f.write(out)
    return read_generate_output(out, source=path)


def train_and_translate(workdir: str, data: str, system: str, args, extra: Sequence[str] = (),
                        progress: Optional[Callable[[str], None]] = print) -> List[str]:
    """Train ``system`` as the demo does (``extra``: more fairseq-train options, which win) and decode the test
    set with beam 5; its hypotheses, in the test set's order."""
    checkpoint = train(workdir, data, system, args, extra, progress)
    return translate(workdir, data, system, checkpoint, args.threads)


def time_left(done: int, total: int, seconds: float) -> str:
    """The progress line before system ``done + 1`` of ``total``, the time left estimated from the ``done`` systems
    that took ``seconds`` in all: ``system 2 of 16, about 25 min left``."""
    left = seconds / done * (total - done)
    return f"system {done + 1} of {total}, about {max(1, round(left / 60))} min left"


def ceilings(raw: str) -> Dict[str, Dict[str, float]]:
    """The oracles of the corpus in ``raw`` on its test split (see :mod:`fairseq_speaker.toy.oracle`): the
    two of every corpus and, for one of the styles mode (``speakers.json``), the Bayes limit."""
    train = (read_lines(os.path.join(raw, "train.spk")), read_traits(os.path.join(raw, "train.traits")))
    test = (read_lines(os.path.join(raw, "test.spk")), read_traits(os.path.join(raw, "test.traits")))
    found = oracle_accuracy(*train, *test)
    if os.path.exists(os.path.join(raw, "speakers.json")):
        found[BAYES] = bayes_accuracy(read_styles(os.path.join(raw, "speakers.json")), *train, *test)
    return found


def format_table(rows: List[Dict], beams: bool = False) -> str:
    """The results table: a column for each of the corpus's traits that a row scores; with ``beams``, a ``beam``
    column after the system (each row's ``beam``; ``-`` for the oracles)."""
    traits = [t for t in TRAITS if any(t in r["traits"] for r in rows)]
    header = ["system", *(["beam"] if beams else []), "BLEU", "speaker words", *traits, "seconds"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [r["system"], *([str(r.get("beam") or "-")] if beams else []),
                 "-" if r["bleu"] is None else f"{r['bleu']:.2f}", f"{100 * r['traits']['all']:.1f}%"]
        cells += [f"{100 * r['traits'].get(t, float('nan')):.1f}%" for t in traits]
        cells.append("-" if r["seconds"] is None else f"{r['seconds']:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default="demo-work", help="where data, checkpoints and logs go")
    parser.add_argument("--archs", nargs="+", default=DEFAULT_SYSTEMS, metavar="SYSTEM",
                        help="systems to train: a preset (" + ", ".join(speaker_presets()) + "), "
                        "optionally :VARIANT (any registered speaker bias, e.g. lstm_base:simplex) "
                        "and/or +spk_token")
    parser.add_argument("--beams", type=int, nargs="+", default=[DEFAULT_BEAM], metavar="B",
                        help=f"decode each system with each of these beam sizes (1: greedy), a row each "
                        f"(default: {DEFAULT_BEAM}); the report reads the beam-{DEFAULT_BEAM} translations, or the "
                        f"last beam's when {DEFAULT_BEAM} is not given")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--lr", type=float, help="learning rate (default: " + ", ".join(
        f"{f.demo_lr} for {name}" for name, f in FAMILY_REGISTRY.items()) + ")")
    parser.add_argument("--train", type=int, default=6000, help="training sentences")
    parser.add_argument("--test", type=int, default=400, help="validation and test sentences each")
    parser.add_argument("--speakers", type=int, default=24)
    parser.add_argument("--styles", type=int, default=0, metavar="K",
                        help="a corpus of the styles mode: K styles of translating ambiguous phrases instead of "
                        "professions, and the Bayes oracle in the table (default: 0, the default corpus)")
    parser.add_argument("--deviation", type=float, default=DEFAULT_DEVIATION, metavar="P",
                        help="with --styles: the probability that a speaker leaves their style on a phrase")
    parser.add_argument("--words", action="store_true",
                        help="also decode each system whose speakers have parameters of their own with its speakers' "
                        "words (fairseq-speaker-words): a row SYSTEM+words each")
    parser.add_argument("--topics", type=int, default=None,
                        help="topics of the source-side topic model, for systems of the topic variant (default: 8)")
    parser.add_argument("--seed", type=parse_seed, default=1)
    add_runtime_arguments(parser, threads_help="CPU threads of each training and decoding (one at a time; "
                          "default: the cores this process may use, or OMP_NUM_THREADS if set)")
    parser.add_argument("--no-report", action="store_true",
                        help="skip the evaluation report (significance, speaker classifier, bias inspection)")
    parser.add_argument("--classifier-epochs", type=int, default=None,
                        help="epochs of the report's speaker classifier (default: 20)")
    return parser


def _what_it_trains(system: str) -> tuple:
    """A system as what it trains, however it is spelled: its family, its variant's parts, whether it has the speaker
    token (``lstm_fact_bias`` and ``lstm_base:fact`` are one)."""
    choice = commands.system_args(system)
    variant = choice[choice.index("--speaker-bias") + 1] if "--speaker-bias" in choice else preset_variant(choice[1])
    return family(system), frozenset(parse_variant_name(variant or "none")), "--speaker-token" in choice


def parse_args(argv=None) -> argparse.Namespace:
    """The demo's options, its systems checked: a preset, a registered variant."""
    parser = build_parser()
    args = parser.parse_args(argv)
    presets = set(speaker_presets())
    for system in args.archs:
        choice = commands.system_args(system)
        if choice[1] not in presets:
            parser.error(f"unknown system {system!r}: a system is PRESET, PRESET:VARIANT, or either with +spk_token "
                         f"at the end; start it with a preset ({', '.join(sorted(presets))})")
        if "--speaker-bias" in choice:
            try:
                parse_variant_name(choice[choice.index("--speaker-bias") + 1])
            except ValueError as e:
                parser.error(f"system {system!r}: {e}")
    check_threads(parser, args)
    if min(args.beams) < 1:
        parser.error(f"--beams must be at least 1 (1: greedy), got {min(args.beams)}")
    if len(set(args.beams)) < len(args.beams):
        parser.error(f"--beams {' '.join(map(str, args.beams))} names a beam size twice")
    if args.speakers < 1:  # the corpus divides its sentences among them
        parser.error(f"--speakers must be at least 1, got {args.speakers}")
    check_out_folder(parser, args.workdir, "--workdir", "the demo's data, checkpoints and logs")
    if args.epochs < 1:  # fairseq's --max-epoch 0 is no limit: it would train for ever
        parser.error(f"--epochs must be at least 1, got {args.epochs}")
    if args.lr is not None and not (math.isfinite(args.lr) and args.lr > 0):
        parser.error(f"--lr must be a number above 0, got {args.lr}")
    for name, size in (("--train", args.train), ("--test", args.test)):
        if size < args.speakers:  # the corpus gives every speaker a sentence of each split
            parser.error(f"{name} {size}: fewer sentences than the {args.speakers} speakers (--speakers); every "
                         f"speaker has one sentence in each split at least")
    if len(set(args.archs)) < len(args.archs):
        parser.error(f"--archs {' '.join(args.archs)} names a system twice")
    spelled: Dict[tuple, str] = {}
    for system in args.archs:  # lstm_fact_bias and lstm_base:fact: one model, trained twice under two names
        first = spelled.setdefault(_what_it_trains(system), system)
        if first != system:
            parser.error(f"--archs: {first} and {system} are one system (the same family, speaker bias and speaker "
                         f"token): give it once")
    if args.styles < 0:
        parser.error("--styles must be 0 (the default corpus) or more")
    if not 0.0 <= args.deviation <= 1.0:
        parser.error(f"--deviation {args.deviation} is not a probability (0 to 1)")
    if args.deviation != DEFAULT_DEVIATION and not args.styles:
        parser.error(f"--deviation {args.deviation} is the styles corpus's: give --styles K too")
    if args.topics is not None and not uses_topics(args.archs):
        parser.error(f"--topics {args.topics} sizes the topic model of the topic variant, and no system of --archs "
                     f"has it: drop --topics, or add a system such as lstm_base:fact+topic")
    if args.topics is not None and args.topics < 1:
        parser.error(f"--topics must be at least 1, got {args.topics}")
    args.topics = 8 if args.topics is None else args.topics
    if args.no_report and args.classifier_epochs is not None:
        parser.error(f"--classifier-epochs {args.classifier_epochs} trains the report's speaker classifier, and "
                     f"--no-report writes no report: drop one of them")
    check_at_least(parser, args, ["classifier_epochs"])  # refused by the report only after every system trained
    args.classifier_epochs = 20 if args.classifier_epochs is None else args.classifier_epochs
    args.lr = {name: args.lr or f.demo_lr for name, f in FAMILY_REGISTRY.items()}
    return args


@command(named_errors=False)
def main(argv=None) -> None:
    args = parse_args(argv)
    configure_output(args.verbose)
    args.threads = start_threads(args.threads).threads
    os.makedirs(args.workdir, exist_ok=True)
    started = time.time()
    topics = args.topics if uses_topics(args.archs) else 0
    print(f"[demo] writing the toy corpus, binarizing it{' and fitting a topic model' if topics else ''} in "
          f"{args.workdir}", flush=True)
    data = prepare(args.workdir, {"train": args.train, "valid": args.test, "test": args.test},
                   args.speakers, args.threads, topics, styles=args.styles, deviation=args.deviation)
    references = read_lines(os.path.join(args.workdir, "raw", "test.fr"))
    traits = read_traits(os.path.join(args.workdir, "raw", "test.traits"))
    from fairseq.data import Dictionary  # the beams against the target words, before any training (it was after)

    check_beam_within(max(args.beams), len(Dictionary.load(os.path.join(data, "dict.fr.txt"))), "--beams")

    rows = []
    several = args.beams != [DEFAULT_BEAM]  # then a row per system and beam, and the beam in the table
    beams = ", ".join(map(str, args.beams))
    systems_started = time.time()
    for done, system in enumerate(args.archs):
        if done:
            print(f"[demo] {time_left(done, len(args.archs), time.time() - systems_started)}", flush=True)
        t0 = time.time()
        print(f"[demo] training {system} for {args.epochs} epochs and decoding the test set "
              f"(beam{'s' if len(args.beams) > 1 else ''} {beams})", flush=True)
        checkpoint = train(args.workdir, data, system, args)
        trained = time.time() - t0
        decoded = [(system, checkpoint)]
        if args.words:
            remembered = remember_words(data, checkpoint, args.threads)
            if remembered is not None:
                decoded.append((system + WORDS, remembered))
        for name, path in decoded:
            for beam in args.beams:
                t1 = time.time()
                hypotheses = translate(args.workdir, data, name, path, args.threads, beam)
                bleu = sacrebleu.corpus_bleu(hypotheses, [references], tokenize="none", force=True)
                rows.append({"system": name, "beam": beam, "bleu": bleu.score, "traits": trait_accuracy(hypotheses, traits),
                             "seconds": round(trained + time.time() - t1, 1)})
                print(f"[demo] {name}{f', beam {beam}' if several else ''}: BLEU {bleu.score:.2f}, speaker words "
                      f"right {100 * rows[-1]['traits']['all']:.1f}% ({rows[-1]['seconds']} s)", flush=True)

    table = format_table(rows + oracle_rows(ceilings(os.path.join(args.workdir, "raw"))), beams=several)
    with open(os.path.join(args.workdir, "results.md"), "w", encoding="utf-8") as f:
        f.write(table + "\n")
    with open(os.path.join(args.workdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=2)
    print()
    shared = f"style ({args.styles} styles, deviation {args.deviation})" if args.styles else "profession"
    bayes = (" 'Bayes' knows the styles but not the speaker's: it takes the most probable word given the speaker's "
             "training sentences, the best any learner of them can do in expectation." if args.styles else "")
    print(f"Test set: {args.test} sentences of {args.speakers} speakers; BLEU is sacrebleu on the "
          f"tokenized text; 'speaker words' is the share of gender / address / {shared} words that "
          f"match the speaker; seconds: training and decoding{' with that beam' if several else ''} on "
          f"{args.threads} thread{'s' if args.threads > 1 else ''}. The oracles get every "
          f"speaker word right that training makes knowable: any word of a trait the speaker's training "
          f"sentences show ('traits revealed'), or only the words the speaker said there ('words seen').{bayes}")
    print(table)
    if not args.no_report:
        write_report(args)
    print(f"\n(total {time.time() - started:.0f} s; logs, outputs and results.md in {args.workdir})")


def write_report(args) -> None:
    """The evaluation report over the demo's systems: significance, speaker classifier, what the biases learned."""
    from fairseq_speaker.analysis import report
    from fairseq_speaker.analysis.inspect_bias import has_something_to_inspect

    raw, out = os.path.join(args.workdir, "raw"), os.path.join(args.workdir, "report")
    names = {system: system_name(system) for system in args.archs}
    checkpoints = {system: os.path.join(args.workdir, "checkpoints", name, "checkpoint_best.pt")
                   for system, name in names.items()}
    inspected = [system for system in args.archs if has_something_to_inspect(checkpoints[system])]
    beam = DEFAULT_BEAM if DEFAULT_BEAM in args.beams else args.beams[-1]
    print(f"\n[demo] writing the evaluation report to {out}/report.md"
          + (f" (the beam-{beam} translations)" if args.beams != [DEFAULT_BEAM] else ""), flush=True)
    report.main([
        "--out", out, "--references", f"{raw}/test.fr", "--tokenize", "none",
        *[a for s in args.archs for a in ("--system", f"{names[s]}={output_path(args.workdir, s, beam)}")],
        "--train-text", f"{raw}/train.fr", "--train-speakers", f"{raw}/train.spk",
        "--test-speakers", f"{raw}/test.spk", "--classifier-epochs", str(args.classifier_epochs),
        *[a for s in inspected for a in ("--checkpoint", f"{names[s]}={checkpoints[s]}")],
        "--data", os.path.join(args.workdir, "bin"),
    ])


if __name__ == "__main__":
    main()
