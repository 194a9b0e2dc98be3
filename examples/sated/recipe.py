#!/usr/bin/env python
"""Train and evaluate the paper's four systems on one prepared language pair (Table 3 of the paper).

For each of base, spk_token, full_bias and fact_bias (the presets of
``fairseq_speaker.models.presets.PAPER_SYSTEMS``), with the paper's LSTM
(``--family lstm``, the default):

1. Adam, lr 1e-3, gradient norm clipped at 1, 32 sentences a batch, label
   smoothing 0.1, the paper's regularizers (the model defaults); whenever the
   validation loss does not improve, training goes back to the best model with
   a fresh optimizer and half the learning rate (``--lr-scheduler
   restart_from_best``, the authors' protocol), and it stops after 3 epochs
   without improvement;
2. a tuning pass with plain SGD (lr 1.0, as in the authors' configuration, and
   the same schedule), gradient norm clipped at 0.1, starting from the best Adam
   model, again until 3 epochs bring no gain;
3. the test set is decoded with beam 5 and scored with sacrebleu on the
   tokenized, lowercased text (``--tokenize none``, like the paper's BLEU on
   SATED's tokenized references).

With ``--family transformer`` the same systems are Transformers of fairseq's
iwslt_de_en sizes, the output layer tied to the target embeddings as in the paper,
trained the usual way for them (Adam with betas 0.9/0.98,
lr 5e-4 after 4,000 warm-up updates then inverse square root, dropout 0.3,
4,096 tokens a batch, stopping after 3 epochs without gain), decoded and
scored the same way; there is no SGD pass.

Results go to ``OUT/results.md`` (the layout of Table 3, the paper's numbers
beside ours) and ``OUT/results.json``. ``--toy`` runs the same pipeline with
tiny dimensions and one epoch a stage, on the CPU, in seconds.

Usage::

    python examples/sated/recipe.py --data data/en-fr --pair en-fr --out runs/en-fr --gpu 0
    python examples/sated/recipe.py --data data/en-fr --pair en-fr --out runs/en-fr-transformer --family transformer
"""

import argparse
import json
import os
from typing import Dict, List

from sacrebleu.metrics import BLEU

from fairseq_speaker import commands
from fairseq_speaker.commands import run_fairseq
from fairseq_speaker.data import read_lines
from fairseq_speaker.generate_output import read_generate_output
from fairseq_speaker.models import PAPER_SYSTEMS, paper_system_args

#: Table 3 of Michel & Neubig (2018): test BLEU
PAPER_BLEU = {
    "en-fr": {"base": 38.05, "spk_token": 38.85, "full_bias": 38.54, "fact_bias": 39.01},
    "en-es": {"base": 39.89, "spk_token": 40.04, "full_bias": 40.30, "fact_bias": 39.88},
    "en-de": {"base": 26.46, "spk_token": 26.52, "full_bias": 27.20, "fact_bias": 26.94},
}
#: per family: tiny sizes for --toy, and the options of the first (or only) training stage
TOY = {family: commands.model_size_args(family, 16, 16 if family == "lstm" else 32)
       for family in ("lstm", "transformer")}
FIRST_STAGE = {
    "lstm": ["--optimizer", "adam", "--lr", "0.001", "--clip-norm", "1.0", "--batch-size", "32",
             "--required-batch-size-multiple", "1", "--lr-scheduler", "restart_from_best", "--lr-shrink", "0.5"],
    "transformer": ["--encoder-ffn-embed-dim", "1024", "--decoder-ffn-embed-dim", "1024",
                    "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--dropout", "0.3",
                    "--share-decoder-input-output-embed",
                    "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "5e-4", "--clip-norm", "0.0",
                    "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4000", "--max-tokens", "4096"],
}


def stage(data: str, system: str, save_dir: str, args, options: List[str], extra: List[str]) -> None:
    common = commands.train_args(
        data, save_dir, paper_system_args(system, args.family), *options,
        "--patience", "3", "--no-epoch-checkpoints", "--seed", str(args.seed),
        "--log-format", "simple", "--log-interval", "100", *extra,
    )
    if args.fp16:
        common.append("--fp16")
    if args.toy:
        common += TOY[args.family] + ["--speaker-rank", "3", "--max-epoch", "1"]
    elif args.max_epoch:
        common += ["--max-epoch", str(args.max_epoch)]
    run_fairseq("train", common, f"{save_dir}.log", env=args.env)


def run_system(system: str, args) -> Dict:
    data, out = os.path.join(args.data, "bin"), os.path.join(args.out, system)
    first, sgd = os.path.join(out, "adam"), os.path.join(out, "sgd")
    print(f"[{system}] Adam", flush=True)
    stage(data, system, first, args, FIRST_STAGE[args.family], [])
    best = os.path.join(first, "checkpoint_best.pt")
    if args.family == "lstm":
        print(f"[{system}] SGD tuning from the best Adam model", flush=True)
        stage(data, system, sgd, args, [
            "--optimizer", "sgd", "--lr", str(args.sgd_lr), "--clip-norm", "0.1", "--batch-size", "32",
            "--required-batch-size-multiple", "1", "--lr-scheduler", "restart_from_best", "--lr-shrink", "0.5",
        ], ["--restore-file", best, "--reset-optimizer", "--reset-lr-scheduler", "--reset-dataloader",
            "--reset-meters"])
        best = os.path.join(sgd, "checkpoint_best.pt")
    print(f"[{system}] decoding the test set (beam 5)", flush=True)
    output = run_fairseq("generate", commands.generate_args(
        data, best, "--gen-subset", "test", "--beam", "5", "--batch-size", "64", *(["--fp16"] if args.fp16 else []),
    ), os.path.join(out, "generate.log"), env=args.env)
    with open(os.path.join(out, "test.generate"), "w", encoding="utf-8") as f:
        f.write(output)
    hypotheses = read_generate_output(output, source=os.path.join(out, "test.generate"))
    with open(os.path.join(out, "test.hyp"), "w", encoding="utf-8") as f:
        f.writelines(h + "\n" for h in hypotheses)
    references = read_lines(os.path.join(args.data, "text", f"test.{args.pair.split('-')[1]}"))
    metric = BLEU(tokenize="none", force=True)
    bleu = metric.corpus_score(hypotheses, [references])
    print(f"[{system}] test BLEU {bleu.score:.2f}", flush=True)
    # sacrebleu's signature (nrefs:1|case:mixed|...|tok:none|...|version:...), which says how BLEU was computed
    return {"system": system, "bleu": round(bleu.score, 2), "signature": str(metric.get_signature())}


def table(rows: List[Dict], pair: str) -> str:
    paper = PAPER_BLEU.get(pair, {})
    lines = [f"| {pair} | BLEU (ours) | BLEU (paper, Table 3) |", "|---|---|---|"]
    for r in rows:
        reference = f"{paper[r['system']]:.2f}" if r["system"] in paper else "-"
        lines.append(f"| {r['system']} | {r['bleu']:.2f} | {reference} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="output folder of prepare.py (with bin/ and text/)")
    parser.add_argument("--pair", required=True, help="language pair, e.g. en-fr")
    parser.add_argument("--out", required=True, help="where checkpoints, outputs and the table go")
    parser.add_argument("--systems", nargs="+", default=list(PAPER_SYSTEMS), choices=list(PAPER_SYSTEMS))
    parser.add_argument("--family", choices=["lstm", "transformer"], default="lstm",
                        help="the paper's LSTM (two stages, as the authors) or a Transformer (one stage)")
    parser.add_argument("--gpu", help="CUDA device(s) to use, e.g. 0 (sets CUDA_VISIBLE_DEVICES)")
    parser.add_argument("--cpu", action="store_true", help="train on the CPU even if a GPU is visible")
    parser.add_argument("--fp16", action="store_true", help="half-precision training and decoding (GPU)")
    parser.add_argument("--sgd-lr", type=float, default=1.0, help="learning rate of the SGD tuning pass")
    parser.add_argument("--max-epoch", type=int, help="cap the epochs of each stage")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--toy", action="store_true", help="tiny dimensions, one epoch a stage (for tests)")
    args = parser.parse_args(argv)
    args.env = {}
    if args.gpu is not None:
        args.env["CUDA_VISIBLE_DEVICES"] = args.gpu
    if args.cpu:
        args.env["CUDA_VISIBLE_DEVICES"] = ""

    os.makedirs(args.out, exist_ok=True)
    rows = [run_system(system, args) for system in args.systems]
    text = table(rows, args.pair)
    with open(os.path.join(args.out, "results.md"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"pair": args.pair, "family": args.family, "toy": args.toy, "systems": rows}, f, indent=2)
    print(text)


if __name__ == "__main__":
    main()
