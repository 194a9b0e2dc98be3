"""The speaker model families: one declaration per network, next to its model, read by all the rest.

A family is a fairseq encoder-decoder made speaker-aware with the pieces of
:mod:`fairseq_speaker.modules.speaker_plumbing` (its encoder and decoder put the speaker mixins
before fairseq's or our classes; its model is registered with ``register_speaker_model``), then
declared once, after its model, by :func:`register_family`::

    register_family(
        "lstm", model="speaker_lstm", architecture=base_architecture,
        encoder=SpeakerLSTMEncoder, decoder=SpeakerLSTMDecoder,  # where the speaker plugs in
        size_args=size_args,                                     # ModelSizes -> the model's flags
        scales={"tiny": ModelSizes(8, 16), "toy": ModelSizes(16, 16), "demo": ModelSizes(64, 128)},
        stock=StockModel("translation", "lstm", "label_smoothed_cross_entropy", stock_size_args),
        demo_options=("--dropout", "0.1", "--optimizer", "adam", "--clip-norm", "1.0"), demo_lr=0.003,
    )

(``models/speaker_lstm.py``, which also names the LSTM's components for the parameter accounting; its
decoder's ``speaker_state_sites()`` says where a variant acting on the decoder's state plugs in.)

The declaration registers the family's presets, ``{name}_{suffix}`` for every entry of
:data:`~fairseq_speaker.models.presets.PRESET_VARIANTS` (``lstm_base``, ``lstm_full_bias``,
``lstm_fact_bias``), and is all that the rest of the package reads about a network: the command
lines (:func:`fairseq_speaker.commands.family`, ``model_size_args``), the demo (sizes, optimisation,
learning rate), the benchmark (``--family`` choices, default configurations, the stock fairseq
model it is compared with), the parameter accounting (names of its components), the SATED recipe's
``--toy`` sizes, the checkpoint fixtures and the tests. A family from another package (a second
``--user-dir``, see ``examples/lightconv_family``) is one file: its model and this call.

The family of an arch is found through fairseq's ``ARCH_MODEL_NAME_REGISTRY`` (arch -> model
name), then the model name, never from how the arch is spelled: ``transformer_iwslt_de_en`` is
fairseq's, not a preset of ours.
"""

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fairseq.models import (
    ARCH_CONFIG_REGISTRY,
    ARCH_MODEL_INV_REGISTRY,
    ARCH_MODEL_NAME_REGISTRY,
    ARCH_MODEL_REGISTRY,
    MODEL_REGISTRY,
    register_model_architecture,
)

from fairseq_speaker.errors import UserError
from fairseq_speaker.models.presets import PRESET_VARIANTS, RECOMMENDED, preset_architecture, preset_name
from fairseq_speaker.modules.speaker_decoder import SpeakerDecoderMixin
from fairseq_speaker.modules.speaker_encoder import SpeakerEncoderMixin
from fairseq_speaker.modules.speaker_plumbing import SpeakerModelMixin


@dataclass(frozen=True)
class ModelSizes:
    """Sizes of a model, in terms every family reads its own way (through its ``size_args``).

    Args:
        embed: embedding size (and the LSTM's output o_t, the Transformer's model width).
        hidden: the LSTM decoder's state; the feed-forward layers of the Transformer (unless ``ffn``).
        encoder_hidden: the LSTM encoder's size per direction (default: ``embed``).
        attention: the LSTM's MLP attention size (default: ``embed``).
        ffn: the feed-forward layers of the Transformer (default: ``hidden``).
        layers: encoder and decoder layers of the Transformer.
        heads: attention heads of each side of the Transformer.
    """

    embed: int
    hidden: int
    encoder_hidden: Optional[int] = None
    attention: Optional[int] = None
    ffn: Optional[int] = None
    layers: int = 1
    heads: int = 2


#: the sizes every family names (``scales``), smallest first, and who uses them
SCALES: Dict[str, str] = {
    "tiny": "the tests: trains on their 160-sentence corpus in seconds",
    "toy": "the SATED recipe's --toy and the checkpoint fixtures",
    "demo": "fairseq-speaker-demo: learns the toy corpus in minutes on a CPU",
}


@dataclass(frozen=True)
class StockModel:
    """The stock fairseq model a family is measured against (``stock_<family>`` in the benchmark).

    Args:
        task, arch, criterion: fairseq's names.
        size_args: the flags that give it the same sizes as the family's models (and its output layer
            tied to the target embeddings, as ours).
    """

    task: str
    arch: str
    criterion: str
    size_args: Callable[[ModelSizes], List[str]]


@dataclass(frozen=True)
class ModelFamily:
    """A registered family; see :func:`register_family` for the fields."""

    name: str
    model: str
    architecture: Callable
    encoder: type
    decoder: type
    size_args: Callable[[ModelSizes], List[str]]
    scales: Dict[str, ModelSizes]
    stock: Optional[StockModel] = None
    tie_output: Tuple[str, ...] = ()
    demo_options: Tuple[str, ...] = ()
    demo_lr: float = 0.001
    component_labels: Dict[str, str] = field(default_factory=dict)

    @property
    def takes_speaker_state(self) -> bool:
        """Whether its decoder says where a speaker state acts (``speaker_state_sites``), so that variants acting
        on the decoder's state (``lhuc``, ``hyper_lhuc``, ``input``) can be put on its presets."""
        return any("speaker_state_sites" in vars(cls) for cls in self.decoder.__mro__
                   if cls is not SpeakerDecoderMixin)

    @property
    def recommended_variant(self) -> str:
        """The variant of its recommended preset (``{name}_speaker``): ``fact+hyper_lhuc`` where the decoder takes a
        speaker state (measured best on the toy corpora for both built-in families, docs/bias_variants.md), the
        paper's ``fact`` otherwise."""
        return "fact+hyper_lhuc" if self.takes_speaker_state else "fact"

    def preset_variants(self) -> Dict[str, str]:
        """Preset suffix -> the variant it chooses: the paper's presets, then the recommended one."""
        return {**PRESET_VARIANTS, RECOMMENDED: self.recommended_variant}

    @property
    def presets(self) -> List[str]:
        """``{name}_{suffix}`` for every preset suffix (``lstm_base``, ``lstm_full_bias``, ..., ``lstm_speaker``)."""
        return [preset_name(self.name, suffix) for suffix in self.preset_variants()]

    def scale_args(self, scale: str) -> List[str]:
        """The size flags of one of the named sizes (:data:`SCALES`)."""
        return self.size_args(self.scales[scale])


#: family name -> its declaration, in registration order
FAMILY_REGISTRY: Dict[str, ModelFamily] = {}
#: fairseq model name -> family name
_BY_MODEL: Dict[str, str] = {}


def register_family(name: str, model: str, architecture: Callable, *, encoder: type, decoder: type,
                    size_args: Callable[[ModelSizes], List[str]], scales: Dict[str, ModelSizes],
                    stock: Optional[StockModel] = None, tie_output: Sequence[str] = (),
                    demo_options: Sequence[str] = (), demo_lr: float = 0.001,
                    component_labels: Optional[Dict[str, str]] = None) -> ModelFamily:
    """Declare a speaker model family and register its presets with fairseq.

    Args:
        name: the family's name, the first part of its presets' names (``lstm`` -> ``lstm_fact_bias``).
        model: the fairseq model it builds, registered before with ``register_speaker_model``.
        architecture: fills every option not given with the family's default (what each preset calls
            after choosing its variant).
        encoder, decoder: where the speaker plugs in: the family's encoder and decoder classes, built on
            ``SpeakerEncoderMixin`` and ``SpeakerDecoderMixin``. A decoder that defines ``speaker_state_sites()``
            (a ``StateSites``: the size of its input, and of each layer's hidden units) and applies
            ``active_speaker_state()`` in its forward takes the variants acting on the decoder's state
            (:attr:`ModelFamily.takes_speaker_state`); the LSTM does it in its recurrence, the Transformer
            through forward hooks (``speaker_state_hooks.hook_speaker_state``).
        size_args: the model's flags for a :class:`ModelSizes` (what ``commands.model_size_args`` gives).
        scales: a :class:`ModelSizes` for every name of :data:`SCALES` (``tiny``, ``toy``, ``demo``).
        stock: the stock fairseq model the benchmark compares the family with (None: no reference).
        tie_output: the flags tying the output layer to the target embeddings as the paper does, for a
            family that does not by default (the Transformer's ``--share-decoder-input-output-embed``).
        demo_options: training options for a small corpus (the demo's): dropout, optimizer, schedule;
            not the sizes (``scales["demo"]``), not the learning rate (``demo_lr``).
        component_labels: names for the model's modules in the parameter accounting
            (``{"decoder.attention": "MLP attention"}``), in the order to list them; others are listed by path.

    Raises:
        ValueError: the name or the model already has a family, the model is not a registered speaker
            model, the encoder or decoder lacks the speaker mixin, or a named size is missing.
    """
    if not name or not name.replace("_", "").isalnum():
        raise ValueError(f"model family name {name!r}: use letters, digits and '_'")
    if name in FAMILY_REGISTRY:
        raise ValueError(f"model family {name!r} is already registered (by model {FAMILY_REGISTRY[name].model!r})")
    if model in _BY_MODEL:
        raise ValueError(f"model {model!r} already has a family, {_BY_MODEL[model]!r}: one family per model")
    model_cls = MODEL_REGISTRY.get(model)
    if model_cls is None or not issubclass(model_cls, SpeakerModelMixin):
        raise ValueError(f"model family {name!r}: {model!r} is not a registered speaker model; register it first "
                         f"with @register_speaker_model({model!r}) on a SpeakerModelMixin subclass")
    for part, cls, mixin in (("encoder", encoder, SpeakerEncoderMixin), ("decoder", decoder, SpeakerDecoderMixin)):
        if not (isinstance(cls, type) and issubclass(cls, mixin)):
            raise ValueError(f"model family {name!r}: its {part} {getattr(cls, '__name__', cls)} must put "
                             f"{mixin.__name__} before the network's {part} class")
    missing = [scale for scale in SCALES if scale not in scales]
    if missing:
        raise ValueError(f"model family {name!r}: give the sizes {', '.join(missing)} in scales= ({SCALES})")
    family = ModelFamily(name, model, architecture, encoder, decoder, size_args, dict(scales), stock,
                         tuple(tie_output), tuple(demo_options), demo_lr, dict(component_labels or {}))
    taken = [arch for arch in family.presets if arch in ARCH_MODEL_REGISTRY]
    if taken:
        raise ValueError(f"model family {name!r}: fairseq already has an arch {taken[0]!r}; choose another name")
    for suffix, variant in family.preset_variants().items():
        register_model_architecture(model, preset_name(name, suffix))(preset_architecture(variant, architecture))
    FAMILY_REGISTRY[name] = family
    _BY_MODEL[model] = name
    return family


def unregister_family(name: str) -> None:
    """Remove a family and its presets (for tests that register throwaway families)."""
    family = FAMILY_REGISTRY.pop(name)
    del _BY_MODEL[family.model]
    for arch in family.presets:
        for registry in (ARCH_MODEL_REGISTRY, ARCH_MODEL_NAME_REGISTRY, ARCH_CONFIG_REGISTRY):
            registry.pop(arch, None)
        if arch in ARCH_MODEL_INV_REGISTRY.get(family.model, []):
            ARCH_MODEL_INV_REGISTRY[family.model].remove(arch)


def get_family(name: str) -> ModelFamily:
    """The family called ``name``; a :class:`UserError` naming the registered ones otherwise."""
    if name not in FAMILY_REGISTRY:
        raise UserError(f"unknown model family {name!r}; registered families: {', '.join(FAMILY_REGISTRY)} "
                        f"(a family from another package needs its --user-dir)")
    return FAMILY_REGISTRY[name]


def family_of_arch(arch: str) -> Optional[ModelFamily]:
    """The family whose model ``arch`` builds (through fairseq's arch -> model registry); None for an arch
    of another model (fairseq's ``lstm``, ``transformer_iwslt_de_en``) or no arch at all."""
    name = _BY_MODEL.get(ARCH_MODEL_NAME_REGISTRY.get(arch, ""))
    return FAMILY_REGISTRY[name] if name is not None else None


def preset_variant(arch: str) -> Optional[str]:
    """The variant a preset chooses (``lstm_fact_bias`` -> ``fact``); None for other archs."""
    family = family_of_arch(arch)
    if family is None or not arch.startswith(family.name + "_"):
        return None
    return family.preset_variants().get(arch[len(family.name) + 1:])


def speaker_presets() -> List[str]:
    """Every preset of every registered family."""
    return [arch for family in FAMILY_REGISTRY.values() for arch in family.presets]
