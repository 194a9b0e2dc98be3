"""Parameter accounting: what each part of a speaker model costs, and what a speaker costs.

Builds any speaker preset (``lstm_*``, ``transformer_*``, those of a family from a
``--user-dir``) on PyTorch's ``meta``
device (no memory is allocated, so the paper's 40k vocabulary and millions of
speakers cost nothing), from a data directory or from vocabulary sizes and a
speaker count, with any model flag of fairseq's own parser (``--encoder-layers 3`` of a Transformer,
``--speaker-bias simplex``, ``--speaker-rank 4``). Prints the parameters of every
component, the speaker side (from the variant contract: the parameters that
belong to speakers and those shared), what one more speaker costs, and every
registered variant side by side at the same number of speakers and words.
Options a variant needs and the command line does not give (topic's
``--topic-model``) come from the variant's small example (``example_options``),
and the report says so. Then the memory of training it, in bytes
(:mod:`fairseq_speaker.analysis.training_memory`): with fairseq-train's
``--optimizer``, ``--lr-scheduler``, ``--fp16`` / ``--memory-efficient-fp16``, for
the shared network, for one more speaker, at more speakers and against a
``--memory-budget``.

Given a checkpoint (``--path``), the model it holds instead: built on the meta device from the options
it was trained with, at its vocabulary sizes and its number of speakers (onboarded ones included), checked
parameter by parameter against the checkpoint's shapes; every variant is compared at those sizes and
options, and the memory is that of the checkpoint's optimizer, scheduler and precision.

This module is the command (``fairseq-speaker-params``: its options, the data folder it reads, the report it
prints); the models on the meta device are :mod:`fairseq_speaker.analysis.meta_model`, a checkpoint's model
:mod:`fairseq_speaker.analysis.checkpoint_model`, the counting :mod:`fairseq_speaker.analysis.parameter_counts`.

Usage::

    fairseq-speaker-params --path checkpoints/checkpoint_best.pt
    fairseq-speaker-params --data bin --arch lstm_fact_bias
    fairseq-speaker-params --src-vocab 40000 --tgt-vocab 40000 --speakers 1887 --arch transformer_fact_bias
    fairseq-speaker-params --tgt-vocab 40000 --speakers 1000000 --arch lstm_full_bias --memory-budget 80GB
"""

import argparse
import os
from typing import Dict, List, Optional, Tuple

from fairseq.data import Dictionary, data_utils
from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY

from fairseq_speaker.analysis.checkpoint_model import CheckpointModel, checkpoint_training_flags, load_checkpoint_model
from fairseq_speaker.analysis.meta_model import build_meta_model
from fairseq_speaker.analysis.parameter_counts import (
    Accounting,
    VariantCost,
    accounting_of,
    compare_variants,
    compare_variants_of,
)
from fairseq_speaker.analysis.training_memory import OPTIMIZER_STATE, format_memory, parse_size, training_memory
from fairseq_speaker.checkpoints import read_checkpoint
from fairseq_speaker.command_registry import program_name
from fairseq_speaker.data import SpeakerDictionary, read_speaker_file
from fairseq_speaker.errors import UserError, command, fail
from fairseq_speaker.models import speaker_presets
from fairseq_speaker.runtime import add_runtime_arguments, configure_output
from fairseq_speaker.user_dir import add_user_dir_argument, import_user_dir_early

PROG = program_name(__name__)
BYTES_PER_PARAMETER = 4  # float32
#: the most speakers or words --speakers, --src-vocab and --tgt-vocab may name: torch's sizes are 64-bit (the tables
#: are counted, not made; a table larger than a 64-bit count is refused where it is counted)
MAX_COUNT = 2 ** 63 - 1


def dictionaries_from_data(data: str, source_lang: Optional[str], target_lang: Optional[str],
                           speaker_suffix: str) -> Tuple[Dictionary, Dictionary, int]:
    """The dictionaries ``dict.{lang}.txt`` (the real ones, so that a variant checking a file against
    them, as topic does, accepts it) and the number of speakers, from ``dict.spk.txt`` or the
    training labels."""
    if source_lang is None or target_lang is None:
        source_lang, target_lang = data_utils.infer_language_pair(data)
    if source_lang is None:
        raise UserError(f"could not infer the language pair in {data}: pass --source-lang and --target-lang")
    for lang in (source_lang, target_lang):
        if not os.path.isfile(os.path.join(data, f"dict.{lang}.txt")):
            raise UserError(f"{data}: no dict.{lang}.txt there: give the data folder the model is trained on, or the "
                            f"languages of its dictionaries (--source-lang, --target-lang)")
    src = Dictionary.load(os.path.join(data, f"dict.{source_lang}.txt"))
    tgt = Dictionary.load(os.path.join(data, f"dict.{target_lang}.txt"))
    spk_dict = os.path.join(data, "dict.spk.txt")
    if os.path.exists(spk_dict):
        speakers = len(SpeakerDictionary.load(spk_dict))
    else:
        speakers = len(SpeakerDictionary.from_labels(read_speaker_file(os.path.join(data, f"train.{speaker_suffix}"))))
    return src, tgt, speakers


def _row(label: str, n: int, of: Optional[int] = None) -> str:
    share = f"{100 * n / of:8.3f}%" if of else ""
    return f"  {label:<40}{n:>16,}  {share}".rstrip()


def _flags(examples: Dict[str, object]) -> str:
    return ", ".join("--" + name.replace("_", "-") for name in examples)


def format_report(acc: Accounting, variants: List[VariantCost]) -> str:
    cost = acc.speaker_bias
    lines = [f"{acc.arch} (speaker bias {cost.name!r}): {acc.total:,} parameters "
             f"({acc.total * BYTES_PER_PARAMETER / 2**20:,.1f} MiB in float32)"]
    if cost.examples:
        lines.append(f"  (not given, so from the variant's small example: {_flags(cost.examples)})")
    lines += [_row(name, n, acc.total) for name, n in acc.components.items()]
    lines += [
        "",
        _row("speaker-agnostic part (base model)", acc.base),
        _row(f"speaker side ({cost.num_speakers:,} speakers)", acc.speaker, acc.total),
        _row("  of which shared by all speakers", cost.shared),
        "",
        f"one more speaker, for V = {acc.vocab_size:,} target words: {cost.per_speaker:,} parameters = "
        f"{cost.per_speaker * BYTES_PER_PARAMETER:,} bytes "
        f"({100 * cost.per_speaker / acc.base:.5f}% of the base model)",
        "",
        f"every variant for {cost.num_speakers:,} speakers and V = {acc.vocab_size:,}, with the options given "
        f"(savings against the largest variant not made of others):",
        f"  {'variant':<28}{'per speaker':>14}{'shared':>14}{'all speakers':>16}{'saves vs the largest':>22}",
    ]
    largest = max([v.total for v in variants if not v.combination] or [v.total for v in variants]) or 1
    for v in variants:
        name = f"{v.name} *" if v.examples else v.name
        lines.append(f"  {name:<28}{v.per_speaker:>14,}{v.shared:>14,}{v.total:>16,}"
                     f"{100 * (largest - v.total) / largest:>21.2f}%")
    for v in variants:
        if v.examples:
            lines.append(f"  * {v.name}: {_flags(v.examples)} from its example")
    return "\n".join(lines)


def _checkpoint_heading(path: str, loaded: CheckpointModel) -> str:
    side = "speaker tokens (--speaker-token): one target word per speaker" if loaded.spk_token else \
        f"speaker bias {loaded.built.args.speaker_bias!r}"
    return (f"{path}: {loaded.arch}, {side}; {loaded.num_speakers:,} speakers, source vocabulary "
            f"{loaded.src_vocab:,}, target vocabulary {loaded.tgt_vocab:,} (as saved)")


@command(named_errors=False)
def main(argv=None) -> None:
    try:  # before the parser lists the presets: a family it registers brings its own
        import_user_dir_early(argv)
    except UserError as e:
        fail(str(e), PROG)
    epilog = ("Any other flag is a flag of fairseq-train: of the --arch's model (--decoder-hidden-size 512 for an "
              "LSTM, --encoder-layers 3 for a Transformer, --speaker-bias simplex, --speaker-rank 4, ...) or of "
              "training (--momentum 0.9, --bf16, --fp16-no-flatten-grads, --no-save-optimizer-state, ...).")
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                     epilog=epilog)
    parser.add_argument("--path", metavar="CHECKPOINT",
                        help="count the model of this checkpoint (its options, sizes and speakers), instead of --arch "
                        "at the sizes given")
    parser.add_argument("--data", help="a data directory binarized by fairseq-preprocess, with speaker files")
    parser.add_argument("--source-lang")
    parser.add_argument("--target-lang")
    parser.add_argument("--speaker-suffix", default="spk")
    parser.add_argument("--src-vocab", type=int, help="source vocabulary size, without --data (default: --tgt-vocab)")
    parser.add_argument("--tgt-vocab", type=int, help="target vocabulary size, without --data")
    parser.add_argument("--speakers", type=int, nargs="+", metavar="S",
                        help="number of speakers, without --data; more numbers add rows to the memory table "
                             "(with --data or --path, they only add rows)")
    parser.add_argument("--arch", choices=speaker_presets(), help="the preset to count (default: lstm_fact_bias)")
    add_user_dir_argument(parser)
    add_runtime_arguments(parser, threads=False)
    training = parser.add_argument_group("training memory (fairseq-train's options; the defaults are the paper's "
                                         "recipe, or with --path the checkpoint's)")
    training.add_argument("--optimizer", choices=sorted(OPTIMIZER_STATE), help="default: adam")
    training.add_argument("--lr-scheduler", choices=sorted(LR_SCHEDULER_REGISTRY), help="default: restart_from_best")
    training.add_argument("--fp16", action="store_true", help="fairseq's FP16Optimizer: fp16 weights and gradients "
                          "plus an fp32 master copy of both")
    training.add_argument("--memory-efficient-fp16", action="store_true",
                          help="fp16 weights and gradients, no fp32 copy (fairseq's MemoryEfficientFP16Optimizer)")
    training.add_argument("--memory-budget", type=parse_size, metavar="SIZE",
                          help="bytes available for training (80GB, 16GiB): whether it fits, how many speakers would")
    args, model_args = parser.parse_known_args(argv)
    configure_output(args.verbose)
    if args.path:
        sizes = [flag for flag, value in (("--data", args.data), ("--arch", args.arch), ("--src-vocab", args.src_vocab),
                                          ("--tgt-vocab", args.tgt_vocab)) if value is not None]
        if sizes or model_args:
            parser.error(f"--path reads the model's options and sizes from the checkpoint: drop "
                         f"{' '.join(sizes + model_args)}")
        report_checkpoint(parser, args)
        return
    arch = args.arch or "lstm_fact_bias"
    if args.data and not os.path.isdir(args.data):
        parser.error(f"--data {args.data}: no such folder (give the data directory fairseq-preprocess wrote)")
    if args.data:
        src, tgt, speakers = dictionaries_from_data(args.data, args.source_lang, args.target_lang,
                                                    args.speaker_suffix)
        more = args.speakers or []
    elif args.tgt_vocab is not None and args.speakers:  # 0 is given, and checked below (it read as not given)
        src, tgt, speakers = args.src_vocab or args.tgt_vocab, args.tgt_vocab, args.speakers[0]
        more = args.speakers[1:]
    else:
        parser.error("give --path, --data, or --tgt-vocab and --speakers (and --src-vocab if it differs)")
    for flag, value, least in (("--src-vocab", args.src_vocab, 5), ("--tgt-vocab", args.tgt_vocab, 5)):
        if value is not None and value < least:
            parser.error(f"{flag} must be at least {least} (fairseq's 4 special symbols and a word), got {value}")
    if args.speakers and min(args.speakers) < 0:
        parser.error(f"--speakers must not be negative, got {min(args.speakers)}")
    for flag, values in (("--speakers", args.speakers or []), ("--src-vocab", [args.src_vocab or 0]),
                         ("--tgt-vocab", [args.tgt_vocab or 0])):
        if max(values, default=0) > MAX_COUNT:  # torch's sizes are 64-bit: 1e20 ended in its overflow
            parser.error(f"{flag} must be at most {MAX_COUNT} (a 64-bit count), got {max(values)}")
    model_args = [*model_args, *_training_args(args.optimizer or "adam", args.lr_scheduler or "restart_from_best",
                                               args.fp16, args.memory_efficient_fp16)]
    try:
        built = build_meta_model(src, tgt, speakers, arch, model_args)
        accounting = accounting_of(built, arch)
        memory = training_memory(built.model, built.args)
        variants = compare_variants(tgt, speakers, arch, model_args)
    except ValueError as e:  # an unknown variant, a file that does not fit the data: the variant's own message
        parser.error(str(e))
    except RuntimeError as e:  # torch counts a table's entries in 64 bits, even on the meta device
        if "overflow" not in str(e):
            raise
        parser.error(f"--src-vocab {src}, --tgt-vocab {tgt}, --speakers {speakers}: a table of this model would have "
                     f"more entries than a 64-bit count holds (about 9.2e18): give sizes a machine could hold")
    print(format_report(accounting, variants))
    print()
    print(format_memory(memory, more, args.memory_budget))


def _training_args(optimizer: str, lr_scheduler: str, fp16: bool, memory_efficient_fp16: bool) -> List[str]:
    precision = {"--fp16": fp16, "--memory-efficient-fp16": memory_efficient_fp16}
    return ["--optimizer", optimizer, "--lr-scheduler", lr_scheduler, *[flag for flag, on in precision.items() if on]]


def report_checkpoint(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--path``: the accounting of the checkpoint's own model."""
    if args.speakers and min(args.speakers) < 0:
        parser.error(f"--speakers must not be negative, got {min(args.speakers)}")
    try:
        saved = checkpoint_training_flags(read_checkpoint(args.path))
        optimizer = args.optimizer or saved["optimizer"] or ""
        if optimizer not in OPTIMIZER_STATE:  # one whose state the memory table does not know: the paper's
            optimizer = "adam"
        scheduler = args.lr_scheduler or saved["lr_scheduler"] or ""
        if scheduler not in LR_SCHEDULER_REGISTRY:
            scheduler = "restart_from_best"
        training = _training_args(optimizer, scheduler, args.fp16 or saved["fp16"],
                                  args.memory_efficient_fp16 or saved["memory_efficient_fp16"])
        loaded = load_checkpoint_model(args.path, training)
        accounting = accounting_of(loaded.built, loaded.arch)
        memory = training_memory(loaded.built.model, loaded.built.args)
        variants = compare_variants_of(loaded.built.args, loaded.arch, loaded.tgt_vocab, loaded.num_speakers)
    except ValueError as e:  # UserError included: the checkpoint, its variant, its files
        parser.error(str(e))
    print(_checkpoint_heading(args.path, loaded))
    print(format_report(accounting, variants))
    print()
    print(format_memory(memory, args.speakers or [], args.memory_budget))


if __name__ == "__main__":
    main()
