"""From nothing to a results table: toy corpus, fairseq-preprocess, fairseq-train, fairseq-generate.

Generates the synthetic corpus of :mod:`fairseq_speaker.toy.corpus` (speaker
traits the source never shows), trains a speaker-agnostic ``lstm_base`` and a
``lstm_fact_bias`` with the stock fairseq command lines, decodes the test set
with beam 5 and prints BLEU (sacrebleu) and the share of speaker-dependent
words each system got right; then writes the evaluation report
(``fairseq-speaker-report``) to ``WORKDIR/report``. Small enough for a few
minutes on 2 CPU cores.

Usage::

    fairseq-speaker-demo --workdir demo-work
    fairseq-speaker-demo --archs lstm_base lstm_full_bias lstm_fact_bias --epochs 20
"""

import argparse
import json
import os
import shutil
import time
from typing import Dict, List

import sacrebleu

from fairseq_speaker.commands import USER_DIR
from fairseq_speaker.commands import run_fairseq as fairseq
from fairseq_speaker.data import read_lines
from fairseq_speaker.generate_output import read_generate_output
from fairseq_speaker.toy.corpus import read_traits, trait_accuracy, write_corpus

TRAITS = ("gender", "address", "profession")


def prepare(workdir: str, sizes: Dict[str, int], speakers: int, threads: int) -> str:
    raw, data = os.path.join(workdir, "raw"), os.path.join(workdir, "bin")
    write_corpus(raw, sizes, num_speakers=speakers)
    if os.path.isdir(data):
        shutil.rmtree(data)
    fairseq("preprocess", [
        "--source-lang", "en", "--target-lang", "fr",
        "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid", "--testpref", f"{raw}/test",
        "--destdir", data, "--workers", str(threads),
    ], os.path.join(workdir, "preprocess.log"), threads)
    for split in sizes:
        shutil.copy(os.path.join(raw, f"{split}.spk"), data)
    return data


def train_and_translate(workdir: str, data: str, arch: str, args) -> List[str]:
    save_dir = os.path.join(workdir, "checkpoints", arch)
    if os.path.isdir(save_dir):
        shutil.rmtree(save_dir)
    fairseq("train", [
        data, "--user-dir", USER_DIR, "--task", "speaker_translation", "--arch", arch,
        "--encoder-embed-dim", "64", "--decoder-embed-dim", "64",
        "--encoder-hidden-size", "64", "--decoder-hidden-size", "128", "--attention-dim", "64",
        "--dropout", "0.1",
        "--criterion", "speaker_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--optimizer", "adam", "--lr", str(args.lr), "--clip-norm", "1.0",
        "--max-tokens", "1000", "--max-epoch", str(args.epochs), "--seed", str(args.seed),
        "--save-dir", save_dir, "--no-epoch-checkpoints", "--no-progress-bar", "--log-interval", "50",
    ], os.path.join(workdir, f"train.{arch}.log"), args.threads)
    out = fairseq("generate", [
        data, "--user-dir", USER_DIR, "--task", "speaker_translation",
        "--path", os.path.join(save_dir, "checkpoint_best.pt"),
        "--beam", "5", "--batch-size", "64", "--gen-subset", "test",
        "--speaker-file", os.path.join(workdir, "raw", "test.spk"),
    ], os.path.join(workdir, f"generate.{arch}.log"), args.threads)
    path = os.path.join(workdir, f"generate.{arch}.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(out)
    return read_generate_output(out, source=path)


def format_table(rows: List[Dict]) -> str:
    header = ["system", "BLEU", "speaker words", *TRAITS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [r["system"], f"{r['bleu']:.2f}", f"{100 * r['traits']['all']:.1f}%"]
        cells += [f"{100 * r['traits'].get(t, float('nan')):.1f}%" for t in TRAITS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default="demo-work", help="where data, checkpoints and logs go")
    parser.add_argument("--archs", nargs="+", default=["lstm_base", "lstm_fact_bias"],
                        help="systems to train (lstm_base, lstm_full_bias, lstm_fact_bias)")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--train", type=int, default=6000, help="training sentences")
    parser.add_argument("--test", type=int, default=400, help="validation and test sentences each")
    parser.add_argument("--speakers", type=int, default=24)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for training and decoding")
    parser.add_argument("--no-report", action="store_true",
                        help="skip the evaluation report (significance, speaker classifier, bias inspection)")
    parser.add_argument("--classifier-epochs", type=int, default=20, help="epochs of the report's speaker classifier")
    args = parser.parse_args(argv)

    os.makedirs(args.workdir, exist_ok=True)
    started = time.time()
    print(f"[demo] writing the toy corpus and binarizing it in {args.workdir}", flush=True)
    data = prepare(args.workdir, {"train": args.train, "valid": args.test, "test": args.test},
                   args.speakers, args.threads)
    references = read_lines(os.path.join(args.workdir, "raw", "test.fr"))
    traits = read_traits(os.path.join(args.workdir, "raw", "test.traits"))

    rows = []
    for arch in args.archs:
        t0 = time.time()
        print(f"[demo] training {arch} for {args.epochs} epochs and decoding the test set (beam 5)", flush=True)
        hypotheses = train_and_translate(args.workdir, data, arch, args)
        bleu = sacrebleu.corpus_bleu(hypotheses, [references], tokenize="none", force=True)
        rows.append({"system": arch, "bleu": bleu.score, "traits": trait_accuracy(hypotheses, traits),
                     "seconds": round(time.time() - t0, 1)})
        print(f"[demo] {arch}: BLEU {bleu.score:.2f}, speaker words right "
              f"{100 * rows[-1]['traits']['all']:.1f}% ({rows[-1]['seconds']} s)", flush=True)

    table = format_table(rows)
    with open(os.path.join(args.workdir, "results.md"), "w", encoding="utf-8") as f:
        f.write(table + "\n")
    with open(os.path.join(args.workdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=2)
    print()
    print(f"Test set: {args.test} sentences of {args.speakers} speakers; BLEU is sacrebleu on the "
          f"tokenized text; 'speaker words' is the share of gender / address / profession words that "
          f"match the speaker.")
    print(table)
    if not args.no_report:
        write_report(args)
    print(f"\n(total {time.time() - started:.0f} s; logs, outputs and results.md in {args.workdir})")


def write_report(args) -> None:
    """The evaluation report over the demo's systems: significance, speaker classifier, what the biases learned."""
    from fairseq_speaker.analysis import report

    raw, out = os.path.join(args.workdir, "raw"), os.path.join(args.workdir, "report")
    biased = [arch for arch in args.archs if arch != "lstm_base"]
    print(f"\n[demo] writing the evaluation report to {out}/report.md", flush=True)
    report.main([
        "--out", out, "--references", f"{raw}/test.fr", "--tokenize", "none",
        *[a for arch in args.archs for a in ("--system", f"{arch}={args.workdir}/generate.{arch}.txt")],
        "--train-text", f"{raw}/train.fr", "--train-speakers", f"{raw}/train.spk",
        "--test-speakers", f"{raw}/test.spk", "--classifier-epochs", str(args.classifier_epochs),
        *[a for arch in biased
          for a in ("--checkpoint", f"{arch}={args.workdir}/checkpoints/{arch}/checkpoint_best.pt")],
        "--data", os.path.join(args.workdir, "bin"),
    ])


if __name__ == "__main__":
    main()
