"""The workers of ``fairseq-speaker-benchmark`` (:mod:`fairseq_speaker.benchmarks.training`): one configuration, or
several taking turns (``--paired``), measured in a process of its own (:func:`worker_main`, started by the command's
``--worker``) on a synthetic corpus made in memory. Training: timed updates of fairseq's own ``Trainer``, then the
FLOP of three more counted (:func:`train_worker`); generation: beam-5 sentences per second, with the speakers' words
for ``CONFIG@words`` (:func:`generate_worker`); the machine's matrix-product rate (:func:`peak_worker`). Each reports
its figures as one ``RESULT`` line of JSON. Its siblings: :mod:`~fairseq_speaker.benchmarks.training_configs` (the
configurations and their flags) and :mod:`~fairseq_speaker.benchmarks.training_tables` (the figures summarized).
"""

import json
import resource
import statistics
import tempfile
import time
from typing import Dict, List

import torch

from fairseq_speaker.benchmarks.training_configs import model_args, task_arch_criterion, words_of
from fairseq_speaker.user_dir import import_user_dir


def _fairseq_args(spec: Dict, data: str, generation: bool = False):
    from fairseq import options

    task, _, criterion = task_arch_criterion(spec["config"])
    argv = [data, *(["--user-dir", spec["user_dir"]] if spec.get("user_dir") else []),
            "--task", task, *model_args(spec["config"], spec["sizes"], spec["layers"]),
            "--source-lang", "src", "--target-lang", "tgt",
            "--seed", str(spec["seed"]), "--num-workers", "0", "--batch-size", str(spec["batch"]),
            "--required-batch-size-multiple", "1", *spec["extra"]]
    if not spec["gpu"]:
        argv.append("--cpu")
    argv += ["--fp16"] if spec["fp16"] else ["--bf16"] if spec["bf16"] else []
    if generation:  # fairseq-generate's flags (the model's come from the training parser, as from a checkpoint)
        length = str(spec["gen_len"])
        return options.parse_args_and_arch(options.get_generation_parser(), [
            data, *(["--user-dir", spec["user_dir"]] if spec.get("user_dir") else []),
            "--task", task, "--beam", "5", "--max-len-a", "0", "--max-len-b", length, "--min-len", length,
            "--batch-size", str(spec["gen_batch"])])
    argv += ["--criterion", criterion, "--optimizer", "adam", "--lr", "0.001", "--clip-norm", "1.0"]
    return options.parse_args_and_arch(options.get_training_parser(), argv)


def _setup(spec: Dict, folder: str, generation: bool = False):
    from fairseq import tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_speaker.benchmarks.synthetic import corpus, language_pair_dataset, write_dictionaries
    from fairseq_speaker.data.speaker_dataset import SpeakerDataset

    write_dictionaries(folder, spec["vocab"], spec["speakers"])
    cfg = convert_namespace_to_omegaconf(_fairseq_args(spec, folder))
    args = _fairseq_args(spec, folder, generation=True) if generation else None
    task = tasks.setup_task(cfg.task)
    src, tgt, spk = corpus(spec["sentences"], spec["vocab"], spec["speakers"], spec["min_len"], spec["max_len"],
                           spec["seed"])
    dataset = language_pair_dataset(src, tgt, task.source_dictionary, task.target_dictionary)
    if task.__class__.__name__ == "SpeakerTranslationTask":
        dataset = SpeakerDataset(dataset, spk)
    task.datasets["train"] = dataset
    return args, cfg, task, dataset


def _batches(task, dataset, model, batch: int, seed: int):
    """Batches without end: a new shuffled epoch starts when one runs out, so that a small corpus serves
    any number of warm-up, timed and counted updates."""
    from fairseq import utils

    epochs = task.get_batch_iterator(
        dataset=dataset, max_sentences=batch, required_batch_size_multiple=1, seed=seed,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
        ignore_invalid_inputs=True,
    )
    while True:
        yield from epochs.next_epoch_itr(shuffle=True)


def _trainer(spec: Dict):
    """fairseq's ``Trainer`` for one configuration and its endless batches."""
    from fairseq.trainer import Trainer

    with tempfile.TemporaryDirectory() as folder:
        args, cfg, task, dataset = _setup(spec, folder)
        model = task.build_model(cfg.model)
        criterion = task.build_criterion(cfg.criterion)
        trainer = Trainer(cfg, task, model, criterion)
    return trainer, model, _batches(task, dataset, model, spec["batch"], spec["seed"])


def _timed_update(trainer, sample, spec: Dict) -> float:
    start = time.perf_counter()
    trainer.train_step([sample])
    if spec["gpu"]:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _training_figures(trainer, model, samples, tokens: int, times: List[float]) -> Dict:
    """Tokens per second of the timed updates, and the FLOP per token of three more, counted."""
    from torch.utils.flop_counter import FlopCounterMode

    from fairseq_speaker.modules.gemm import flop_formulas

    counted = 0
    with FlopCounterMode(display=False, custom_mapping=flop_formulas()) as counter:
        for _ in range(3):
            sample = next(samples)
            counted += int(sample["ntokens"])
            trainer.train_step([sample])
    return {
        "tokens_per_second": tokens / sum(times),
        "update_seconds": statistics.median(times),
        "flop_per_token": counter.get_total_flops() / counted,
        "parameters": sum(p.numel() for p in model.parameters()),
        "max_rss_bytes": _max_rss(),
    }


def train_worker(spec: Dict) -> Dict:
    trainer, model, samples = _trainer(spec)
    for _ in range(spec["warmup"]):
        trainer.train_step([next(samples)])
    tokens, times = 0, []
    for _ in range(spec["updates"]):
        sample = next(samples)
        tokens += int(sample["ntokens"])
        times.append(_timed_update(trainer, sample, spec))
    return _training_figures(trainer, model, samples, tokens, times)


def paired_train_worker(spec: Dict) -> Dict:
    """Every configuration of ``spec["members"]`` in this one process, taking turns update by update (the
    order rotating), on the same batches: their ratios are then free of the machine's drifts between
    processes."""
    runs = [_trainer(dict(spec, **member)) for member in spec["members"]]
    for trainer, _, samples in runs:
        for _ in range(spec["warmup"]):
            trainer.train_step([next(samples)])
    tokens = [0] * len(runs)
    times: List[List[float]] = [[] for _ in runs]
    for update in range(spec["updates"]):
        for i in rotated(len(runs), update):
            trainer, _, samples = runs[i]
            sample = next(samples)
            tokens[i] += int(sample["ntokens"])
            times[i].append(_timed_update(trainer, sample, spec))
    return {"members": [_training_figures(trainer, model, samples, tokens[i], times[i])
                        for i, (trainer, model, samples) in enumerate(runs)]}


def _generation(spec: Dict):
    """A function translating one batch (timed) with a model of one configuration and its generator, the
    batches, and the model's parameter count."""
    with tempfile.TemporaryDirectory() as folder:
        args, cfg, task, dataset = _setup(spec, folder, generation=True)
        model = task.build_model(cfg.model)
    device = "cuda" if spec["gpu"] else "cpu"
    model = model.to(device).eval()
    if spec["fp16"]:
        model.half()
    if words_of(spec["config"])[1]:
        _remember_words(model, task, dataset)
    generator = task.build_generator([model], args)

    def run(sample) -> float:
        sample = _to(sample, device)
        start = time.perf_counter()
        with torch.no_grad():
            task.inference_step(generator, [model], sample)
        if spec["gpu"]:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    parameters = sum(p.numel() for p in model.parameters())
    return run, _batches(task, dataset, model, spec["gen_batch"], spec["seed"]), parameters


def _remember_words(model, task, dataset) -> None:
    """Give ``model`` a memory of its speakers' words (as ``fairseq-speaker-words`` does): each speaker's, the
    distinct target words of their sentences in ``dataset``."""
    from fairseq_speaker.modules.speaker_words import attach, remembered

    said: Dict[int, List] = {}
    for i in range(len(dataset)):
        said.setdefault(int(dataset.speakers[i]), []).append(dataset[i]["target"])
    attach(model, remembered(task.target_dictionary, len(task.speaker_dictionary), said))


def generate_worker(spec: Dict) -> Dict:
    run, batches, parameters = _generation(spec)
    run(next(batches))  # warm-up
    sentences, elapsed = 0, 0.0
    while sentences < spec["gen_sentences"]:
        sample = next(batches)
        elapsed += run(sample)
        sentences += int(sample["nsentences"])
    return {"sentences_per_second": sentences / elapsed, "parameters": parameters, "max_rss_bytes": _max_rss()}


def paired_generate_worker(spec: Dict) -> Dict:
    """Generation as :func:`paired_train_worker` trains: the configurations in turns, batch by batch."""
    runs = [_generation(dict(spec, **member)) for member in spec["members"]]
    for run, batches, _ in runs:
        run(next(batches))  # warm-up
    sentences = [0] * len(runs)
    elapsed = [0.0] * len(runs)
    turn = 0
    while min(sentences) < spec["gen_sentences"]:
        for i in rotated(len(runs), turn):
            run, batches, _ = runs[i]
            sample = next(batches)
            elapsed[i] += run(sample)
            sentences[i] += int(sample["nsentences"])
        turn += 1
    return {"members": [{"sentences_per_second": n / t, "parameters": p, "max_rss_bytes": _max_rss()}
                        for n, t, (_, _, p) in zip(sentences, elapsed, runs)]}


def peak_worker(spec: Dict) -> Dict:
    """The machine's matrix-product rate: one n x n sgemm, median of 10."""
    n = 2048 if spec["gpu"] else 1024
    device = "cuda" if spec["gpu"] else "cpu"
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    times = []
    for _ in range(12):
        start = time.perf_counter()
        a @ b
        if spec["gpu"]:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return {"flop_per_second": 2 * n ** 3 / statistics.median(times[2:])}


def _to(sample, device: str):
    from fairseq import utils

    return utils.move_to_cuda(sample) if device == "cuda" else sample


def _max_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


WORKERS = {"train": train_worker, "generate": generate_worker, "peak": peak_worker,
           "paired_train": paired_train_worker, "paired_generate": paired_generate_worker}


def worker_main(spec_json: str) -> None:
    import fairseq_speaker  # noqa: F401  (registers the task, models, criterion)

    spec = json.loads(spec_json)
    import_user_dir(spec.get("user_dir"))
    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    result = WORKERS[spec["mode"]](spec)
    print("RESULT " + json.dumps(result), flush=True)


def rotated(count: int, round_index: int) -> List[int]:
    """The order of the configurations in a round: ``0..count-1`` started ``round_index`` places further on,
    so that no configuration always runs first (or right after the same one) when the machine's load or the
    previous process's leftovers favour a place in the round."""
    start = round_index % count if count else 0
    return list(range(start, count)) + list(range(start))
