import torch
from torch import Tensor, nn

from . import register_speaker_bias
from .base import SpeakerBias


@register_speaker_bias("full")
class FullSpeakerBias(SpeakerBias):
    """``full_bias`` (eq. 2): a learned vocabulary-sized bias b_s per speaker.

    Parameters: S * V, one row of ``weight`` per speaker, all starting at zero
    so that training begins from the speaker-agnostic model.
    """

    def __init__(self, num_speakers: int, vocab_size: int):
        super().__init__(num_speakers, vocab_size)
        self.weight = nn.Parameter(torch.zeros(num_speakers, vocab_size))  # S x V

    def lookup(self, speakers: Tensor) -> Tensor:
        return self.weight.index_select(0, speakers)  # B x V

    def mean_bias(self) -> Tensor:
        return self.weight.mean(0)
