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
beside ours) and ``OUT/results.json``. The models keep the preprocessing that
prepare.py recorded (``DATA/bin/preprocessing.json``): the command printed
last translates raw text with one of them (docs/sated.md, "Raw text in, raw
text out"). ``--toy`` runs the same pipeline with
tiny dimensions and one epoch a stage (unless ``--max-epoch`` says otherwise),
to try the pipeline: on SATED's size it still reads the whole corpus each epoch
(docs/sated.md gives the measured time).

``OUT/recipe.json`` records the settings of the run and what it finished. Run
again with the same settings, the recipe resumes: finished stages and scores
are kept, an interrupted stage goes on from its last checkpoint. A folder used
with other settings (another family, ``--toy`` or not, other data, ...) is
refused, with what differs: give another ``--out`` or delete the folder.

Usage::

    python examples/sated/recipe.py --data data/en-fr --pair en-fr --out runs/en-fr --gpu 0
    python examples/sated/recipe.py --data data/en-fr --pair en-fr --out runs/en-fr-transformer --family transformer
"""

import argparse
import hashlib
import json
import os
import sys
from typing import Dict, List

from sacrebleu.metrics import BLEU

from fairseq_speaker import USER_DIR, commands
from fairseq_speaker.atomic_write import write_json, write_text
from fairseq_speaker.commands import run_fairseq
from fairseq_speaker.data import read_lines
from fairseq_speaker.data.preprocessing import PREPROCESSING_FILE
from fairseq_speaker.errors import UserError
from fairseq_speaker.generate_output import read_generate_output
from fairseq_speaker.models import FAMILY_REGISTRY, PAPER_SYSTEMS, get_family, paper_system_args

#: Table 3 of Michel & Neubig (2018): test BLEU
PAPER_BLEU = {
    "en-fr": {"base": 38.05, "spk_token": 38.85, "full_bias": 38.54, "fact_bias": 39.01},
    "en-es": {"base": 39.89, "spk_token": 40.04, "full_bias": 40.30, "fact_bias": 39.88},
    "en-de": {"base": 26.46, "spk_token": 26.52, "full_bias": 27.20, "fact_bias": 26.94},
}
#: how the recipe trains each family it knows: the options of the first (or only) training stage (the
#: paper's Adam stage for its LSTM; the usual iwslt_de_en settings for the Transformer); --toy adds the
#: family's own "toy" sizes (fairseq_speaker.models.families)
FIRST_STAGE = {
    "lstm": ["--optimizer", "adam", "--lr", "0.001", "--clip-norm", "1.0", "--batch-size", "32",
             "--required-batch-size-multiple", "1", "--lr-scheduler", "restart_from_best", "--lr-shrink", "0.5"],
    "transformer": ["--encoder-ffn-embed-dim", "1024", "--decoder-ffn-embed-dim", "1024",
                    "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--dropout", "0.3",
                    "--share-decoder-input-output-embed",
                    "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "5e-4", "--clip-norm", "0.0",
                    "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4000", "--max-tokens", "4096"],
}
#: the families the authors' second stage (plain SGD from the best Adam model) follows, as in the paper
SGD_TUNING = {"lstm"}
#: the --family choices: a registered family the recipe has a first stage for
FAMILIES = [name for name in FAMILY_REGISTRY if name in FIRST_STAGE]


#: the record of a run in its output folder: its settings, the stages it finished, the systems it scored
RUN_FILE = "recipe.json"


class RecipeError(UserError):
    """A run that cannot go on as asked; the message says what to do."""


def data_fingerprint(bin_dir: str) -> str:
    """sha256 of the binarized text, the dictionaries and the speaker files of ``bin_dir`` (not of
    ``dict.spk.txt``, which training writes there)."""
    if not os.path.isdir(bin_dir):
        raise RecipeError(f"{bin_dir} not found: --data must be an output folder of prepare.py")
    digest = hashlib.sha256()
    for name in sorted(os.listdir(bin_dir)):
        if name.endswith((".bin", ".idx", ".spk")) or (name.startswith("dict.") and name != "dict.spk.txt"):
            digest.update(name.encode("utf-8") + b"\0")
            with open(os.path.join(bin_dir, name), "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


def run_settings(args) -> Dict:
    """What a run's checkpoints depend on: a folder's run is resumed only under the same settings
    (the systems to run and the device may change)."""
    return {"data": data_fingerprint(os.path.join(args.data, "bin")), "pair": args.pair, "family": args.family,
            "toy": args.toy, "max_epoch": args.max_epoch, "sgd_lr": args.sgd_lr, "seed": args.seed, "fp16": args.fp16}


def _shown(value) -> str:
    if value is None:
        return "not given"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _difference(key: str, before, now) -> str:
    if key == "data":
        return "other data, the files of --data's bin/ differ"
    return f"--{key.replace('_', '-')} {_shown(before)} then, {_shown(now)} now"


def open_run(out: str, settings: Dict) -> Dict:
    """The record of the run in ``out``: a new one in a new or empty folder, the earlier one if it has the same
    settings. Any other folder is refused: its checkpoints would be resumed with other settings."""
    path = os.path.join(out, RUN_FILE)
    fix = f"give another --out (with run.sh, another WORK_DIR) or delete {out} to start again"
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                run = json.load(f)
            before = run["settings"]
            if not (isinstance(before, dict) and isinstance(run["finished"], list)
                    and isinstance(run["results"], dict)):
                raise ValueError("unexpected content")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise RecipeError(f"{path} is not a readable record of a run ({type(e).__name__}: {e}); {fix}") from None
        changed = [_difference(key, before.get(key), value) for key, value in settings.items()
                   if before.get(key) != value]
        if changed:
            raise RecipeError(f"{out} holds a run with other settings ({'; '.join(changed)}): its checkpoints "
                              f"cannot go on with these; {fix}")
        print(f"resuming the run in {out} (same settings; finished stages are kept)", flush=True)
        return run
    if os.path.isdir(out) and os.listdir(out):
        raise RecipeError(f"{out} is not empty but has no {RUN_FILE}, the record of a run's settings: its checkpoints, "
                          f"if any, may be of other settings; {fix}")
    os.makedirs(out, exist_ok=True)
    run = {"settings": settings, "finished": [], "results": {}}
    write_json(path, run)
    return run


def stage(data: str, system: str, save_dir: str, args, run: Dict, label: str, options: List[str],
          restore: List[str], start_again: bool = False) -> bool:
    """Train one stage into ``save_dir`` unless an earlier run of the same settings finished it (then return
    False). An interrupted stage resumes from its last checkpoint instead of ``restore`` (options naming a
    checkpoint to start from), unless ``start_again`` (the stage it starts from was trained again)."""
    key = os.path.relpath(save_dir, args.out)
    if start_again and key in run["finished"]:
        run["finished"].remove(key)
    if key in run["finished"] and os.path.exists(os.path.join(save_dir, "checkpoint_best.pt")):
        print(f"[{system}] {label}: finished by an earlier run, kept", flush=True)
        return False
    if not start_again and os.path.exists(os.path.join(save_dir, "checkpoint_last.pt")):
        print(f"[{system}] {label}: resuming from {save_dir}/checkpoint_last.pt", flush=True)
        restore = []
    else:
        print(f"[{system}] {label}", flush=True)
    common = commands.train_args(
        data, save_dir, paper_system_args(system, args.family), *options,
        "--patience", "3", "--no-epoch-checkpoints", "--seed", str(args.seed),
        "--log-format", "simple", "--log-interval", "100", *restore,
    )
    if args.fp16:
        common.append("--fp16")
    if args.toy:
        common += get_family(args.family).scale_args("toy") + ["--speaker-rank", "3"]
    max_epoch = args.max_epoch or (1 if args.toy else None)
    if max_epoch:
        common += ["--max-epoch", str(max_epoch)]
    run_fairseq("train", common, f"{save_dir}.log", env=args.env)
    if key not in run["finished"]:
        run["finished"].append(key)
    write_json(os.path.join(args.out, RUN_FILE), run)
    return True


def best_checkpoint(system: str, args) -> str:
    """The model a system ends with: its SGD stage's best, or its only stage's."""
    return os.path.join(args.out, system, "sgd" if args.family in SGD_TUNING else "adam", "checkpoint_best.pt")


def raw_text_command(system: str, args) -> str:
    """fairseq-interactive on raw text with ``system``'s model (it applies the preprocessing its data recorded)."""
    src, tgt = args.pair.split("-")
    return (f"fairseq-interactive {os.path.join(args.data, 'bin')} --user-dir {USER_DIR} --task speaker_translation "
            f"--path {best_checkpoint(system, args)} --source-lang {src} --target-lang {tgt} --beam 5 "
            f"--speaker SPEAKER")


def run_system(system: str, args, run: Dict) -> Dict:
    data, out = os.path.join(args.data, "bin"), os.path.join(args.out, system)
    first, sgd = os.path.join(out, "adam"), os.path.join(out, "sgd")
    trained = stage(data, system, first, args, run, "Adam", FIRST_STAGE[args.family], [])
    best = os.path.join(first, "checkpoint_best.pt")
    if args.family in SGD_TUNING:
        sgd_options = ["--optimizer", "sgd", "--lr", str(args.sgd_lr), "--clip-norm", "0.1", "--batch-size", "32",
                       "--required-batch-size-multiple", "1", "--lr-scheduler", "restart_from_best", "--lr-shrink",
                       "0.5"]
        restore = ["--restore-file", best, "--reset-optimizer", "--reset-lr-scheduler", "--reset-dataloader",
                   "--reset-meters"]
        trained |= stage(data, system, sgd, args, run, "SGD tuning from the best Adam model", sgd_options, restore,
                         start_again=trained)
    best = best_checkpoint(system, args)
    hyp_path = os.path.join(out, "test.hyp")
    if not trained and system in run["results"] and os.path.exists(hyp_path):
        row = run["results"][system]
        print(f"[{system}] test BLEU {row['bleu']:.2f} (scored by an earlier run)", flush=True)
        return row
    print(f"[{system}] decoding the test set (beam 5)", flush=True)
    output = run_fairseq("generate", commands.generate_args(
        data, best, "--gen-subset", "test", "--beam", "5", "--batch-size", "64", *(["--fp16"] if args.fp16 else []),
    ), os.path.join(out, "generate.log"), env=args.env)
    write_text(os.path.join(out, "test.generate"), output)
    hypotheses = read_generate_output(output, source=os.path.join(out, "test.generate"))
    write_text(hyp_path, "".join(h + "\n" for h in hypotheses))
    references = read_lines(os.path.join(args.data, "text", f"test.{args.pair.split('-')[1]}"))
    metric = BLEU(tokenize="none", force=True)
    bleu = metric.corpus_score(hypotheses, [references])
    print(f"[{system}] test BLEU {bleu.score:.2f}", flush=True)
    # sacrebleu's signature (nrefs:1|case:mixed|...|tok:none|...|version:...), which says how BLEU was computed
    row = {"system": system, "bleu": round(bleu.score, 2), "signature": str(metric.get_signature())}
    run["results"][system] = row
    write_json(os.path.join(args.out, RUN_FILE), run)
    return row


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
    parser.add_argument("--family", choices=FAMILIES, default="lstm",
                        help="the paper's LSTM (two stages, as the authors) or a Transformer (one stage)")
    parser.add_argument("--gpu", help="CUDA device(s) to use, e.g. 0 (sets CUDA_VISIBLE_DEVICES)")
    parser.add_argument("--cpu", action="store_true", help="train on the CPU even if a GPU is visible")
    parser.add_argument("--fp16", action="store_true", help="half-precision training and decoding (GPU)")
    parser.add_argument("--sgd-lr", type=float, default=1.0, help="learning rate of the SGD tuning pass")
    parser.add_argument("--max-epoch", type=int, help="cap the epochs of each stage (with --toy too)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--toy", action="store_true",
                        help="try the pipeline with tiny models: the family's sizes become 16-dim embeddings (LSTM: "
                        "16 units; Transformer: one layer a side, 2 heads, feed-forward 32) and --speaker-rank 3, "
                        "and each stage runs one epoch unless --max-epoch is given; the data, optimizers, schedules "
                        "and decoding are those of a real run")
    args = parser.parse_args(argv)
    args.env = {}
    if args.gpu is not None:
        args.env["CUDA_VISIBLE_DEVICES"] = args.gpu
    if args.cpu:
        args.env["CUDA_VISIBLE_DEVICES"] = ""

    try:
        run = open_run(args.out, run_settings(args))
    except RecipeError as e:
        sys.exit(f"recipe.py: error: {e}")
    recorded = os.path.exists(os.path.join(args.data, "bin", PREPROCESSING_FILE))
    if not recorded:
        print(f"note: {args.data}/bin has no {PREPROCESSING_FILE} (prepared before prepare.py recorded its "
              f"preprocessing, or with --preprocessing none): the models will read only text tokenized and lowercased "
              f"as the data; run prepare.py again to record it", flush=True)
    rows = [run_system(system, args, run) for system in args.systems]
    text = table(rows, args.pair)
    write_text(os.path.join(args.out, "results.md"), text + "\n")
    write_json(os.path.join(args.out, "results.json"),
               {"pair": args.pair, "family": args.family, "toy": args.toy, "systems": rows})
    print(text)
    if recorded:
        print(f"raw text in, raw text out (docs/sated.md): echo \"It's a good idea.\" | "
              f"{raw_text_command(args.systems[-1], args)}")


if __name__ == "__main__":
    main()
