"""How many L-BFGS iterations and evaluations a trained model's onboarding fit takes, on the output layer's stand-in
and on the exact loss: the counts that ``python -m fairseq_speaker.benchmarks.adaptation --iterations 4
--stand-in-iterations 14`` times at the paper's sizes (docs/onboarding.md, "How fast").

The toy corpus has a small vocabulary, where the stand-in has nothing to save. Here the target dictionary is padded
to ``--vocab`` words that no sentence has (as most of a real vocabulary is absent from any one context), so that the
trained model's output has a real vocabulary's tail: label smoothing leaves about 9% of the probability on the words
outside the 2,048 the stand-in keeps exactly. Steps: the styles corpus with held-out speakers
(docs/speaker_learning.md), ``fairseq-preprocess`` with the padded dictionary, ``fairseq-train transformer_speaker``
at the demo's sizes and options for ``--epochs`` epochs, then ``--speakers`` held-out speakers each onboarded from
their first ``--sentences`` sentences, with the stand-in and without (``SpeakerTranslator.add_speaker``).

    .venv/bin/python scripts/stand_in_counts.py --workdir counts          # about 10 minutes on 2 cores
    .venv/bin/python scripts/stand_in_counts.py --workdir counts --arch lstm_speaker --paper-sizes --epochs 2
"""

import argparse
import collections
import os
import shutil
import statistics
import sys
import time

import torch

from fairseq_speaker import commands
from fairseq_speaker.commands import family
from fairseq_speaker.commands import run_fairseq as fairseq
from fairseq_speaker.models import FAMILY_REGISTRY
from fairseq_speaker.onboarding.fit import FitOptions
from fairseq_speaker.runtime import start_threads
from fairseq_speaker.toy import corpus
from fairseq_speaker.toy.demo import family_args


def padded_dictionary(path: str, out: str, vocab: int) -> None:
    """``path``'s fairseq dictionary with words ``zzpad0``, ``zzpad1``, ... appended up to ``vocab`` entries with
    fairseq's four special symbols."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines + [f"zzpad{i} 1" for i in range(max(0, vocab - 4 - len(lines)))]) + "\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--vocab", type=int, default=40000, help="target dictionary size after padding")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--speakers", type=int, default=100, help="held-out speakers onboarded")
    parser.add_argument("--sentences", type=int, default=10, help="sentences per onboarded speaker")
    parser.add_argument("--arch", default="transformer_speaker", help="the preset trained (default: %(default)s)")
    parser.add_argument("--paper-sizes", action="store_true",
                        help="train the preset at its own (the paper's) sizes, not the demo's: the fits are then timed "
                        "at the sizes of the adaptation benchmark")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    start_threads(args.threads)
    raw, first, data = (os.path.join(args.workdir, d) for d in ("raw", "bin-unpadded", "bin"))
    name = args.arch + ("-paper" if args.paper_sizes else "")
    checkpoint = os.path.join(args.workdir, "checkpoints", name, "checkpoint_best.pt")
    if not os.path.exists(os.path.join(data, "train.spk")):
        corpus.main(["--out", raw, "--styles", "6", "--deviation", "0.1", "--speakers", "400",
                     "--sentences-per-speaker", "30", "--valid", "800", "--test", "800", "--heldout",
                     "--heldout-speakers", "200", "--heldout-sentences", "60"])
        splits = ["--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid", "--testpref", f"{raw}/test"]
        for folder in (first, data):
            shutil.rmtree(folder, ignore_errors=True)
        fairseq("preprocess", ["--source-lang", "en", "--target-lang", "fr", *splits, "--destdir", first,
                               "--workers", str(args.threads)], os.path.join(args.workdir, "preprocess.log"),
                args.threads)
        padded_dictionary(os.path.join(first, "dict.fr.txt"), os.path.join(args.workdir, "dict.fr.txt"), args.vocab)
        fairseq("preprocess", ["--source-lang", "en", "--target-lang", "fr", *splits, "--destdir", data,
                               "--srcdict", os.path.join(first, "dict.en.txt"),
                               "--tgtdict", os.path.join(args.workdir, "dict.fr.txt"), "--workers", str(args.threads)],
                os.path.join(args.workdir, "preprocess.log"), args.threads)
        for split in ("train", "valid", "test"):
            shutil.copy(os.path.join(raw, f"{split}.spk"), data)
    if not os.path.exists(checkpoint):
        declared = FAMILY_REGISTRY[family(args.arch)]
        sizes = [*declared.tie_output, *declared.demo_options] if args.paper_sizes else family_args(family(args.arch))
        fairseq("train", commands.train_args(
            data, os.path.dirname(checkpoint), commands.system_args(args.arch), *sizes, "--lr", str(declared.demo_lr),
            "--max-tokens", "1000", "--max-epoch", str(args.epochs), "--seed", "1", "--no-epoch-checkpoints",
            "--no-progress-bar", "--log-interval", "50"), os.path.join(args.workdir, f"train.{name}.log"),
            args.threads)

    from fairseq_speaker.serving import SpeakerTranslator

    translator = SpeakerTranslator.from_pretrained(checkpoint, data=data)
    print(f"target vocabulary: {len(translator.task.target_dictionary):,} words")
    lines = {ext: open(os.path.join(raw, f"heldout.{ext}"), encoding="utf-8").read().splitlines()
             for ext in ("en", "fr", "spk")}
    by_speaker = collections.defaultdict(list)
    for i, speaker in enumerate(lines["spk"]):
        by_speaker[speaker].append(i)
    names = list(by_speaker)[:args.speakers]
    ways = {"exact loss throughout": FitOptions(shortlist=0), "stand-in first": FitOptions()}
    reports, seconds = {way: [] for way in ways}, {way: [] for way in ways}
    for speaker in names:  # the two ways taking turns, so that the machine's noise hits both alike
        ids = by_speaker[speaker][:args.sentences]
        for way, options in ways.items():
            translator.adapter.options = options
            start = time.perf_counter()
            reports[way].append(translator.add_speaker(f"{speaker}-{way[:5]}", [lines["en"][i] for i in ids],
                                                       [lines["fr"][i] for i in ids]))
            seconds[way].append(time.perf_counter() - start)
    median = lambda values: statistics.median(list(values))  # noqa: E731
    for way, done in reports.items():
        print(f"{way}: {len(done)} speakers from {args.sentences} sentences, medians: "
              f"{median(r.stand_in_iterations for r in done):g} iterations ({median(r.stand_in_evaluations for r in done):g} "
              f"evaluations) on the stand-in, {median(r.iterations - r.stand_in_iterations for r in done):g} iterations "
              f"({median(r.evaluations - r.stand_in_evaluations for r in done):g} evaluations) on the exact loss, "
              f"{median(seconds[way]):.3f} s per speaker (add_speaker); "
              f"per-token loss after {statistics.mean(r.loss_after for r in done):.6f} (mean)")
    ratios = [a / b for a, b in zip(seconds["stand-in first"], seconds["exact loss throughout"])]
    print(f"stand-in first / exact loss throughout, the same speaker: {median(ratios):.2f}x (median)")


if __name__ == "__main__":
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    sys.exit(main())
