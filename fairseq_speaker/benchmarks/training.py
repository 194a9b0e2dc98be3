"""How fast speaker models train and translate: a benchmark anyone can rerun.

Every configuration runs in its own process (threads pinned, a warm-up, then timed
updates of fairseq's own ``Trainer``: forward, backward, gradient clipping, the
optimizer step), on a synthetic corpus made in memory: Zipfian word ids over a
``--vocab``-word vocabulary, source lengths uniform in [``--min-len``, ``--max-len``]
and target lengths within two words of them,
speakers drawn uniformly from a table of ``--speakers`` speakers. Runs are
interleaved in rounds, each round starting one configuration further on (A, B, C,
then B, C, A, then C, A, B, ...), so that machine noise and a place in the round hit
them alike; the table shows the median and the spread of ``--repeats`` runs, and
each configuration's ratios to stock fairseq and to the speaker-agnostic model of the
same network (``vs base``) as the median of the ratios within each round.

Measured:

- training: target tokens per second (words and </s>, padding excluded), the
  configuration's FLOP per target token (the matrix products of three more training
  steps, counted by ``torch.utils.flop_counter``), and the fraction of the machine's matrix-product rate
  it reaches (the rate of one large sgemm, measured in the same run with the same
  threads);
- generation (``--generate``): beam-5 sentences per second. A randomly initialised
  model would stop at random lengths, so every hypothesis is forced to
  ``--gen-len`` words (fairseq's ``--min-len`` = ``--max-len-b``): every model does the same work;
- peak resident memory of each process.

The references run beside ours: the stock fairseq model each family declares
(:mod:`fairseq_speaker.models.families`): ``stock_lstm``, fairseq's ``lstm``
(bidirectional encoder, input feeding, dot attention, output tied to the target
embeddings, the same sizes), and ``stock_transformer`` (``--family transformer``).
A family registered by another package is measured with its ``--user-dir``.

A configuration is a preset (``lstm_fact_bias``), a preset with another speaker variant
(``transformer_base:fact+hyper_lhuc``: ``--speaker-bias fact+hyper_lhuc``, the demo's ``ARCH:VARIANT``;
its ``vs base`` is the preset's network without speakers, ``transformer_base``), or ``stock_<family>``. A
configuration ending in ``@lr-scale=X`` trains its speaker rows with ``--speaker-lr-scale X``
(``lstm_fact_bias@lr-scale=1``, beside ``lstm_fact_bias`` at the default ``auto``). One ending in ``@words``
translates with a memory of its speakers' words (``fairseq-speaker-words``: each speaker's, the distinct target words
of their sentences of the synthetic corpus), which acts in generation only (``--no-train --generate``).

Usage::

    fairseq-speaker-benchmark                                   # the paper's sizes, one thread
    fairseq-speaker-benchmark --sizes 256 256 128 --generate
    fairseq-speaker-benchmark --paired --generate               # small ratios: one process, in turns
    fairseq-speaker-benchmark --configs lstm_fact_bias lstm_full_bias --speakers 1000 100000 1000000
    fairseq-speaker-benchmark --paired --generate --configs lstm_fact_bias lstm_base:fact+hyper_lhuc
    fairseq-speaker-benchmark --paired --configs lstm_fact_bias lstm_fact_bias@lr-scale=1 \
        --versus lstm_fact_bias@lr-scale=1
    fairseq-speaker-benchmark --paired --no-train --generate --configs lstm_fact_bias lstm_fact_bias@words \
        --versus lstm_fact_bias
    fairseq-speaker-benchmark --gpu --fp16                      # CUDA (bf16: --bf16)
    fairseq-speaker-benchmark --user-dir examples/lightconv_family/speaker_lightconv --family lightconv

The module is the command: its options and their checks, the runs to make and their rounds, each run a process of
its own (``--worker``). Its parts: :mod:`~fairseq_speaker.benchmarks.training_configs` (the configurations, their
checks and their fairseq-train flags), :mod:`~fairseq_speaker.benchmarks.training_workers` (what a worker process
measures) and :mod:`~fairseq_speaker.benchmarks.training_tables` (the figures summarized and the tables printed).
"""

import argparse
import json
import os
import subprocess
import sys
from typing import Dict, List, Optional

from fairseq_speaker.atomic_write import atomic_path, check_writable
from fairseq_speaker.benchmarks.training_configs import (
    STOCK,
    check_config,
    default_configs,
    memory_estimate,
    words_of,
)
from fairseq_speaker.benchmarks.training_tables import format_tables, label, summarize
from fairseq_speaker.benchmarks.training_workers import rotated, worker_main
from fairseq_speaker.command_registry import program_name
from fairseq_speaker.errors import UserError, command
from fairseq_speaker.models import FAMILY_REGISTRY
from fairseq_speaker.runtime import ThreadChoice, add_runtime_arguments, configure_output, options_given, parse_seed
from fairseq_speaker.user_dir import add_user_dir_argument, import_user_dir

PROG = program_name(__name__)
#: the command's help: the module's text but its last paragraph, which names the module's parts
HELP = __doc__.rsplit("\n\n", 1)[0] + "\n"


def run_spec(spec: Dict) -> Dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(spec["threads"]), MKL_NUM_THREADS=str(spec["threads"]))
    if spec.get("plain"):  # PyTorch's own products and tanh, fairseq's own loss
        env.update(FAIRSEQ_SPEAKER_PLAIN="1")
    proc = subprocess.run([sys.executable, "-m", "fairseq_speaker.benchmarks.training", "--worker", json.dumps(spec)],
                          capture_output=True, text=True, env=env)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
    return {"error": f"failed (exit {proc.returncode}): {tail}"}


def available_memory() -> Optional[int]:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def build_parser() -> argparse.ArgumentParser:
    """The options; ``--family`` lists the families registered when it is called (import a ``--user-dir`` first)."""
    parser = argparse.ArgumentParser(prog=PROG, description=HELP.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(HELP.split("\n\n")[1:]))
    parser.add_argument("--family", choices=list(FAMILY_REGISTRY), default=None,
                        help="the family whose presets and stock reference are measured where --configs is not given "
                        "(default: lstm)")
    parser.add_argument("--configs", nargs="+", metavar="CONFIG",
                        help="presets (lstm_fact_bias, ...), optionally with another speaker variant as ARCH:VARIANT "
                        "(transformer_base:fact+hyper_lhuc) and another --speaker-lr-scale as @lr-scale=X "
                        "(lstm_fact_bias@lr-scale=1), and stock_<family> (stock_lstm, stock_transformer): the "
                        "stock fairseq model a family declares (default: the family's presets and stock reference)")
    add_user_dir_argument(parser)
    parser.add_argument("--sizes", nargs=3, type=int, default=[512, 512, 256], metavar=("EMBED", "HIDDEN", "ATT"),
                        help="embedding, LSTM and attention sizes (the paper's 512 512 256); the Transformer (and a "
                        "family with feed-forward layers) takes EMBED as its model size and 4 x HIDDEN as its "
                        "feed-forward size, with 4 heads")
    parser.add_argument("--layers", type=int, default=3, help="Transformer layers (encoder and decoder)")
    parser.add_argument("--vocab", type=int, default=4600, help="source and target vocabulary sizes")
    parser.add_argument("--speakers", type=int, nargs="+", default=[400],
                        help="speaker table sizes; several give the time per update against the table size")
    parser.add_argument("--sentences", type=int, default=20000, help="synthetic corpus size")
    parser.add_argument("--min-len", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=40)
    parser.add_argument("--batch", type=int, default=32, help="sentences per batch")
    parser.add_argument("--warmup", type=int, default=3, help="untimed updates first")
    parser.add_argument("--updates", type=int, default=20, help="timed updates per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration (interleaved)")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads of each run, one run at a time (default: 1, the setting of the figures quoted)")
    add_runtime_arguments(parser, threads=False)
    parser.add_argument("--plain", action="store_true",
                        help="also run each of our configurations (as <config>:plain) with PyTorch's own matrix "
                        "products and tanh instead of oneDNN's and sigmoid's, and fairseq's own loss instead of the "
                        "fused one (FAIRSEQ_SPEAKER_PLAIN=1)")
    parser.add_argument("--paired", action="store_true",
                        help="run the configurations in one process per round, taking turns update by update "
                        "(and batch by batch in generation) on the same batches: ratios of a few percent "
                        "measured without the drifts between processes (max RSS is then the process's)")
    parser.add_argument("--versus", metavar="CONFIG",
                        help="also give each row's ratio to CONFIG, one of the configurations measured (e.g. "
                        "lstm_fact_bias beside lstm_base:fact+hyper_lhuc), at the same number of speakers, paired "
                        "within rounds as the other ratios")
    parser.add_argument("--generate", action="store_true", help="also time beam-5 generation")
    parser.add_argument("--no-train", action="store_true", help="time generation only")
    parser.add_argument("--gen-sentences", type=int, default=96, help="sentences translated per generation run")
    parser.add_argument("--gen-batch", type=int, default=32)
    parser.add_argument("--gen-len", type=int, default=20, help="words of every hypothesis")
    parser.add_argument("--gpu", action="store_true", help="run on CUDA")
    parser.add_argument("--fp16", action="store_true", help="fairseq's --fp16 (with --gpu)")
    parser.add_argument("--bf16", action="store_true", help="fairseq's --bf16")
    parser.add_argument("--seed", type=parse_seed, default=1)
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser


#: options that count something and their smallest sensible value
_AT_LEAST = {"layers": 1, "vocab": 8, "sentences": 1, "min_len": 1, "max_len": 1, "batch": 1, "warmup": 0,
             "updates": 1, "repeats": 1, "threads": 1, "gen_sentences": 1, "gen_batch": 1, "gen_len": 1}


def check_args(parser: argparse.ArgumentParser, args) -> None:
    """Refuse (``parser.error``: exit status 2) what would measure something else than asked, fail in a worker
    or never end, before any work is started."""
    for name, least in _AT_LEAST.items():
        if getattr(args, name) < least:
            parser.error(f"--{name.replace('_', '-')} must be at least {least}, got {getattr(args, name)}")
    if min(args.sizes) < 1:
        parser.error(f"--sizes must be positive, got {' '.join(map(str, args.sizes))}")
    if min(args.speakers) < 1:
        parser.error(f"--speakers must be at least 1, got {min(args.speakers)}")
    if args.max_len < args.min_len:
        parser.error(f"--max-len {args.max_len} is shorter than --min-len {args.min_len}")
    if args.batch > args.sentences:
        parser.error(f"--batch {args.batch} is more than the corpus's --sentences {args.sentences}")
    if (args.fp16 or args.bf16) and not args.gpu:
        parser.error(f"--{'fp16' if args.fp16 else 'bf16'} is timed on a GPU: add --gpu")
    if args.gpu:
        import torch

        if not torch.cuda.is_available():
            parser.error("--gpu: this machine has no CUDA device PyTorch can use")
    for config in args.configs or []:
        try:
            check_config(config)
        except (UserError, KeyError) as e:
            parser.error(str(e).strip("'\""))
    for option, values in (("--configs", args.configs or []), ("--speakers", args.speakers)):
        twice = sorted({str(v) for v in values if values.count(v) > 1})
        if twice:  # measured twice: two rows of one name and different figures, which no reader can tell apart
            parser.error(f"{option} names {', '.join(twice)} twice: give each once (--repeats times a configuration "
                         f"several times)")
    if args.configs and args.family is not None:
        parser.error(f"--family {args.family} chooses the configurations measured where --configs is not given, and "
                     f"--configs names each one's family: drop one of them")
    args.family = args.family or "lstm"
    generating = args.generate or args.no_train
    idle = options_given(parser, args, ("gen_sentences", "gen_batch", "gen_len"), values=True)
    if idle and not generating:
        parser.error(f"{' '.join(idle)}: {'sizes' if len(idle) > 1 else 'a size'} of the generation runs, and only "
                     f"training is timed: add --generate, or drop {'them' if len(idle) > 1 else 'it'}")
    remembering = [config for config in args.configs or [] if words_of(config)[1]]
    if remembering and not args.no_train:
        parser.error(f"--configs {remembering[0]}: the speakers' words act in generation only: time it with "
                     f"--no-train --generate")
    measured = args.configs or default_configs(args.family)
    if args.versus is not None and args.versus not in measured:
        parser.error(f"--versus {args.versus} is not one of the configurations measured ({', '.join(measured)}): "
                     f"add it to --configs")


def make_specs(args) -> List[Dict]:
    configs = args.configs or default_configs(args.family)
    base = {"vocab": args.vocab, "sizes": args.sizes, "layers": args.layers, "sentences": args.sentences,
            "min_len": args.min_len, "max_len": args.max_len, "batch": args.batch, "warmup": args.warmup,
            "updates": args.updates, "threads": args.threads, "gpu": args.gpu, "fp16": args.fp16, "bf16": args.bf16,
            "seed": args.seed, "gen_sentences": args.gen_sentences, "gen_batch": args.gen_batch,
            "gen_len": args.gen_len, "extra": [], "user_dir": args.user_dir}
    modes = ([] if args.no_train else ["train"]) + (["generate"] if args.generate or args.no_train else [])
    specs = []
    for mode in modes:
        for config in configs:
            for speakers in args.speakers:
                if config.startswith(STOCK) and speakers != args.speakers[0]:
                    continue  # no speakers: once is enough
                specs.append(dict(base, mode=mode, config=config, speakers=speakers))
                if args.plain and not config.startswith(STOCK):
                    specs.append(dict(base, mode=mode, config=config, speakers=speakers, plain=True))
    return specs


def run_paired_round(specs: List[Dict], skipped: Dict[int, str], results: List[List[Dict]], repeat: int,
                     repeats: int) -> None:
    """One round of ``--paired``: per mode, one process running all its configurations in turns. The models
    are built in an order that rotates from round to round too, so that no configuration always has the
    same place in the process's memory (at 256-256-128, fact trained at 0.96x of lstm_base built after it
    and at 1.05x built before it, in two fixed-order runs)."""
    for mode in dict.fromkeys(spec["mode"] for spec in specs):
        members = [i for i, spec in enumerate(specs) if spec["mode"] == mode and i not in skipped]
        if not members:
            continue
        members = [members[k] for k in rotated(len(members), repeat)]
        print(f"[{repeat + 1}/{repeats}] {mode} {', '.join(label(specs[i]) for i in members)} (paired)",
              file=sys.stderr, flush=True)
        paired = dict(specs[members[0]], mode="paired_" + mode,
                      members=[{"config": specs[i]["config"], "speakers": specs[i]["speakers"]} for i in members])
        outcome = run_spec(paired)
        figures = outcome.get("members") or [{"error": outcome.get("error", "no figures")}] * len(members)
        for i, figure in zip(members, figures):
            results[i].append(figure)


@command(named_errors=False)
def main(argv=None) -> None:
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--user-dir")
    early.add_argument("--worker")
    known, _ = early.parse_known_args(argv)
    if known.worker:
        worker_main(known.worker)
        return
    import_user_dir(known.user_dir)  # its families are --family choices
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_output(args.verbose)
    check_args(parser, args)
    if args.json:  # before minutes of measuring, not after
        check_writable(args.json)
    if not args.gpu:
        print(ThreadChoice(args.threads, "each run's; --threads N to change").line(), file=sys.stderr, flush=True)
    if args.paired and args.plain:
        parser.error("--paired runs every configuration in one process, and --plain needs a process of its own "
                     "(FAIRSEQ_SPEAKER_PLAIN=1): use one or the other")
    specs = make_specs(args)
    free = available_memory()
    skipped = {}
    for i, spec in enumerate(specs):
        need = memory_estimate(spec["config"], spec["vocab"], spec["speakers"], spec["sizes"], spec["layers"])
        if free is not None and need > 0.8 * free:
            skipped[i] = (f"skipped: its speaker table needs {need / 2 ** 30:.1f} GB in training "
                          f"(weights, gradient, two Adam moments), {free / 2 ** 30:.1f} GB are available")
    results: List[List[Dict]] = [[] for _ in specs]
    peak: List[float] = []
    base = specs[0] if specs else {}
    for repeat in range(args.repeats):  # interleaved, each round starting one configuration further on
        peak.append(run_spec(dict(base, mode="peak")).get("flop_per_second", float("nan")))
        if args.paired:
            run_paired_round(specs, skipped, results, repeat, args.repeats)
            continue
        for i in rotated(len(specs), repeat):
            spec = specs[i]
            if i in skipped:
                continue
            print(f"[{repeat + 1}/{args.repeats}] {spec['mode']} {label(spec)} ({spec['speakers']:,} speakers)",
                  file=sys.stderr, flush=True)
            results[i].append(run_spec(spec))
    for i, reason in skipped.items():
        results[i] = [{"error": reason}]
    rows = summarize(specs, results, peak, args)
    print(format_tables(rows, peak, args))
    if args.json:
        with atomic_path(args.json) as tmp, open(tmp, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "peak_flop_per_second": peak, "rows": rows}, f, indent=1)
    failed = [i for i, runs in enumerate(results) if i not in skipped and any("error" in r for r in runs)]
    if failed:
        sys.exit(f"{PROG}: {len(failed)} configuration(s) failed: "
                 + "; ".join(f"{label(specs[i])}: {next(r['error'] for r in results[i] if 'error' in r)[:300]}"
                             for i in failed[:3]))


if __name__ == "__main__":
    main()

