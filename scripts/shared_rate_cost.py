"""What the shared vectors' own rate costs a training update (docs/speaker_learning.md, "The shared vectors at
their rows' rate").

Two tiny ``transformer_fact_bias`` models (the tests' tiny sizes, 400 speakers, batches of 32 sentences of 10
words: a speaker is in about one update of 13) train side by side in one process under ``--speaker-lr-scale auto``,
update by update in turns on the same batches: one whose fact variant hands its shared bias vectors to the step hook
(the package's behaviour), one whose variant hands none (the rows alone at their rate, as before). Each update
(forward, backward, clipping, Adam step) is timed; the script prints the medians and the median of the paired
ratios::

    OMP_NUM_THREADS=1 python scripts/shared_rate_cost.py --updates 600
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from fairseq import utils as fairseq_utils
from fairseq.optim.adam import Adam as FairseqAdam

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fairseq_speaker.optim.speaker_rows import update_speaker_rows  # noqa: E402
from fairseq_speaker.optim.table_marks import LAST_SHARED_SCALE  # noqa: E402
from tests.helpers import make_model, make_task, random_batch  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=50, help="updates not counted at the start")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    task = make_task(num_speakers=400, num_words=124)
    runs = {}
    for name in ("rows alone", "with shared vectors"):
        torch.manual_seed(0)
        model = make_model("fact", task=task, family="transformer", speaker_lr_scale="auto").train()
        if name == "rows alone":
            model.speaker_bias.own_shared_parameters = lambda: []  # the step hook never sees B~
        optimizer = FairseqAdam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0)
        update_speaker_rows(optimizer)
        runs[name] = (model, optimizer, [])
    g = torch.Generator().manual_seed(0)
    for i in range(args.updates):
        src = random_batch(task.source_dictionary, [10] * 32, generator=g)
        tgt = random_batch(task.target_dictionary, [10] * 32, left_pad=False, generator=g)
        prev = torch.cat([tgt[:, -1:], tgt[:, :-1]], 1)
        speakers = torch.randint(0, 400, (32,), generator=g)
        for name in (list(runs) if i % 2 else list(runs)[::-1]):
            model, optimizer, times = runs[name]
            started = time.perf_counter()
            optimizer.zero_grad()
            logits = model(src, src.ne(1).sum(1), prev, speakers=speakers)[0]
            F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1)).backward()
            fairseq_utils.clip_grad_norm_(list(model.parameters()), 1.0)
            optimizer.step()
            times.append(time.perf_counter() - started)
    before, after = (runs[name][2][args.warmup:] for name in runs)
    shared = runs["with shared vectors"][0].speaker_bias.shared_biases
    print(f"{len(after)} updates each: median {1000 * statistics.median(before):.2f} ms (rows alone), "
          f"{1000 * statistics.median(after):.2f} ms (with the shared vectors, at "
          f"{getattr(shared, LAST_SHARED_SCALE):.1f}x the shared rate); median of the paired ratios "
          f"{statistics.median([a / b for a, b in zip(after, before)]):.3f}")


if __name__ == "__main__":
    main()
