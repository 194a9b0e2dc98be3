"""Speaker words and BLEU against the learning rate, where real data lives: many speakers, few sentences each.

The toy corpus (:mod:`fairseq_speaker.toy.corpus`) with ``--speakers`` speakers of ``--sentences`` training
sentences each (400 x 30 by default: a speaker is in about one batch of four, as on SATED), every system
trained as the demo trains it (its sizes and options per family), at each learning rate of ``--lrs`` and
each ``--speaker-lr-scale`` setting, then scored as the demo scores it (BLEU, speaker words per trait, and
the oracles). The figures of docs/speaker_learning.md come from::

    python scripts/lr_sweep.py --workdir sweep --jobs 2

``--jobs 2`` trains two systems at a time on one thread each. Finished cells are kept in
``WORKDIR/results.json``: running again with more learning rates or settings trains only what is missing.
"""

import argparse
import json
import os
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Dict, List

import sacrebleu

from fairseq_speaker.analysis.speaker_words import read_traits, trait_accuracy
from fairseq_speaker.data import read_lines
from fairseq_speaker.toy import demo
from fairseq_speaker.toy.oracle import BAYES, oracle_accuracy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # noqa: E402  (this folder's script: how a structure's corpus is written and binarized)

TRAITS = ("gender", "address", "profession", "style", "topic")


def cell_name(family: str, lr: float, scale: str) -> str:
    return f"{family}-lr{lr:g}-scale{scale}"


def run_cell(args, data: str, family: str, lr: float, scale: str, references, traits) -> Dict:
    name = cell_name(family, lr, scale)
    workdir = os.path.join(args.workdir, name)
    os.makedirs(workdir, exist_ok=True)
    raw = os.path.join(workdir, "raw")
    if not os.path.exists(raw):
        os.symlink(os.path.abspath(os.path.join(args.workdir, "raw")), raw)
    options = SimpleNamespace(lr={family: lr}, epochs=args.epochs[family], seed=args.seed, threads=args.threads)
    started = time.time()
    extra = [*args.family_options.get(family, []), "--speaker-lr-scale", scale]
    hypotheses = demo.train_and_translate(workdir, data, f"{family}_fact_bias", options, extra=extra, progress=None)
    bleu = sacrebleu.corpus_bleu(hypotheses, [references], tokenize="none", force=True).score
    row = {"family": family, "lr": lr, "speaker_lr_scale": scale, "bleu": bleu,
           "traits": trait_accuracy(hypotheses, traits), "seconds": round(time.time() - started, 1)}
    print(f"[sweep] {name}: BLEU {bleu:.2f}, speaker words {100 * row['traits']['all']:.1f}% "
          f"({row['seconds']:.0f} s)", flush=True)
    return row


def format_table(rows: List[Dict], oracle: Dict[str, float], oracle_name: str = "traits revealed") -> str:
    traits = [t for t in TRAITS if any(t in r["traits"] for r in rows)]  # the corpus's (profession or style, topic)
    header = ["family", "lr", "--speaker-lr-scale", "speaker words", *traits, "BLEU"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in sorted(rows, key=lambda r: (r["family"], r["speaker_lr_scale"], r["lr"])):
        cells = [r["family"], f"{r['lr']:g}", r["speaker_lr_scale"], f"{100 * r['traits']['all']:.1f}%"]
        cells += [f"{100 * r['traits'].get(t, float('nan')):.1f}%" for t in traits]
        cells.append(f"{r['bleu']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    cells = [f"oracle: {oracle_name}", "-", "-", f"{100 * oracle['all']:.1f}%"]
    cells += [f"{100 * oracle.get(t, float('nan')):.1f}%" for t in traits] + ["-"]
    lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_epochs(values: List[str]) -> Dict[str, int]:
    epochs = {"lstm": 30, "transformer": 40}
    for value in values:
        family, _, n = value.partition("=")
        if not n.isdigit():
            raise SystemExit(f"--epochs {value!r}: write FAMILY=N, e.g. transformer=40")
        epochs[family] = int(n)
    return epochs


def parse_family_options(values: List[str]) -> Dict[str, List[str]]:
    options = {}
    for value in values:
        family, sep, flags = value.partition("=")
        if not sep:
            raise SystemExit(f"--family-options {value!r}: write FAMILY='--flag value ...'")
        options[family] = shlex.split(flags)
    return options


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default="sweep")
    parser.add_argument("--families", nargs="+", default=["lstm", "transformer"])
    parser.add_argument("--lrs", nargs="+", type=float, default=[5e-4, 1e-3, 2e-3, 3e-3])
    parser.add_argument("--speaker-lr-scale", nargs="+", default=["1", "auto"], dest="scales",
                        help="settings of --speaker-lr-scale to train each learning rate with (1: as before 0.5.0)")
    parser.add_argument("--speakers", type=int, default=400)
    parser.add_argument("--sentences", type=int, default=30, help="training sentences per speaker")
    parser.add_argument("--test", type=int, default=400, help="validation and test sentences each")
    parser.add_argument("--epochs", nargs="*", default=[], metavar="FAMILY=N",
                        help="epochs per family (default lstm=30 transformer=40)")
    parser.add_argument("--family-options", nargs="*", default=["transformer=--warmup-updates 500"],
                        metavar="FAMILY=OPTIONS", help="fairseq-train options added to the demo's for a family (default: "
                        "the Transformer warms up over 500 updates, the regime of the measurement in the docs)")
    parser.add_argument("--styles", type=int, default=0, metavar="K",
                        help="the styles corpus: K styles of translating ambiguous phrases instead of professions "
                        "(default: 0, the default corpus)")
    parser.add_argument("--deviation", type=float, default=0.1,
                        help="with --styles: the share of phrases on which a speaker leaves their style")
    parser.add_argument("--structure", metavar="NAME",
                        help="a structure of the corpus suite (fairseq-speaker-toy-corpus --list-structures) instead "
                        "of the toy corpus; --speakers, --sentences, --test, --styles and --deviation are then the "
                        "structure's")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="threads of each training run")
    parser.add_argument("--jobs", type=int, default=1, help="training runs at a time")
    args = parser.parse_args(argv)
    args.epochs = parse_epochs(args.epochs)
    args.family_options = parse_family_options(args.family_options)

    os.makedirs(args.workdir, exist_ok=True)
    data = os.path.join(args.workdir, "bin")
    if args.structure and not os.path.isdir(data):
        print(f"[sweep] the corpus suite's structure {args.structure} in {args.workdir}", flush=True)
        data = suite.prepare(args.workdir, args.structure, args.threads)
    elif not os.path.isdir(data):
        print(f"[sweep] {args.speakers} speakers x {args.sentences} training sentences in {args.workdir}", flush=True)
        sizes = {"train": args.speakers * args.sentences, "valid": args.test, "test": args.test}
        data = demo.prepare(args.workdir, sizes, args.speakers, args.threads, topics=0, styles=args.styles,
                            deviation=args.deviation)
    raw = os.path.join(args.workdir, "raw")
    references = read_lines(os.path.join(raw, "test.fr"))
    traits = read_traits(os.path.join(raw, "test.traits"))
    if args.structure:  # the structure's exact limit
        oracle = demo.ceilings(raw)[BAYES]
    else:
        oracle = oracle_accuracy(read_lines(os.path.join(raw, "train.spk")),
                                 read_traits(os.path.join(raw, "train.traits")),
                                 read_lines(os.path.join(raw, "test.spk")), traits)["traits revealed"]

    results_path = os.path.join(args.workdir, "results.json")
    rows = json.load(open(results_path, encoding="utf-8")) if os.path.exists(results_path) else []
    done = {cell_name(r["family"], r["lr"], r["speaker_lr_scale"]) for r in rows}
    cells = [(f, lr, s) for f in args.families for s in args.scales for lr in args.lrs
             if cell_name(f, lr, s) not in done]
    print(f"[sweep] {len(cells)} runs to train ({len(done)} done before), {args.jobs} at a time", flush=True)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_cell, args, data, f, lr, s, references, traits) for f, lr, s in cells]
        for future in futures:
            rows.append(future.result())
            with open(results_path, "w", encoding="utf-8") as f:
                json.dump(rows, f, indent=2)
    table = format_table(rows, oracle, "Bayes limit" if args.structure else "traits revealed")
    with open(os.path.join(args.workdir, "results.md"), "w", encoding="utf-8") as f:
        f.write(table + "\n")
    print(table)


if __name__ == "__main__":
    sys.exit(main())
