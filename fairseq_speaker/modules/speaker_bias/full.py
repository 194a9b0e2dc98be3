import torch
from torch import Tensor, nn

from .base import EncoderOut, RowSparseConfig, SpeakerBias
from .registry import register_speaker_bias


@register_speaker_bias("full", dataclass=RowSparseConfig)
class FullSpeakerBias(SpeakerBias):
    """``full_bias`` (eq. 2 of Michel & Neubig, 2018): a learned vocabulary-sized bias b_s per speaker.

    Parameters: S * V

    One row of ``weight`` (``[S, V]``) per speaker, all starting at zero so that
    training begins from the speaker-agnostic model.
    """

    speaker_parameter_names = ("weight",)
    row_sparse_parameter_names = ("weight",)
    speaker_vector_label = "bias vectors"

    def __init__(self, cfg: RowSparseConfig, num_speakers: int, vocab_size: int):
        super().__init__(cfg, num_speakers, vocab_size)
        self.weight = nn.Parameter(torch.zeros(num_speakers, vocab_size))  # S x V

    def lookup(self, speakers: Tensor, encoder_out: EncoderOut = None) -> Tensor:
        return self.row_lookup("weight", speakers)  # B x V

    def lookup_words(self, speakers: Tensor, words: Tensor) -> Tensor:
        return self.row_lookup("weight", speakers).index_select(1, words)  # B x W

    def mean_bias(self) -> Tensor:
        return self.mean_rows(self.weight).mean(0)
