"""What the speakers' words cost as speakers are added: a benchmark of the memory alone (no network).

Makes a memory of S speakers (``--speakers``, one or more sizes) over a vocabulary of V words, each speaker of
``--words`` draws from a Zipf law (about 30 distinct ids at the defaults, as a speaker of 30 sentences), and times,
with the median and spread over repeats:

- ``full build``: the index of every speaker's words built from nothing (loading a checkpoint; what every change
  cost in 0.6.0);
- ``bias row after a change``: one speaker's words set (an onboarding or an update), then another speaker's bias row
  (what the next decoding of that speaker pays);
- ``most like``: the speakers most like a new speaker's words (where onboarding starts their fit).

Usage::

    python -m fairseq_speaker.benchmarks.words --speakers 100000 1000000 --threads 1
"""

import argparse
import statistics
import time
from typing import Dict, List

import numpy as np

from fairseq_speaker.modules.speaker_words import SpeakerWords
from fairseq_speaker.runtime import add_runtime_arguments, check_threads, configure_output, parse_seed, start_threads


def memory(speakers: int, vocab: int, draws: int, seed: int) -> SpeakerWords:
    """``speakers`` rows of distinct Zipf-drawn word ids (rank 1.3, folded into ``vocab``)."""
    rng = np.random.default_rng(seed)
    words = SpeakerWords(vocab)
    words.resize(speakers)
    for row in range(speakers):
        words.words[row] = np.unique(rng.zipf(1.3, size=draws) % vocab).astype(np.int64)
    words._reset()  # the rows were set directly, as a checkpoint's are read
    return words


def bench(speakers: int, args) -> Dict[str, List[float]]:
    words = memory(speakers, args.vocab, args.draws, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    out: Dict[str, List[float]] = {"full build": [], "bias row after a change": [], "most like": []}
    for _ in range(args.repeats):
        words._reset()
        start = time.perf_counter()
        words.index()
        out["full build"].append(time.perf_counter() - start)
    for _ in range(args.repeats):
        changed, read = rng.integers(speakers, size=2).tolist()
        words.set_words(changed, [rng.integers(args.vocab, size=args.draws)])
        start = time.perf_counter()
        words.bias_row(read)
        out["bias row after a change"].append(time.perf_counter() - start)
    for _ in range(args.repeats):
        ids = rng.integers(args.vocab, size=args.draws)
        start = time.perf_counter()
        words.most_like([ids], among=speakers)
        out["most like"].append(time.perf_counter() - start)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--speakers", type=int, nargs="+", default=[100000, 1000000])
    parser.add_argument("--vocab", type=int, default=40000, help="target vocabulary size")
    parser.add_argument("--draws", type=int, default=60, help="Zipf draws per speaker (their distinct ids are kept)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=parse_seed, default=1)
    add_runtime_arguments(parser)
    args = parser.parse_args(argv)
    configure_output(args.verbose)
    check_threads(parser, args)
    for name in ("vocab", "draws", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if min(args.speakers) < 2:
        parser.error(f"--speakers must be at least 2 each, got {min(args.speakers)}")
    args.threads = start_threads(args.threads).threads
    print(f"V = {args.vocab:,}, {args.draws} Zipf draws per speaker, {args.threads} thread(s); seconds, median "
          f"[min-max] of {args.repeats} repeats")
    print(f"  {'speakers':>10}  {'measure':<26}{'median':>10}{'spread':>22}")
    for speakers in args.speakers:
        for measure, seconds in bench(speakers, args).items():
            spread = f"[{min(seconds):.4f}-{max(seconds):.4f}]"
            print(f"  {speakers:>10,}  {measure:<26}{statistics.median(seconds):>10.4f}{spread:>22}")


if __name__ == "__main__":
    main()
