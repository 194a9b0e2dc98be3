from .mlp_attention import MLPAttention
from .speaker_bias import SPEAKER_BIAS_REGISTRY, SpeakerBias, build_speaker_bias, register_speaker_bias

__all__ = ["MLPAttention", "SPEAKER_BIAS_REGISTRY", "SpeakerBias", "build_speaker_bias", "register_speaker_bias"]
