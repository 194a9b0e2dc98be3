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
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

import torch
from fairseq.models import ARCH_MODEL_REGISTRY

from fairseq_speaker.analysis.meta_model import build_meta_model, model_options, sized_dictionary
from fairseq_speaker.atomic_write import atomic_path, check_writable
from fairseq_speaker.command_registry import program_name
from fairseq_speaker.data import SpeakerDictionary
from fairseq_speaker.errors import UserError, command
from fairseq_speaker.models import (
    FAMILY_REGISTRY,
    ModelFamily,
    ModelSizes,
    StockModel,
    family_of_arch,
    get_family,
)
from fairseq_speaker.models.presets import preset_name
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY, parse_variant_name
from fairseq_speaker.optim.lr_scale import parse_lr_scale
from fairseq_speaker.runtime import ThreadChoice, add_runtime_arguments, configure_output, options_given, parse_seed
from fairseq_speaker.user_dir import add_user_dir_argument, import_user_dir

PROG = program_name(__name__)
BYTES = 4  # float32
STOCK = "stock_"  # a configuration stock_<family> is the stock fairseq model the family declares


def default_configs(family: str) -> List[str]:
    """The family's presets, then its stock reference if it declares one."""
    declared = get_family(family)
    return declared.presets + ([STOCK + family] if declared.stock is not None else [])


#: what ends a configuration run at another learning-rate scale of its speaker rows: ``lstm_fact_bias@lr-scale=1``
LR_SCALE = "@lr-scale="


#: what ends a configuration translating with a memory of its speakers' words: ``lstm_fact_bias@words``
WORDS = "@words"


def words_of(config: str) -> Tuple[str, bool]:
    """``CONFIG@words`` -> the configuration and True; another -> itself and False."""
    return (config[:-len(WORDS)], True) if config.endswith(WORDS) else (config, False)


def lr_scale_of(config: str) -> Tuple[str, Optional[str]]:
    """``CONFIG@lr-scale=X`` (or ``CONFIG@lr-scale=X@words``) -> the configuration and ``X``
    (``--speaker-lr-scale``); None: the default."""
    config, found, scale = words_of(config)[0].partition(LR_SCALE)
    return config, (scale if found else None)


def split_config(config: str) -> Tuple[str, Optional[str]]:
    """``ARCH`` or ``ARCH:VARIANT`` (``transformer_base:fact+hyper_lhuc``), optionally ``@lr-scale=X`` -> the arch
    and the variant (None: the preset's own)."""
    arch, _, variant = lr_scale_of(config)[0].partition(":")
    return arch, variant or None


def _stock_model(config: str) -> Optional[StockModel]:
    """The stock model of the family ``config`` names (``stock_lstm``), None for one of our archs."""
    if not config.startswith(STOCK):
        return None
    declared = get_family(config[len(STOCK):])
    if declared.stock is None:
        raise UserError(f"--configs {config}: the {declared.name} family declares no stock fairseq model to measure")
    return declared.stock


def _our_family(config: str) -> ModelFamily:
    declared = family_of_arch(split_config(config)[0])
    if declared is None:
        raise UserError(f"--configs {config}: not an arch of a speaker model family; give a preset "
                        f"({', '.join(p for f in FAMILY_REGISTRY.values() for p in f.presets)}), optionally "
                        f"with :VARIANT (lstm_base:fact+hyper_lhuc), or stock_<family>")
    return declared


def check_config(config: str) -> None:
    """Refuse (:class:`UserError`) a configuration the workers could not build: an unknown arch or stock model,
    a variant on a stock model, an unknown variant, a variant acting on the decoder's state on a family whose
    decoder takes none, a variant its default options cannot build (``topic`` needs a topic model's file)."""
    if WORDS in config and not config.endswith(WORDS):
        bare = config.replace(WORDS, "")
        raise UserError(f"--configs {config}: {WORDS} comes last ({bare}{WORDS})")
    arch, variant = split_config(config)
    unscaled, scale = lr_scale_of(config)
    remembers = words_of(config)[1]
    if scale is not None:
        if arch.startswith(STOCK):
            raise UserError(f"--configs {config}: a stock fairseq model has no speaker rows to scale")
        try:
            parse_lr_scale(scale)
        except UserError as e:
            raise UserError(f"--configs {config}: {e}") from None
    if unscaled.endswith("+spk_token"):
        raise UserError(f"--configs {config}: the benchmark times speaker variants (ARCH:VARIANT), not the speaker "
                        f"token: drop +spk_token")
    if arch.startswith(STOCK) and remembers:
        raise UserError(f"--configs {config}: a stock fairseq model has no speakers whose words to remember")
    if arch.startswith(STOCK):
        if variant is not None:
            raise UserError(f"--configs {config}: a stock fairseq model has no speaker variant; give the variant "
                            f"to a preset ({get_family(arch[len(STOCK):]).presets[0]}:{variant})")
        _stock_model(arch)
        return
    declared = _our_family(config)
    if variant is None and not remembers:
        return
    try:
        parts = parse_variant_name(variant) if variant is not None else []
    except UserError as e:
        raise UserError(f"--configs {config}: {e}") from None
    on_state = [part for part in parts if SPEAKER_BIAS_REGISTRY[part].acts_on_state]
    if on_state and not declared.takes_speaker_state:
        raise UserError(f"--configs {config}: {'+'.join(on_state)} acts on the decoder's state, which the "
                        f"{declared.name} family's decoder does not take: use a variant on the logits (fact, ...)")
    flags = model_args(config, [8, 8, 8], 1)
    task = SimpleNamespace(source_dictionary=sized_dictionary(8), target_dictionary=sized_dictionary(8),
                           speaker_dictionary=SpeakerDictionary(["s"]))
    try:  # as a worker builds it, from the options alone (a variant that needs a file has none here)
        with torch.device("meta"):
            model = ARCH_MODEL_REGISTRY[arch].build_model(model_options(arch, flags[2:]), task)
    except UserError as e:
        raise UserError(f"--configs {config}: the benchmark gives a variant its default options, and {e}") from None
    bias = getattr(model, "speaker_bias", None)
    if remembers and (bias is None or not bias.speaker_parameters()):
        raise UserError(f"--configs {config}: the speakers' words are remembered for variants whose speakers have "
                        f"parameters; {arch} has none: give a variant ({arch}:fact@words) or another preset")


def size_args(config: str, sizes: List[int], layers: int) -> List[str]:
    """Model flags of the same sizes for our presets and fairseq's own archs: the embeddings, ``hidden`` for
    the LSTMs (both sides), the attention, and for the Transformer ``layers`` layers, 4 heads and feed-forward
    layers of 4 x ``hidden``; the output layer tied to the target embeddings."""
    embed, hidden, attention = sizes
    model_sizes = ModelSizes(embed, hidden, encoder_hidden=hidden, attention=attention, ffn=4 * hidden,
                             layers=layers, heads=4)
    stock = _stock_model(config)
    if stock is not None:
        return stock.size_args(model_sizes)
    declared = _our_family(config)
    return declared.size_args(model_sizes) + list(declared.tie_output)


def task_arch_criterion(config: str) -> Tuple[str, str, str]:
    stock = _stock_model(config)
    if stock is not None:
        return stock.task, stock.arch, stock.criterion
    return "speaker_translation", split_config(config)[0], "speaker_label_smoothed_cross_entropy"


def model_args(config: str, sizes: List[int], layers: int) -> List[str]:
    """fairseq-train's flags choosing ``config``'s model: its arch, its variant (``--speaker-bias``), its sizes."""
    _, arch, _ = task_arch_criterion(config)
    variant, scale = split_config(config)[1], lr_scale_of(config)[1]
    return ["--arch", arch, *(["--speaker-bias", variant] if variant else []),
            *(["--speaker-lr-scale", scale] if scale is not None else []), *size_args(config, sizes, layers)]


def memory_estimate(config: str, vocab: int, speakers: int, sizes: List[int], layers: int) -> int:
    """Bytes the speaker rows of ``config``'s variant need in training (weights, gradient, Adam's two moments):
    its parameters per speaker (from the variant contract, at its default options, attached to the decoder of
    the sizes measured: a state variant's rows are as wide as the decoder's layers) times the speakers."""
    if config.startswith(STOCK):
        return 0
    flags = model_args(config, sizes, layers)
    built = build_meta_model(vocab, vocab, 1, flags[1], flags[2:])  # one speaker, nothing allocated
    return 4 * BYTES * built.model.decoder.speaker_bias.parameters_per_speaker() * speakers


# -- the worker: one configuration in one process ------------------------------------------------
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


# -- the driver ------------------------------------------------------------------------------------
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
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
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


#: the end of a --plain run's name in the tables
PLAIN = ":plain"


def _label(spec: Dict) -> str:
    """The configuration's name in the tables: ``<config>:plain`` for a --plain run."""
    return spec["config"] + (PLAIN if spec.get("plain") else "")


def _median(values: List[float]) -> float:
    return statistics.median(values) if values else float("nan")


def paired_ratio(values: List[Optional[float]], reference: List[Optional[float]]) -> Optional[float]:
    """The median over rounds of ``values[r] / reference[r]``: each round runs every configuration once, one
    after the other, so that a ratio within a round cancels the machine's slow drifts; rounds where either
    run failed are left out (None when none is left)."""
    ratios = [v / ref for v, ref in zip(values, reference) if v is not None and ref]
    return statistics.median(ratios) if ratios else None


def reference_of(config: str) -> Optional[str]:
    """The speaker-agnostic configuration of the same network a row is compared with (``lstm_base`` for
    ``lstm_fact_bias`` and ``lstm_base:fact+hyper_lhuc``, ``lstm_base:plain`` for ``lstm_fact_bias:plain``);
    None for the stock ones."""
    plain = config.endswith(PLAIN)
    arch, _ = split_config(config[:-len(PLAIN)] if plain else config)
    declared = family_of_arch(arch)
    if declared is None:
        return None
    return preset_name(declared.name, "base") + (PLAIN if plain else "")


def summarize(specs: List[Dict], results: List[List[Dict]], peak: List[float], args) -> List[Dict]:
    rows = []
    for spec, runs in zip(specs, results):
        ok = [r for r in runs if "error" not in r]
        row = {"mode": spec["mode"], "config": _label(spec), "speakers": spec["speakers"], "runs": ok,
               "errors": [r["error"] for r in runs if "error" in r]}
        key = "tokens_per_second" if spec["mode"] == "train" else "sentences_per_second"
        values = [r[key] for r in ok]
        row["by_round"] = [r.get(key) for r in runs]  # None for a failed run: rounds stay aligned
        row.update(median=_median(values), low=min(values, default=float("nan")),
                   high=max(values, default=float("nan")))
        if spec["mode"] == "train" and ok:
            row["update_seconds"] = _median([r["update_seconds"] for r in ok])
            row["flop_per_token"] = _median([r["flop_per_token"] for r in ok])
            row["peak_fraction"] = row["median"] * row["flop_per_token"] / _median(peak) if peak else None
        row["max_rss_bytes"] = max((r["max_rss_bytes"] for r in ok), default=None)
        rows.append(row)
    by_name = {(r["mode"], r["config"], r["speakers"]): r for r in rows}
    for row in rows:
        stock = next((r for r in rows if r["mode"] == row["mode"] and r["config"].startswith(STOCK)), None)
        base = by_name.get((row["mode"], reference_of(row["config"]), row["speakers"]))
        row["vs_stock"] = paired_ratio(row["by_round"], stock["by_round"]) if stock else None
        row["vs_base"] = paired_ratio(row["by_round"], base["by_round"]) if base else None
        if getattr(args, "versus", None):  # the same speakers, or the one run of a stock model
            versus = by_name.get((row["mode"], args.versus, row["speakers"])) or next(
                (r for r in rows if r["mode"] == row["mode"] and r["config"] == args.versus), None)
            row["vs_versus"] = paired_ratio(row["by_round"], versus["by_round"]) if versus else None
    return rows


def format_tables(rows: List[Dict], peak: List[float], args) -> str:
    lines = []
    device = "CUDA" if args.gpu else f"CPU, {args.threads} thread(s)"
    e, h, a = args.sizes
    lines.append(f"{device}; sizes {e}-{h}-{a}; V = {args.vocab:,}; batches of {args.batch} sentences; "
                 f"median [min-max] of {args.repeats} "
                 + ("paired round(s): the configurations in one process, in turns" if args.paired
                    else "interleaved run(s)")
                 + "; the ratios are medians of each round's ratios")
    if peak:
        lines.append(f"machine's matrix-product rate (one sgemm): {_median(peak) / 1e9:.1f} GFLOP/s")
    for mode, unit in (("train", "tokens/s"), ("generate", "sentences/s")):
        part = [r for r in rows if r["mode"] == mode]
        if not part:
            continue
        lines.append("")
        lines.append("training, target tokens/s (words + </s>)" if mode == "train" else
                     f"generation, beam 5, {args.gen_len}-word hypotheses, sentences/s")
        width = max([24] + [len(r["config"]) + 2 for r in part])  # transformer_base:fact+hyper_lhuc fits
        header = f"  {'config':<{width}}{'speakers':>10}{unit:>13}{'spread':>20}{'vs stock':>10}{'vs base':>9}"
        versus = f"vs {args.versus}" if getattr(args, "versus", None) else ""
        header += f"{versus:>{len(versus) + 2}}" if versus else ""
        if mode == "train":
            header += f"{'ms/update':>11}{'MFLOP/tok':>11}{'of peak':>9}"
        lines.append(header + f"{'max RSS':>10}")
        for r in part:
            if r["errors"] and not r["runs"]:
                lines.append(f"  {r['config']:<{width}}{r['speakers']:>10,}  {r['errors'][0]}")
                continue
            ratios = [f"{r[key]:.2f}x" if r[key] is not None else "-" for key in ("vs_stock", "vs_base")]
            line = (f"  {r['config']:<{width}}{r['speakers']:>10,}{r['median']:>13,.1f}"
                    f"{'[' + format(r['low'], ',.1f') + '-' + format(r['high'], ',.1f') + ']':>20}"
                    f"{ratios[0]:>10}{ratios[1]:>9}")
            if versus:
                ratio = f"{r['vs_versus']:.2f}x" if r["vs_versus"] is not None else "-"
                line += f"{ratio:>{len(versus) + 2}}"
            if mode == "train":
                frac = f"{100 * r['peak_fraction']:.0f}%" if r.get("peak_fraction") else "-"
                line += f"{1000 * r['update_seconds']:>11.1f}{r['flop_per_token'] / 1e6:>11.1f}{frac:>9}"
            rss = f"{r['max_rss_bytes'] / 2 ** 30:.2f}G" if r["max_rss_bytes"] else "-"
            lines.append(line + f"{rss:>10}")
    return "\n".join(lines)


def rotated(count: int, round_index: int) -> List[int]:
    """The order of the configurations in a round: ``0..count-1`` started ``round_index`` places further on,
    so that no configuration always runs first (or right after the same one) when the machine's load or the
    previous process's leftovers favour a place in the round."""
    start = round_index % count if count else 0
    return list(range(start, count)) + list(range(start))


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
        print(f"[{repeat + 1}/{repeats}] {mode} {', '.join(_label(specs[i]) for i in members)} (paired)",
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
            print(f"[{repeat + 1}/{args.repeats}] {spec['mode']} {_label(spec)} ({spec['speakers']:,} speakers)",
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
                 + "; ".join(f"{_label(specs[i])}: {next(r['error'] for r in results[i] if 'error' in r)[:300]}"
                             for i in failed[:3]))


if __name__ == "__main__":
    main()
