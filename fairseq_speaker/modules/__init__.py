from .mlp_attention import MLPAttention
from .speaker_bias import (
    SPEAKER_BIAS_REGISTRY,
    SpeakerBias,
    SpeakerBiasConfig,
    build_speaker_bias,
    register_speaker_bias,
)
from .speaker_decoder import SpeakerDecoderMixin
from .speaker_encoder import SpeakerEncoderMixin
from .speaker_model_options import SpeakerModelConfig
from .speaker_plumbing import SpeakerModelMixin, register_speaker_model

__all__ = [
    "MLPAttention",
    "SPEAKER_BIAS_REGISTRY",
    "SpeakerBias",
    "SpeakerBiasConfig",
    "SpeakerDecoderMixin",
    "SpeakerEncoderMixin",
    "SpeakerModelConfig",
    "SpeakerModelMixin",
    "build_speaker_bias",
    "register_speaker_bias",
    "register_speaker_model",
]
