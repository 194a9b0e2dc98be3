import torch
from torch import Tensor, nn

from . import register_speaker_bias
from .base import SpeakerBias


@register_speaker_bias("fact")
class FactorizedSpeakerBias(SpeakerBias):
    """``fact_bias`` (eq. 4): b_s = S_s B~, a mixture of r shared bias vectors.

    Parameters: r * (S + V). Each speaker owns r mixture weights
    (``speaker_weights``, S x r, starting at zero: every speaker begins with no
    bias); the r shared bias vectors (``shared_biases``, V x r) start random,
    N(1/r, variance 1/sqrt(r)) as in the authors' reference implementation, so
    that the gradient reaching the speaker weights is not zero.
    """

    def __init__(self, num_speakers: int, vocab_size: int, rank: int):
        super().__init__(num_speakers, vocab_size)
        if rank < 1:
            raise ValueError(f"--speaker-rank must be at least 1, got {rank}")
        self.rank = rank
        self.speaker_weights = nn.Parameter(torch.zeros(num_speakers, rank))  # S x r
        self.shared_biases = nn.Parameter(
            torch.randn(vocab_size, rank) * rank ** -0.25 + 1.0 / rank  # V x r
        )

    @classmethod
    def build(cls, cfg, num_speakers: int, vocab_size: int) -> "FactorizedSpeakerBias":
        return cls(num_speakers, vocab_size, int(cfg.speaker_rank))

    def lookup(self, speakers: Tensor) -> Tensor:
        weights = self.speaker_weights.index_select(0, speakers)  # B x r
        return weights @ self.shared_biases.t()  # B x V

    def mean_bias(self) -> Tensor:
        # the bias is linear in the speaker weights: mean of biases = bias of the mean weights
        return self.shared_biases @ self.speaker_weights.mean(0)
