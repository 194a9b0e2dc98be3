from typing import Optional

import torch
from torch import Tensor

from .base import EncoderOut, SpeakerBias
from .registry import register_speaker_bias


@register_speaker_bias("none")
class NoSpeakerBias(SpeakerBias):
    """The speaker-agnostic baseline: no bias at all.

    Parameters: 0
    """

    needs_speakers = False

    def lookup(self, speakers: Tensor, encoder_out: EncoderOut = None) -> Optional[Tensor]:
        return None

    def mean_bias(self) -> Tensor:
        return torch.zeros(self.vocab_size, device=self._device())

    def forward(self, speakers: Optional[Tensor], encoder_out: EncoderOut = None) -> Optional[Tensor]:
        return None
