from .families import (
    FAMILY_REGISTRY,
    ModelFamily,
    ModelSizes,
    StockModel,
    family_of_arch,
    get_family,
    preset_variant,
    register_family,
    speaker_presets,
)
from .presets import PAPER_SYSTEMS, PRESET_VARIANTS, paper_system_args
from .speaker_lstm import SpeakerLSTMConfig, SpeakerLSTMDecoder, SpeakerLSTMEncoder, SpeakerLSTMModel
from .speaker_transformer import SpeakerTransformerDecoder, SpeakerTransformerEncoder, SpeakerTransformerModel

__all__ = [
    "FAMILY_REGISTRY",
    "ModelFamily",
    "ModelSizes",
    "PAPER_SYSTEMS",
    "PRESET_VARIANTS",
    "SpeakerLSTMConfig",
    "SpeakerLSTMDecoder",
    "SpeakerLSTMEncoder",
    "SpeakerLSTMModel",
    "SpeakerTransformerDecoder",
    "SpeakerTransformerEncoder",
    "SpeakerTransformerModel",
    "StockModel",
    "family_of_arch",
    "get_family",
    "paper_system_args",
    "preset_variant",
    "register_family",
    "speaker_presets",
]
