"""What each part of a speaker model costs in parameters, what a speaker costs, and every variant side by side.

:func:`count_parameters` builds a preset on the meta device (:mod:`fairseq_speaker.analysis.meta_model`) and counts
its parameters by component (the modules its family names), the speaker side from the variant contract (the
parameters that belong to speakers and those shared: :class:`VariantCost`); :func:`accounting_of` does the same for
a model already built (a checkpoint's, :mod:`fairseq_speaker.analysis.checkpoint_model`). :func:`compare_variants`
builds every registered variant alone at the same number of speakers and words, attached where the arch's decoder
takes a speaker state. The command that prints them is :mod:`fairseq_speaker.analysis.parameter_accounting`.
"""

import argparse
import tempfile
from dataclasses import dataclass, field, fields
from types import SimpleNamespace
from typing import Dict, List, Optional, Sequence, Union

import torch
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY

from fairseq_speaker.analysis.meta_model import (
    MetaModel,
    build_meta_model,
    dictionary_of,
    few_speakers,
    model_options,
    resize_speakers,
    sized_dictionary,
    with_examples,
)
from fairseq_speaker.models import family_of_arch
from fairseq_speaker.modules.speaker_bias import (
    SPEAKER_BIAS_REGISTRY,
    SpeakerBias,
    build_speaker_bias,
    parse_variant_name,
)


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
    speakers = few_speakers(num_speakers)
    target = dictionary_of(tgt_vocab)
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
                resize_speakers(bias, num_speakers)
            costs.append(variant_cost(bias, _variant_label(bias, name), _options_read(bias, filled)))
    return costs


def _state_sites(arch: str, args: argparse.Namespace, target: Dictionary):
    """Where ``arch``'s decoder (built speaker-blind, on the meta device) takes a speaker state; None: nowhere."""
    task = SimpleNamespace(source_dictionary=sized_dictionary(16), target_dictionary=target, speaker_dictionary=None)
    blind = argparse.Namespace(**{**vars(args), "speaker_bias": "none"})
    with torch.device("meta"):
        return ARCH_MODEL_REGISTRY[arch].build_model(blind, task).decoder.speaker_state_sites()
