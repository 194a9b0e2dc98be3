"""The named presets and the paper's systems, in one place.

Every speaker model family (``lstm``, ``transformer``) has one preset per entry of
:data:`PRESET_VARIANTS`: ``lstm_base`` (no speaker bias), ``lstm_full_bias``,
``lstm_fact_bias``, ``transformer_base``, ... ``--speaker-bias NAME`` puts any
registered variant on any preset. The paper's four systems are presets, one of
them with ``--speaker-token`` (:data:`PAPER_SYSTEMS`).
"""

from typing import Callable, Dict, List, Optional, Tuple

from fairseq import utils
from fairseq.models import ARCH_MODEL_NAME_REGISTRY, register_model_architecture

from fairseq_speaker.errors import UserError

#: preset suffix -> the speaker bias variant it chooses
PRESET_VARIANTS: Dict[str, str] = {"base": "none", "full_bias": "full", "fact_bias": "fact"}

#: the systems of the paper's Table 3: name -> (preset suffix, whether targets start with a speaker token)
PAPER_SYSTEMS: Dict[str, Tuple[str, bool]] = {
    "base": ("base", False),
    "spk_token": ("base", True),
    "full_bias": ("full_bias", False),
    "fact_bias": ("fact_bias", False),
}

#: model name -> preset family ("speaker_lstm" -> "lstm")
FAMILIES: Dict[str, str] = {}


def register_presets(model_name: str, family: str, base_architecture: Callable) -> None:
    """Register ``{family}_{suffix}`` for every preset suffix: the variant, then ``base_architecture``."""
    FAMILIES[model_name] = family
    for suffix, variant in PRESET_VARIANTS.items():
        register_model_architecture(model_name, f"{family}_{suffix}")(_preset(variant, base_architecture))


def _preset(variant: str, base_architecture: Callable) -> Callable:
    def preset(args):
        args.speaker_bias = utils.safe_getattr(args, "speaker_bias", None) or variant
        base_architecture(args)

    preset.__doc__ = f"speaker bias {variant!r} unless --speaker-bias says otherwise; then the family's defaults"
    return preset


def preset_name(family: str, suffix: str) -> str:
    if suffix not in PRESET_VARIANTS:
        raise UserError(f"unknown preset {suffix!r}; presets: {', '.join(PRESET_VARIANTS)}")
    return f"{family}_{suffix}"


def preset_variant(arch: str) -> Optional[str]:
    """The variant a preset chooses (``lstm_fact_bias`` -> ``fact``); None for other archs."""
    family = FAMILIES.get(ARCH_MODEL_NAME_REGISTRY.get(arch, ""))
    if family is None or not arch.startswith(family + "_"):
        return None
    return PRESET_VARIANTS.get(arch[len(family) + 1:])


def speaker_presets() -> List[str]:
    """Every preset of every speaker model family."""
    return [preset_name(family, suffix) for family in FAMILIES.values() for suffix in PRESET_VARIANTS]


def paper_system_args(system: str, family: str = "lstm") -> List[str]:
    """fairseq-train arguments choosing one of the paper's systems (``fact_bias`` -> ``--arch lstm_fact_bias``)."""
    if system not in PAPER_SYSTEMS:
        raise UserError(f"unknown system {system!r}; the paper's systems: {', '.join(PAPER_SYSTEMS)}")
    suffix, token = PAPER_SYSTEMS[system]
    return ["--arch", preset_name(family, suffix)] + (["--speaker-token"] if token else [])
