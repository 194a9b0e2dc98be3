"""The named presets and the paper's systems, in one place.

Every speaker model family (:mod:`fairseq_speaker.models.families`: ``lstm``, ``transformer``, and any
registered from another package) has one preset per entry of :data:`PRESET_VARIANTS`: ``lstm_base``
(no speaker bias), ``lstm_full_bias``, ``lstm_fact_bias``, ``transformer_base``, ...
``--speaker-bias NAME`` puts any registered variant on any preset. The paper's four systems are
presets, one of them with ``--speaker-token`` (:data:`PAPER_SYSTEMS`).

Beside the paper's presets, each family has a recommended one, ``{family}_speaker`` (:data:`RECOMMENDED`):
the best combination measured so far of where the speaker acts (``fact+hyper_lhuc`` on a decoder that takes a
speaker state, ``fact`` otherwise: ``ModelFamily.recommended_variant``). The paper's presets stay exactly the
paper's.
"""

from typing import Callable, Dict, List, Tuple

from fairseq import utils

from fairseq_speaker.errors import UserError
from fairseq_speaker.modules.speaker_bias import parse_variant_name

#: preset suffix -> the speaker bias variant it chooses
PRESET_VARIANTS: Dict[str, str] = {"base": "none", "full_bias": "full", "fact_bias": "fact"}

#: the suffix of each family's recommended preset (``lstm_speaker``, ``transformer_speaker``), whose variant the
#: family chooses (``ModelFamily.recommended_variant``)
RECOMMENDED = "speaker"

#: the systems of the paper's Table 3: name -> (preset suffix, whether targets start with a speaker token)
PAPER_SYSTEMS: Dict[str, Tuple[str, bool]] = {
    "base": ("base", False),
    "spk_token": ("base", True),
    "full_bias": ("full_bias", False),
    "fact_bias": ("fact_bias", False),
}


def preset_architecture(variant: str, base_architecture: Callable) -> Callable:
    """The arch function of a preset: ``variant`` unless ``--speaker-bias`` says otherwise, then the family's
    defaults (``base_architecture``)."""

    def preset(args):
        given = utils.safe_getattr(args, "speaker_bias", None)
        if given is not None and not str(given).strip():
            parse_variant_name(given)  # refused: an empty one is not the preset's (an unset "$BIAS")
        args.speaker_bias = given or variant
        base_architecture(args)

    preset.__doc__ = f"speaker bias {variant!r} unless --speaker-bias says otherwise; then the family's defaults"
    return preset


def preset_name(family: str, suffix: str) -> str:
    if suffix not in PRESET_VARIANTS and suffix != RECOMMENDED:
        raise UserError(f"unknown preset {suffix!r}; presets: {', '.join([*PRESET_VARIANTS, RECOMMENDED])}")
    return f"{family}_{suffix}"


def paper_system_args(system: str, family: str = "lstm") -> List[str]:
    """fairseq-train arguments choosing one of the paper's systems (``fact_bias`` -> ``--arch lstm_fact_bias``)."""
    if system not in PAPER_SYSTEMS:
        raise UserError(f"unknown system {system!r}; the paper's systems: {', '.join(PAPER_SYSTEMS)}")
    suffix, token = PAPER_SYSTEMS[system]
    return ["--arch", preset_name(family, suffix)] + (["--speaker-token"] if token else [])
