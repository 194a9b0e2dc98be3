"""The configurations ``fairseq-speaker-benchmark`` measures (:mod:`fairseq_speaker.benchmarks.training`): a preset,
``ARCH:VARIANT``, ``CONFIG@lr-scale=X``, ``CONFIG@words`` or ``stock_<family>``, read (:func:`split_config`,
:func:`lr_scale_of`, :func:`words_of`) and checked before any work starts (:func:`check_config`); the fairseq-train
flags of the model of each (:func:`model_args`: its task, arch, criterion and sizes), the memory its speaker rows need
in training (:func:`memory_estimate`) and the speaker-agnostic configuration its row is compared with
(:func:`reference_of`). Its siblings: :mod:`~fairseq_speaker.benchmarks.training_workers` (a configuration measured in
a process of its own) and :mod:`~fairseq_speaker.benchmarks.training_tables` (the figures summarized and the tables).
"""

from types import SimpleNamespace
from typing import List, Optional, Tuple

import torch
from fairseq.models import ARCH_MODEL_REGISTRY

from fairseq_speaker.analysis.meta_model import build_meta_model, model_options, sized_dictionary
from fairseq_speaker.data import SpeakerDictionary
from fairseq_speaker.errors import UserError
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

BYTES = 4  # float32
STOCK = "stock_"  # a configuration stock_<family> is the stock fairseq model the family declares
#: the end of a --plain run's name in the tables
PLAIN = ":plain"


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
