"""The recommended path, the network and then ``fairseq-speaker-words``, against the network alone on named structures
of the corpus suite (``fairseq-speaker-toy-corpus --list-structures``): for each structure, the corpus written and
binarized, one system trained as the demo trains it, its speakers' words written with the command's defaults (their
settings chosen on the corpus's valid split), and the test split decoded with and without them, beside the Bayes
limit. The figures of docs/speaker_learning.md ("The speakers' words, chosen on held-out sentences").

    .venv/bin/python scripts/words_suite.py --workdir suite --structures judge-2 judge-5 --system lstm_fact_bias

Prints one table per structure (BLEU, speaker words, each trait) and what fairseq-speaker-words chose; writes
``WORKDIR/results.json``. Run it alone on the machine: each structure trains a model (minutes on 2 cores).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List

import sacrebleu

from fairseq_speaker.analysis.speaker_words import read_traits, trait_accuracy
from fairseq_speaker.commands import run_fairseq
from fairseq_speaker.data import read_lines
from fairseq_speaker.models import FAMILY_REGISTRY
from fairseq_speaker.toy import demo
from fairseq_speaker.toy.oracle import oracle_rows


def prepare(workdir: str, structure: str, threads: int) -> str:
    """The structure's corpus in ``workdir/raw``, binarized in ``workdir/bin`` with its speaker files."""
    raw, data = os.path.join(workdir, "raw"), os.path.join(workdir, "bin")
    subprocess.run([sys.executable, "-m", "fairseq_speaker.toy.corpus", "--structure", structure, "--out", raw],
                   check=True, stdout=subprocess.DEVNULL)
    run_fairseq("preprocess", ["--source-lang", "en", "--target-lang", "fr", "--trainpref", f"{raw}/train",
                               "--validpref", f"{raw}/valid", "--testpref", f"{raw}/test", "--destdir", data,
                               "--workers", str(threads)], os.path.join(workdir, "preprocess.log"), threads)
    for split in ("train", "valid", "test"):
        with open(os.path.join(raw, f"{split}.spk"), encoding="utf-8") as f, \
                open(os.path.join(data, f"{split}.spk"), "w", encoding="utf-8") as out:
            out.write(f.read())
    return data


def words(data: str, checkpoint: str, threads: int, extra: List[str]) -> str:
    """``fairseq-speaker-words`` with its defaults (and ``extra``), its output printed; the checkpoint written."""
    out = os.path.join(os.path.dirname(checkpoint), "words.pt")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    proc = subprocess.run([sys.executable, "-m", "fairseq_speaker.onboarding.words", data, "--path", checkpoint,
                           "--save", out, "--threads", str(threads), *extra], check=True, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print("\n".join(line for line in proc.stdout.splitlines() if "INFO" not in line), flush=True)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--structures", nargs="+", required=True, help="names of the suite's structures")
    parser.add_argument("--system", default="lstm_fact_bias", help="a system as the demo names them")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--lr", type=float, default=None, help="default: the family's demo learning rate")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--words-args", nargs=argparse.REMAINDER, default=[],
                        help="more options of fairseq-speaker-words (last on the line)")
    args = parser.parse_args(argv)
    args.lr = {name: args.lr or f.demo_lr for name, f in FAMILY_REGISTRY.items()}
    results: Dict[str, List[Dict]] = {}
    for structure in args.structures:
        workdir = os.path.join(args.workdir, structure)
        os.makedirs(workdir, exist_ok=True)
        started = time.time()
        print(f"[suite] {structure}: writing and binarizing the corpus, training {args.system}", flush=True)
        data = prepare(workdir, structure, args.threads)
        checkpoint = demo.train(workdir, data, args.system, args)
        remembered = words(data, checkpoint, args.threads, args.words_args)
        references = read_lines(os.path.join(workdir, "raw", "test.fr"))
        traits = read_traits(os.path.join(workdir, "raw", "test.traits"))
        rows = []
        for name, path in ((args.system, checkpoint), (args.system + demo.WORDS, remembered)):
            hypotheses = demo.translate(workdir, data, name, path, args.threads)
            bleu = sacrebleu.corpus_bleu(hypotheses, [references], tokenize="none", force=True)
            rows.append({"system": name, "bleu": bleu.score, "traits": trait_accuracy(hypotheses, traits),
                         "seconds": round(time.time() - started, 1)})
        results[structure] = rows
        print(f"\n{structure}:")
        print(demo.format_table(rows + oracle_rows(demo.ceilings(os.path.join(workdir, "raw")))), flush=True)
    with open(os.path.join(args.workdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
