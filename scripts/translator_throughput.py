"""Throughput of SpeakerTranslator (sentences/s) with 1, 2, 8, ... client threads on mixed speakers.

Each client thread sends requests of --batch sentences, every sentence with its own speaker (the model's
speakers in turn, and one it does not know): what a service's worker pool does. Every translation is
checked against the same sentence translated alone, one call at a time, before anything is timed: a figure
is printed only for answers that are right.

    OMP_NUM_THREADS=1 python scripts/translator_throughput.py --checkpoint CKPT --data DATA_DIR \\
        --sources raw/test.en --threads 1 2 8

Prints one line per thread count: requests, sentences, seconds, sentences/s. It is a figure, not a test.
"""

import argparse
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import List, Tuple


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a speaker model's checkpoint")
    parser.add_argument("--data", required=True, help="the data folder it was trained on (its dict.*.txt)")
    parser.add_argument("--sources", required=True, help="source sentences, one a line, in the model's form")
    parser.add_argument("--sentences", type=int, default=256, help="sentences translated per thread count")
    parser.add_argument("--batch", type=int, default=1, help="sentences per request (call of translate)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 8], help="client thread counts")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-len-b", type=int, default=20)
    parser.add_argument("--torch-threads", type=int, default=1, help="torch's own threads (default: 1)")
    return parser


def requests(sources: List[str], speakers: List[str], total: int, batch: int) -> List[Tuple[List[str], List[str]]]:
    """``total`` sentences in requests of ``batch``, the speakers mixed within and across requests."""
    pairs = [(sources[i % len(sources)], speakers[i % len(speakers)]) for i in range(total)]
    return [([s for s, _ in pairs[i:i + batch]], [p for _, p in pairs[i:i + batch]]) for i in range(0, total, batch)]


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("sentences", "batch", "beam", "torch_threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if min(args.threads) < 1:
        parser.error("--threads must be at least 1")
    import logging

    import torch

    logging.basicConfig(level=logging.ERROR, force=True)  # not a warning per sentence of the unknown speaker
    torch.set_num_threads(args.torch_threads)
    from fairseq_speaker.data import read_lines
    from fairseq_speaker.errors import UserError
    from fairseq_speaker.serving import SpeakerTranslator

    try:  # a checkpoint, data folder or file it cannot read: one line, as the package's commands say it
        translator = SpeakerTranslator.from_pretrained(args.checkpoint, data=args.data, max_len_b=args.max_len_b)
        sources = [line for line in read_lines(args.sources) if line.strip()]
    except UserError as e:
        parser.error(str(e))
    if not sources:
        parser.error(f"--sources {args.sources}: no sentence to translate")
    speakers = translator.speakers + ["a-speaker-the-model-does-not-know"]
    work = requests(sources, speakers, args.sentences, args.batch)

    expected = {}  # (sentence, speaker) -> its translation alone
    for batch, labels in work:
        for sentence, speaker in zip(batch, labels):
            if (sentence, speaker) not in expected:
                expected[(sentence, speaker)] = translator.translate(sentence, speakers=speaker, beam=args.beam)
    print(f"{os.path.basename(args.checkpoint)}: {len(translator.speakers)} speakers (+1 unknown), "
          f"{args.sentences} sentences in requests of {args.batch}, beam {args.beam}, torch threads "
          f"{torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"{'threads':>8}{'requests':>10}{'sentences':>11}{'seconds':>10}{'sentences/s':>13}")
    lock = threading.Lock()
    for threads in args.threads:
        wrong = []

        def call(request):
            batch, labels = request
            out = translator.translate(batch, speakers=labels, beam=args.beam)
            bad = [(s, p) for s, p, o in zip(batch, labels, out) if expected[(s, p)] != o]
            if bad:
                with lock:
                    wrong.extend(bad)

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(call, work))
        seconds = time.perf_counter() - start
        if wrong:
            sys.exit(f"{threads} threads: {len(wrong)} sentence(s) translated otherwise than alone, e.g. {wrong[0]}")
        print(f"{threads:>8}{len(work):>10}{args.sentences:>11}{seconds:>10.2f}{args.sentences / seconds:>13.1f}")


if __name__ == "__main__":
    main()
