"""Systems against the Bayes limit on named structures of the corpus suite (``fairseq-speaker-toy-corpus
--list-structures``): for each structure, the corpus written and binarized once, each system trained as the demo trains
it and the test split decoded; with ``--words`` the system's speakers' words written with ``fairseq-speaker-words``'s
defaults (their settings chosen on the corpus's valid split) and the test split decoded with them too; with ``--shots``
the structure's held-out speakers onboarded from their first n sentences (``fairseq-speaker-onboarding-eval``); with
``--fit`` the training split decoded greedily beside the test split (how well a system fits its own training speakers'
choices; also for systems an earlier run trained). The figures of docs/speaker_learning.md ("The corpus suite", "The
speakers' words, chosen on held-out sentences").

    .venv/bin/python scripts/suite.py --workdir suite --structures judge-2 judge-5 --systems lstm_fact_bias --words
    .venv/bin/python scripts/suite.py --workdir design --structures base early --systems lstm_speaker lstm_fact_bias

Prints one table per structure (BLEU, speaker words, each trait, the Bayes limit) and, at the end, each system's gap
to the limit on every structure; writes ``WORKDIR/results.json``. A run keeps what it finished there: running again
with more structures or systems trains only what is missing. Run it alone on the machine: each system trains for
minutes on 2 cores.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from typing import Dict, List, Optional

import sacrebleu

from fairseq_speaker import commands
from fairseq_speaker.analysis.speaker_words import read_traits, trait_accuracy
from fairseq_speaker.data import read_lines
from fairseq_speaker.generate_output import read_generate_output
from fairseq_speaker.models import FAMILY_REGISTRY
from fairseq_speaker.toy import demo
from fairseq_speaker.toy.oracle import BAYES, oracle_rows

WORDS = demo.WORDS  # the suffix of a system decoded with its speakers' words


def prepare(workdir: str, structure: str, threads: int) -> str:
    """The structure's corpus in ``workdir/raw``, binarized in ``workdir/bin`` with its speaker files (kept when
    already there)."""
    raw, data = os.path.join(workdir, "raw"), os.path.join(workdir, "bin")
    if os.path.exists(os.path.join(data, "test.spk")):
        return data
    subprocess.run([sys.executable, "-m", "fairseq_speaker.toy.corpus", "--structure", structure, "--out", raw],
                   check=True, stdout=subprocess.DEVNULL)
    return demo.binarize(workdir, raw, threads)


def words(data: str, checkpoint: str, threads: int, extra: List[str]) -> str:
    """``fairseq-speaker-words`` with its defaults (and ``extra``), its output printed; the checkpoint written."""
    out = os.path.join(os.path.dirname(checkpoint), "words.pt")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    proc = subprocess.run([sys.executable, "-m", "fairseq_speaker.onboarding.words", data, "--path", checkpoint,
                           "--save", out, "--threads", str(threads), *extra], check=True, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print("\n".join(line for line in proc.stdout.splitlines() if "INFO" not in line), flush=True)
    return out


def new_speakers(workdir: str, data: str, name: str, checkpoint: str, shots: List[int], threads: int) -> List[Dict]:
    """``fairseq-speaker-onboarding-eval`` on the structure's held-out speakers: its rows (each n and its limit)."""
    out = os.path.join(workdir, f"onboarding.{name}")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    subprocess.run([sys.executable, "-m", "fairseq_speaker.onboarding.evaluate", data, "--path", checkpoint,
                    "--heldout-prefix", os.path.join(workdir, "raw", "heldout"), "--shots", *map(str, shots),
                    "--out", out, "--force", "--threads", str(threads)], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "onboarding.json"), encoding="utf-8") as f:
        found = json.load(f)
    limits = {r["n"]: r["traits"] for r in found.get("oracle") or []}
    return [{"n": r["n"], "bleu": r["bleu"], "traits": r["traits"], "limit": limits.get(r["n"])} for r in found["rows"]]


def score(workdir: str, data: str, name: str, checkpoint: str, threads: int, started: float) -> Dict:
    hypotheses = demo.translate(workdir, data, name, checkpoint, threads)
    references = read_lines(os.path.join(workdir, "raw", "test.fr"))
    traits = read_traits(os.path.join(workdir, "raw", "test.traits"))
    bleu = sacrebleu.corpus_bleu(hypotheses, [references], tokenize="none", force=True)
    return {"system": name, "bleu": bleu.score, "traits": trait_accuracy(hypotheses, traits),
            "seconds": round(time.time() - started, 1)}


def fit(workdir: str, data: str, name: str, checkpoint: str, threads: int) -> Dict[str, Dict[str, float]]:
    """Each trait's accuracy on the training split and on the test split, decoded greedily: whether the system fits its
    training speakers' choices, or learns them and does not carry them to new sentences."""
    found = {}
    for split in ("train", "test"):
        path = os.path.join(workdir, f"fit.{name}.{split}.txt")
        out = commands.run_fairseq("generate", commands.generate_args(
            data, checkpoint, "--beam", "1", "--batch-size", "128", "--gen-subset", split,
            "--speaker-file", os.path.join(workdir, "raw", f"{split}.spk")), path[:-len(".txt")] + ".log", threads)
        with open(path, "w", encoding="utf-8") as f:
            f.write(out)
        traits = read_traits(os.path.join(workdir, "raw", f"{split}.traits"))
        found[split] = trait_accuracy(read_generate_output(out, source=path), traits)
    return found


def checkpoint_of(workdir: str, system: str) -> str:
    return os.path.join(workdir, "checkpoints", demo.system_name(system), "checkpoint_best.pt")


def run_system(args, structure: str, system: str, data: str) -> Dict:
    """Train ``system`` on ``structure``, score it (and with its words, and its new speakers, as asked)."""
    workdir = os.path.join(args.workdir, structure)
    started = time.time()
    print(f"[suite] {structure}: training {system}", flush=True)
    checkpoint = demo.train(workdir, data, system, args, extra=args.train_options, progress=None)
    name = demo.system_name(system)
    cell: Dict = {"rows": [score(workdir, data, name, checkpoint, args.threads, started)]}
    if args.words:
        remembered = words(data, checkpoint, args.threads, args.words_args)
        cell["rows"].append(score(workdir, data, name + WORDS, remembered, args.threads, started))
    if args.shots:
        cell["new_speakers"] = {name: new_speakers(workdir, data, name, checkpoint, args.shots, args.threads)}
        if args.words:
            cell["new_speakers"][name + WORDS] = new_speakers(workdir, data, name + WORDS, remembered, args.shots,
                                                              args.threads)
    return cell


def gap_table(results: Dict, structures: List[str]) -> str:
    """How many points each system's speaker words and style words are under the Bayes limit (negative: above it,
    by chance), on every structure."""
    header = ["system", *[f"{s}: all / style" for s in structures]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    names = list(dict.fromkeys(r["system"] for s in structures for cell in results[s]["systems"].values()
                               for r in cell["rows"]))
    for name in names:
        cells = [name]
        for structure in structures:
            found = results.get(structure, {})
            row = next((r for cell in found.get("systems", {}).values() for r in cell["rows"] if r["system"] == name),
                       None)
            limit = found.get("limit")
            if row is None or not limit:
                cells.append("-")
                continue
            gap = [100 * (limit[t] - row["traits"][t]) for t in ("all", "style") if t in limit and t in row["traits"]]
            cells.append(" / ".join(f"{g:.1f}" for g in gap))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--structures", nargs="+", required=True, help="names of the suite's structures")
    parser.add_argument("--systems", "--system", nargs="+", default=["lstm_fact_bias"],
                        help="systems as the demo names them (lstm_speaker, transformer_base:fact+input, "
                        "lstm_fact_bias+spk_token, ...)")
    parser.add_argument("--words", action="store_true",
                        help="also write each system's speakers' words (fairseq-speaker-words) and decode with them")
    parser.add_argument("--shots", nargs="*", type=int, default=[],
                        help="also onboard the held-out speakers from their first n sentences, for each n given")
    parser.add_argument("--fit", action="store_true",
                        help="also decode the training split greedily beside the test split (each system's fit of its "
                        "training speakers' choices)")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--lr", type=float, default=None, help="default: the family's demo learning rate")
    parser.add_argument("--train-options", default="", help="more fairseq-train options, one string (they win)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--words-args", nargs=argparse.REMAINDER, default=[],
                        help="more options of fairseq-speaker-words (last on the line)")
    args = parser.parse_args(argv)
    args.lr = {name: args.lr or f.demo_lr for name, f in FAMILY_REGISTRY.items()}
    args.train_options = shlex.split(args.train_options)
    results_path = os.path.join(args.workdir, "results.json")
    os.makedirs(args.workdir, exist_ok=True)
    results: Dict = {}
    if os.path.exists(results_path):
        with open(results_path, encoding="utf-8") as f:
            results = json.load(f)
    for structure in args.structures:
        workdir = os.path.join(args.workdir, structure)
        os.makedirs(workdir, exist_ok=True)
        print(f"[suite] {structure}: the corpus", flush=True)
        data = prepare(workdir, structure, args.threads)
        found = results.setdefault(structure, {"systems": {}})
        found["limit"] = demo.ceilings(os.path.join(workdir, "raw"))[BAYES]
        for system in args.systems:
            cell = found["systems"].get(system)
            if not (cell and (not args.words or len(cell["rows"]) > 1) and (not args.shots or "new_speakers" in cell)):
                cell = found["systems"][system] = run_system(args, structure, system, data)
            if args.fit and "fit" not in cell:
                cell["fit"] = fit(workdir, data, demo.system_name(system), checkpoint_of(workdir, system), args.threads)
            with open(results_path, "w", encoding="utf-8") as f:
                json.dump(results, f, indent=2)
        rows = [r for s in args.systems for r in found["systems"][s]["rows"]]
        print(f"\n{structure}:")
        print(demo.format_table(rows + oracle_rows({BAYES: found["limit"]})), flush=True)
        for system in args.systems:
            fitted = found["systems"][system].get("fit")
            if fitted:
                print(f"\n{structure}, {demo.system_name(system)} decoded greedily, training split / test split:")
                for trait in fitted["train"]:
                    print(f"  {trait}: {100 * fitted['train'][trait]:.1f}% / "
                          f"{100 * fitted['test'].get(trait, float('nan')):.1f}%")
            for name, onboarded in found["systems"][system].get("new_speakers", {}).items():
                print(f"\n{structure}, new speakers, {name} (speaker words / style words; the limit's):")
                for r in onboarded:
                    limit = r["limit"] or {}
                    print(f"  n = {r['n']}: {100 * r['traits']['all']:.1f}% / {100 * r['traits'].get('style', 0):.1f}%"
                          f"  (limit {100 * limit.get('all', float('nan')):.1f}% / "
                          f"{100 * limit.get('style', float('nan')):.1f}%)")
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    print("\nPoints under the Bayes limit (speaker words / style words):")
    print(gap_table(results, args.structures))


if __name__ == "__main__":
    main()
