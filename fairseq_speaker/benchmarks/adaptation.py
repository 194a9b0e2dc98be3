"""How fast a speaker is onboarded: a benchmark at the paper's sizes (V = 40,000).

Builds a randomly initialised model of the paper's sizes (``lstm_fact_bias`` / ``lstm_full_bias``,
or any preset; its weights do not change the cost) with S trained speakers, and times, after a
warm-up, with median and spread over repeats:

- one new speaker from 10 sentences (scoring them with the network, fitting, adding the row);
- 100 new speakers from 10 sentences each, at once;
- one incremental update: one more sentence for a speaker adapted before.

Model loading is not timed. Sentences are random word ids of ``--length`` words (the cost does not
depend on which words). A random model's fit stops after a few L-BFGS iterations, where a trained
model's takes more (``fact+hyper_lhuc`` on the styles corpus at n = 10: a median of 6 iterations, 7 evaluations of
the objective, in a model with its speakers' words; 7 and 7 without them; docs/onboarding.md, "How fast"):
``--iterations N`` makes every fit run N iterations, for figures a trained
model would give. A random network's objective is nearly flat in the speaker's parameters, where L-BFGS stops
whatever its budget, so with ``--iterations`` the speaker variant's own parameters are drawn at random too
(normal, standard deviation 0.3): the network's cost does not change, the fit then has a slope to follow. The
table gives the objective's evaluations per fit beside the times (the line search may take more than one
per iteration). Usage::

    python -m fairseq_speaker.benchmarks.adaptation --archs lstm_fact_bias lstm_full_bias --threads 2
    python -m fairseq_speaker.benchmarks.adaptation --archs lstm_base transformer_base \
        --speaker-bias fact+hyper_lhuc --iterations 6 --update-iterations 4 --many 10 --many-repeats 1 --threads 2
"""

import argparse
import json
import statistics
import tempfile
import time
from typing import Dict, List, Tuple

import torch

import fairseq_speaker  # noqa: F401  (registers the task and the models)
from fairseq_speaker.atomic_write import atomic_path, check_writable
from fairseq_speaker.benchmarks.synthetic import make_task
from fairseq_speaker.onboarding.adapter import SpeakerAdapter
from fairseq_speaker.onboarding.fit_options import FitOptions
from fairseq_speaker.runtime import (
    add_runtime_arguments,
    check_at_least,
    check_threads,
    configure_output,
    parse_seed,
    start_threads,
)


def make_model(task, arch: str, model_args: List[str]):
    from fairseq import options

    args = options.parse_args_and_arch(options.get_training_parser(), [
        "data-bin", "--task", "speaker_translation", "--arch", arch, *model_args])
    model = task.build_model(args)
    return model.eval()


def random_pairs(n: int, length: int, vocab: int, generator: torch.Generator):
    def sentence():
        return torch.cat([torch.randint(4, vocab, (length,), generator=generator), torch.tensor([2])])

    return [(sentence(), sentence()) for _ in range(n)]


def bench_arch(arch: str, args) -> Tuple[Dict[str, List[float]], Dict[str, List[float]]]:
    """The seconds of each measure's repeats, and the objective's evaluations per fit (median over the speakers
    fitted) of each."""
    g = torch.Generator().manual_seed(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        task = make_task(folder, args.vocab, args.speakers)
        model = make_model(task, arch, args.model_args)
    if args.iterations:  # a slope for the fit to follow (see the module's documentation)
        with torch.no_grad():
            for parameter in model.speaker_bias.parameters():
                parameter.normal_(0.0, 0.3, generator=g)
    # --iterations N: no early stop (no tolerance on the loss's change nor on the gradient), N iterations
    def forced(iterations: int) -> FitOptions:
        return (FitOptions(max_iter=iterations, tolerance=0.0, decoder_tolerance=0.0, gradient_tolerance=0.0)
                if iterations
                else FitOptions())

    options, update_options = forced(args.iterations), forced(args.update_iterations)
    adapter = SpeakerAdapter(model, task, options)
    counter = iter(range(10 ** 9))
    name = lambda: f"new{next(counter)}"  # noqa: E731

    # warm-up: every code path once
    warm = name()
    adapter.adapt({warm: random_pairs(args.sentences, args.length, args.vocab, g)})
    adapter.update(warm, random_pairs(1, args.length, args.vocab, g))
    times: Dict[str, List[float]] = {"one speaker": [], f"{args.many} speakers": [], "incremental update": []}
    evaluations: Dict[str, List[float]] = {measure: [] for measure in times}

    def update(speaker: str, pairs) -> Dict:
        """An incremental update, its fit run as ``--update-iterations`` says."""
        saved, adapter.options = adapter.options, update_options
        try:
            return {speaker: adapter.update(speaker, pairs)}
        finally:
            adapter.options = saved

    def run(measure: str, fn) -> None:
        start = time.perf_counter()
        reports = fn()
        times[measure].append(time.perf_counter() - start)
        evaluations[measure].append(statistics.median(r.evaluations for r in reports.values()))

    for _ in range(args.repeats):  # interleaved, so that machine noise hits every measure alike
        one = name()
        pairs = random_pairs(args.sentences, args.length, args.vocab, g)
        run("one speaker", lambda: adapter.adapt({one: pairs}))
        extra = random_pairs(1, args.length, args.vocab, g)
        run("incremental update", lambda: update(one, extra))
        if len(times[f"{args.many} speakers"]) < args.many_repeats:
            many = {name(): random_pairs(args.sentences, args.length, args.vocab, g) for _ in range(args.many)}
            run(f"{args.many} speakers", lambda: adapter.adapt(many))
    return times, evaluations


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", nargs="+", default=["lstm_fact_bias", "lstm_full_bias"])
    parser.add_argument("--vocab", type=int, default=40000, help="source and target vocabulary sizes")
    parser.add_argument("--speakers", type=int, default=1887, help="speakers the model was trained with")
    parser.add_argument("--sentences", type=int, default=10, help="sentences per new speaker")
    parser.add_argument("--length", type=int, default=20, help="words per sentence (plus </s>)")
    parser.add_argument("--many", type=int, default=100, help="speakers added at once")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--many-repeats", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=0,
                        help="every fit runs this many L-BFGS iterations (a random model's fit stops after a few; "
                        "a trained model's takes about 6 with its speakers' words, 7 without); default: the fit's own "
                        "stopping rule")
    parser.add_argument("--update-iterations", type=int, default=None, metavar="N",
                        help="the same for the incremental update's fit (a trained model's takes fewer: a median of 4 "
                        "evaluations of the objective for fact+hyper_lhuc on the styles corpus); default: --iterations")
    parser.add_argument("--seed", type=parse_seed, default=1)
    parser.add_argument("--json", help="also write the figures here")
    add_runtime_arguments(parser)
    args, model_args = parser.parse_known_args(argv)
    args.model_args = model_args
    configure_output(args.verbose)
    check_threads(parser, args)
    if args.json:  # before the measuring, not after
        check_writable(args.json)
    if args.update_iterations is None:
        args.update_iterations = args.iterations
    for name in ("iterations", "update_iterations"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be 0 (the fit's own stopping rule) or more, "
                         f"got {getattr(args, name)}")
    check_at_least(parser, args, ["repeats", "many_repeats"])
    args.threads = start_threads(args.threads).threads
    results = {}
    fits = f"{args.iterations} L-BFGS iterations per fit" if args.iterations else "fits stopped by their own rule"
    if args.update_iterations != args.iterations:
        fits += (f" ({args.update_iterations} for an update)" if args.update_iterations
                 else " (an update's stopped by its own rule)")
    variant = " ".join(args.model_args) or "the presets' variants"
    print(f"V = {args.vocab:,}, {args.speakers:,} trained speakers, {args.sentences} sentences of {args.length} words "
          f"per new speaker, {fits}, {variant}, {args.threads} thread(s); "
          f"seconds, median [min-max] of the repeats")
    print(f"  {'arch':<20}{'measure':<22}{'median':>10}{'spread':>22}{'evaluations per fit':>22}")
    evaluation_counts = {}
    for arch in args.archs:
        times, evaluations = bench_arch(arch, args)
        results[arch], evaluation_counts[arch] = times, evaluations
        for measure, values in times.items():
            spread = f"[{min(values):.3f}-{max(values):.3f}]"
            print(f"  {arch:<20}{measure:<22}{statistics.median(values):>10.3f}{spread:>22}"
                  f"{statistics.median(evaluations[measure]):>22g}")
    if args.json:
        with atomic_path(args.json) as tmp, open(tmp, "w", encoding="utf-8") as f:
            json.dump({"args": {k: v for k, v in vars(args).items() if k != "json"}, "seconds": results,
                       "evaluations": evaluation_counts}, f, indent=1)


if __name__ == "__main__":
    main()
