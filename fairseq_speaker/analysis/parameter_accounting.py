"""Parameter accounting: what each part of a speaker model costs, and what a speaker costs.

Builds any speaker preset (``lstm_*``, ``transformer_*``, those of a family from a
``--user-dir``) on PyTorch's ``meta``
device (no memory is allocated, so the paper's 40k vocabulary and millions of
speakers cost nothing), from a data directory or from vocabulary sizes and a
speaker count, with any model flag of fairseq's own parser (``--encoder-layers 3``,
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

Usage::

    fairseq-speaker-params --path checkpoints/checkpoint_best.pt
    fairseq-speaker-params --data bin --arch lstm_fact_bias
    fairseq-speaker-params --src-vocab 40000 --tgt-vocab 40000 --speakers 1887 --arch transformer_fact_bias
    fairseq-speaker-params --tgt-vocab 40000 --speakers 1000000 --arch lstm_full_bias --memory-budget 80GB
"""

import argparse
import os
import tempfile
from dataclasses import dataclass, field, fields
from types import SimpleNamespace
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple, TypedDict, Union

import torch
from fairseq import options
from fairseq.data import Dictionary, data_utils
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY
from torch import nn

from fairseq_speaker.analysis.training_memory import OPTIMIZER_STATE, format_memory, parse_size, training_memory
from fairseq_speaker.checkpoints import read_checkpoint
from fairseq_speaker.command_registry import program_name
from fairseq_speaker.data import SpeakerDictionary, read_speaker_file
from fairseq_speaker.errors import UserError, command, fail
from fairseq_speaker.models import family_of_arch, speaker_presets
from fairseq_speaker.modules.speaker_bias import (
    SPEAKER_BIAS_REGISTRY,
    SpeakerBias,
    build_speaker_bias,
    parse_variant_name,
)
from fairseq_speaker.runtime import add_runtime_arguments, configure_output
from fairseq_speaker.user_dir import add_user_dir_argument, check_registered, import_user_dir_early

if TYPE_CHECKING:
    from fairseq.models import BaseFairseqModel

PROG = program_name(__name__)
BYTES_PER_PARAMETER = 4  # float32


@dataclass
class VariantCost:
    name: str
    per_speaker: int  # parameters of one speaker
    shared: int  # parameters shared by all speakers
    num_speakers: int
    #: options taken from the variants' examples because the command line did not give them
    examples: Dict[str, object] = field(default_factory=dict)
    combination: bool = False  # made of other variants (``sum``, ``fact+topic``)

    @property
    def total(self) -> int:
        return self.per_speaker * self.num_speakers + self.shared


@dataclass
class Accounting:
    arch: str
    components: Dict[str, int]  # label -> parameters (tied parameters counted once)
    total: int
    speaker_bias: VariantCost  # the model's own variant
    vocab_size: int

    @property
    def speaker(self) -> int:
        """Parameters of the speaker bias (all speakers, and what they share)."""
        return self.speaker_bias.total

    @property
    def base(self) -> int:
        """The speaker-agnostic part of the model."""
        return self.total - self.speaker


def sized_dictionary(size: int) -> Dictionary:
    """A dictionary of ``size`` entries, fairseq's 4 special symbols included."""
    d = Dictionary()
    for i in range(size - len(d)):
        d.add_symbol(f"w{i}")
    return d


class CountingDictionary(Dictionary):
    """``size`` entries to what counts them (``len``), fairseq's special symbols alone held: a model built with it on
    the meta device has the shapes it has with a real dictionary of that size, without a string a word (a vocabulary
    of 40 million words took a minute and gigabytes of memory to spell out before anything was counted)."""

    def __init__(self, size: int):
        super().__init__()
        self._size = max(int(size), len(self.symbols))

    def __len__(self) -> int:
        return self._size


def _dictionary(vocab: Union[int, Dictionary]) -> Dictionary:
    return vocab if isinstance(vocab, Dictionary) else CountingDictionary(vocab)


def model_options(arch: str, model_args: Sequence[str] = ()) -> argparse.Namespace:
    """The options fairseq-train would build ``arch`` with, given the model flags ``model_args``."""
    return options.parse_args_and_arch(options.get_training_parser(), [
        "data-bin", "--task", "speaker_translation", "--arch", arch, *model_args])


def with_examples(args: argparse.Namespace, arch: str, workdir: str, source_dictionary: Dictionary,
                  variants: Optional[Sequence[str]] = None) -> Tuple[argparse.Namespace, Dict[str, object]]:
    """``args`` with the example options of every registered variant (or of ``variants``) (``example_options``,
    which may write a small file in ``workdir``, sized by ``source_dictionary``) for those the command line left at
    their defaults; and what was filled in. The command line's options win, so that e.g. a real ``--topic-model`` is
    counted."""
    defaults = vars(model_options(arch))
    given = {k for k, v in vars(args).items() if k not in defaults or defaults[k] != v}
    filled: Dict[str, object] = {}
    for name, cls in SPEAKER_BIAS_REGISTRY.items():
        if variants is not None and name not in variants:
            continue
        filled.update({k: v for k, v in cls.example_options(workdir, source_dictionary).items() if k not in given})
    return argparse.Namespace(**{**vars(args), **filled}), filled


def _options_read(bias: SpeakerBias, filled: Dict[str, object]) -> Dict[str, object]:
    """The filled-in options that ``bias`` (or a variant nested in it) reads."""
    read = {f.name for _, variant in bias.named_variants() for f in fields(variant.config_class)}
    return {k: v for k, v in filled.items() if k in read}


def _component(name: str, labels: Dict[str, str]) -> str:
    """The label of a parameter's module: the named one it belongs to, or its path to depth 2."""
    parts = name.split(".")
    for depth in (2, 1):
        path = ".".join(parts[:depth])
        if path in labels:
            return labels[path]
    return ".".join(parts[:2])


def variant_cost(bias: SpeakerBias, name: str, examples: Optional[Dict[str, object]] = None) -> VariantCost:
    return VariantCost(name, bias.parameters_per_speaker(), sum(p.numel() for p in bias.shared_parameters().values()),
                       bias.num_speakers, dict(examples or {}), len(list(bias.named_variants())) > 1)


def _variant_label(bias: SpeakerBias, name: str) -> str:
    """``name``, with the variants it adds up for one made of others (``sum = fact+full``)."""
    parts = "+".join(variant.name for prefix, variant in bias.named_variants() if prefix)
    return f"{name} = {parts}" if parts and parts != name else name


@dataclass
class MetaModel:
    """A model built on the meta device, with the options it was built with."""

    model: "BaseFairseqModel"
    args: argparse.Namespace  # fairseq-train's options
    filled: Dict[str, object]  # options taken from the variants' examples
    vocab_size: int


@dataclass
class CheckpointModel:
    """What ``--path`` reads of a checkpoint: the model rebuilt on the meta device, and its sizes."""

    built: MetaModel
    arch: str
    src_vocab: int
    tgt_vocab: int
    num_speakers: int
    spk_token: bool


def _section(cfg, name: str) -> Dict:
    section = cfg.get(name) if cfg is not None and hasattr(cfg, "get") else None
    if section is None:
        return {}
    return dict(vars(section)) if isinstance(section, argparse.Namespace) else dict(section)


def _rows(model: Dict, *keys: str) -> Optional[int]:
    for key in keys:
        if key in model and hasattr(model[key], "shape"):
            return int(model[key].shape[0])
    return None


class TrainingFlags(TypedDict):
    optimizer: Optional[str]
    lr_scheduler: Optional[str]
    fp16: bool
    memory_efficient_fp16: bool


def checkpoint_training_flags(state: dict) -> TrainingFlags:
    """The optimizer, lr scheduler and precision a checkpoint was trained with (fairseq's names)."""
    cfg = state.get("cfg")
    common = _section(cfg, "common")
    return {"optimizer": _section(cfg, "optimizer").get("_name"),
            "lr_scheduler": _section(cfg, "lr_scheduler").get("_name"),
            "fp16": bool(common.get("fp16")), "memory_efficient_fp16": bool(common.get("memory_efficient_fp16"))}


def load_checkpoint_model(path: str, training_args: Sequence[str] = ()) -> CheckpointModel:
    """The model of checkpoint ``path`` on the meta device, built from the options it was trained with (and
    ``training_args``, fairseq-train flags of training only: optimizer, precision) at its vocabulary sizes and
    number of speakers; every parameter is checked against the checkpoint's shape."""
    state = read_checkpoint(path)
    model_state, task_state = state.get("model"), state.get("task_state")
    if not isinstance(model_state, dict) or not isinstance(task_state, dict) or "cfg" not in state:
        raise UserError(f"--path {path}: not a fairseq-speaker checkpoint (no model or task state): give a checkpoint "
                        f"written by fairseq-train or fairseq-speaker-adapt")
    check_registered(state, path)
    options = _section(state["cfg"], "model")
    arch = options.get("arch") or options.get("_name")
    if not isinstance(arch, str) or arch not in ARCH_MODEL_REGISTRY or family_of_arch(arch) is None:
        raise UserError(f"--path {path}: its arch {arch!r} is not a speaker model's: give a fairseq-speaker checkpoint")
    speakers = task_state.get("speaker_dictionary")
    num_speakers = len(speakers["names"]) if isinstance(speakers, dict) else 0
    src_vocab = _rows(model_state, "encoder.embed_tokens.weight")
    tgt_vocab = _rows(model_state, "decoder.embed_tokens.weight", "decoder.output_projection.weight",
                      "decoder.output_bias")
    if src_vocab is None or tgt_vocab is None:
        raise UserError(f"--path {path}: no embedding tables in its model: not a checkpoint of a speaker model")
    args = argparse.Namespace(**{**vars(model_options(arch, training_args)),
                                 **{k: v for k, v in options.items() if not k.startswith("_")}})
    task = SimpleNamespace(source_dictionary=CountingDictionary(src_vocab),
                           target_dictionary=CountingDictionary(tgt_vocab),
                           speaker_dictionary=_few_speakers(num_speakers))
    try:
        with torch.device("meta"):
            model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
            _resize(model.decoder.speaker_bias, num_speakers)
    except (ValueError, OSError) as e:  # an option naming a file that is gone (topic's --topic-model), ...
        raise UserError(f"--path {path}: its model cannot be rebuilt from its options: {e}") from None
    built = MetaModel(model, args, {}, tgt_vocab)
    saved = {k: tuple(v.shape) for k, v in model_state.items() if hasattr(v, "shape")}
    missing = [name for name, _ in model.named_parameters() if name not in saved]
    if missing:
        raise UserError(f"--path {path}: the model rebuilt from its options has {missing[0]}, which the checkpoint "
                        f"lacks ({len(missing)} missing): a damaged checkpoint, or one of another release's model")
    for name, p in list(model.named_parameters()):  # sized by a file the options name (topic's K): as saved
        if saved[name] != tuple(p.shape):
            owner, _, attr = name.rpartition(".")
            setattr(model.get_submodule(owner), attr, nn.Parameter(torch.empty(saved[name], device="meta"),
                                                                   requires_grad=p.requires_grad))
    return CheckpointModel(built, arch, src_vocab, tgt_vocab, num_speakers, bool(task_state.get("speaker_token")))


def build_meta_model(src_vocab: Union[int, Dictionary], tgt_vocab: Union[int, Dictionary], num_speakers: int,
                     arch: str = "lstm_fact_bias", model_args: Sequence[str] = ()) -> MetaModel:
    """``arch`` as fairseq-train builds it with the flags ``model_args``, on the meta device (nothing allocated).

    ``src_vocab`` / ``tgt_vocab``: vocabulary sizes (fairseq's 4 special symbols included) or the
    dictionaries themselves. ``model_args`` are fairseq-train flags (``--speaker-rank 4``,
    ``--encoder-layers 3``, ``--speaker-bias simplex``, ``--optimizer sgd``); the rest keep the preset's defaults.
    """
    task = SimpleNamespace(
        source_dictionary=_dictionary(src_vocab),
        target_dictionary=_dictionary(tgt_vocab),
        speaker_dictionary=_few_speakers(num_speakers),
    )
    with tempfile.TemporaryDirectory() as workdir:  # files of the examples are read while the model is built
        args = model_options(arch, model_args)
        # the examples of the variants built alone: another's may be sized by the source vocabulary (topic's model
        # of the source words, three floats a word), which a model without it does not count
        named = parse_variant_name(args.speaker_bias) if getattr(args, "speaker_bias", None) else []
        args, filled = with_examples(args, arch, workdir, task.source_dictionary, variants=named)
        try:
            with torch.device("meta"):
                model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
                _resize(model.decoder.speaker_bias, num_speakers)
        except AssertionError as e:  # fairseq's checks of sizes (those below 1 are refused by the build itself)
            raise UserError(f"--arch {arch}: the model cannot be built with these sizes ({e}): give sizes that fit "
                            f"each other (a Transformer's embedding size a multiple of its attention heads)") from None
    return MetaModel(model, args, filled, len(task.target_dictionary))


#: a model for the accounting is built with at most this many speakers, then its tables are resized (on the
#: meta device, nothing allocated): the count of speakers is arithmetic, a hundred million labels are not
_BUILT_SPEAKERS = 2


def _few_speakers(num_speakers: int) -> SpeakerDictionary:
    return SpeakerDictionary([str(i) for i in range(min(num_speakers, _BUILT_SPEAKERS))])


def _resize(bias, num_speakers: int) -> None:
    if num_speakers > bias.num_speakers:
        bias.resize_table(num_speakers)


def count_parameters(src_vocab: Union[int, Dictionary], tgt_vocab: Union[int, Dictionary], num_speakers: int,
                     arch: str = "lstm_fact_bias", model_args: Sequence[str] = ()) -> Accounting:
    """Build ``arch`` on the meta device (:func:`build_meta_model`) and count its parameters by component."""
    return accounting_of(build_meta_model(src_vocab, tgt_vocab, num_speakers, arch, model_args), arch)


def accounting_of(built: MetaModel, arch: str) -> Accounting:
    """The parameters of a model by component: the modules its family names (``component_labels``), in the
    order it gives, and the others by their path."""
    model, args = built.model, built.args
    family = family_of_arch(arch)
    labels = family.component_labels if family is not None else {}
    components: Dict[str, int] = {label: 0 for label in labels.values()}  # in the family's order
    for name, p in model.named_parameters():  # named_parameters yields a tied parameter once
        label = _component(name, labels)
        components[label] = components.get(label, 0) + p.numel()
    components = {label: n for label, n in components.items() if n}
    bias = model.decoder.speaker_bias
    total = sum(p.numel() for p in model.parameters())
    cost = variant_cost(bias, args.speaker_bias, _options_read(bias, built.filled))
    return Accounting(arch, components, total, cost, built.vocab_size)


def compare_variants(tgt_vocab: Union[int, Dictionary], num_speakers: int, arch: str = "lstm_base",
                     model_args: Sequence[str] = ()) -> List[VariantCost]:
    """Every registered variant at the same S and V, with the options of ``model_args``; then the
    model's own variant if it is a sum of others (``--speaker-bias fact+topic``).

    The variants are built alone on the meta device, attached to where the arch's decoder takes a speaker
    state (so that a state variant's shared matrices have the model's sizes); for a family whose decoder
    takes none, only the variants on the logits are listed. Options a variant needs and ``model_args`` do
    not give come from the variants' small examples (``example_options``); each cost lists those it used.
    """
    return compare_variants_of(model_options(arch, model_args), arch, tgt_vocab, num_speakers)


def compare_variants_of(args: argparse.Namespace, arch: str, tgt_vocab: Union[int, Dictionary],
                        num_speakers: int) -> List[VariantCost]:
    """:func:`compare_variants` with the options ``args`` (fairseq-train's, or a checkpoint's)."""
    speakers = _few_speakers(num_speakers)
    target = _dictionary(tgt_vocab)
    sites = _state_sites(arch, args, target)
    names = [name for name in sorted(SPEAKER_BIAS_REGISTRY)
             if sites is not None or SPEAKER_BIAS_REGISTRY[name].acts_on_state is not True]
    if len(parse_variant_name(args.speaker_bias)) > 1:
        names.append(args.speaker_bias)
    costs = []
    with tempfile.TemporaryDirectory() as workdir:
        cfg, filled = with_examples(args, arch, workdir, sized_dictionary(16))
        for name in names:
            with torch.device("meta"):
                bias = build_speaker_bias(name, cfg, speakers, target, None, sites=sites)
                _resize(bias, num_speakers)
            costs.append(variant_cost(bias, _variant_label(bias, name), _options_read(bias, filled)))
    return costs


def _state_sites(arch: str, args: argparse.Namespace, target: Dictionary):
    """Where ``arch``'s decoder (built speaker-blind, on the meta device) takes a speaker state; None: nowhere."""
    task = SimpleNamespace(source_dictionary=sized_dictionary(16), target_dictionary=target, speaker_dictionary=None)
    blind = argparse.Namespace(**{**vars(args), "speaker_bias": "none"})
    with torch.device("meta"):
        return ARCH_MODEL_REGISTRY[arch].build_model(blind, task).decoder.speaker_state_sites()


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
    epilog = ("Any other flag is a flag of fairseq-train: of the model (--encoder-layers 3, --speaker-bias simplex, "
              "--speaker-rank 4, ...) or of training (--momentum 0.9, --bf16, --fp16-no-flatten-grads, "
              "--no-save-optimizer-state, ...).")
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
    elif args.tgt_vocab and args.speakers:
        src, tgt, speakers = args.src_vocab or args.tgt_vocab, args.tgt_vocab, args.speakers[0]
        more = args.speakers[1:]
    else:
        parser.error("give --path, --data, or --tgt-vocab and --speakers (and --src-vocab if it differs)")
    for flag, value, least in (("--src-vocab", args.src_vocab, 5), ("--tgt-vocab", args.tgt_vocab, 5)):
        if value is not None and value < least:
            parser.error(f"{flag} must be at least {least} (fairseq's 4 special symbols and a word), got {value}")
    if args.speakers and min(args.speakers) < 0:
        parser.error(f"--speakers must not be negative, got {min(args.speakers)}")
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
