from .presets import PAPER_SYSTEMS, PRESET_VARIANTS, paper_system_args, preset_variant, speaker_presets
from .speaker_lstm import SpeakerLSTMConfig, SpeakerLSTMDecoder, SpeakerLSTMEncoder, SpeakerLSTMModel
from .speaker_transformer import SpeakerTransformerDecoder, SpeakerTransformerEncoder, SpeakerTransformerModel

__all__ = [
    "PAPER_SYSTEMS",
    "PRESET_VARIANTS",
    "SpeakerLSTMConfig",
    "SpeakerLSTMDecoder",
    "SpeakerLSTMEncoder",
    "SpeakerLSTMModel",
    "SpeakerTransformerDecoder",
    "SpeakerTransformerEncoder",
    "SpeakerTransformerModel",
    "paper_system_args",
    "preset_variant",
    "speaker_presets",
]
