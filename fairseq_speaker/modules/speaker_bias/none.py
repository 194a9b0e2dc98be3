from typing import Optional

from torch import Tensor

from . import register_speaker_bias
from .base import SpeakerBias


@register_speaker_bias("none")
class NoSpeakerBias(SpeakerBias):
    """The speaker-agnostic baseline: no parameters, no bias."""

    def lookup(self, speakers: Tensor) -> Optional[Tensor]:
        return None

    def forward(self, speakers: Tensor) -> Optional[Tensor]:
        return None
