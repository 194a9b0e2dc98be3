from dataclasses import dataclass, field
from typing import Dict

import torch
from torch import Tensor, nn

from fairseq_speaker.errors import UserError

from .base import EncoderOut, RowSparseConfig, SpeakerBias
from .registry import register_speaker_bias


@dataclass
class RankedSpeakerBiasConfig(RowSparseConfig):
    """Options of the variants with r numbers per speaker (``fact``, ``simplex``, ``hyper_lhuc``)."""

    speaker_rank: int = field(
        default=10, metadata={"help": "fact, simplex: r, the number of shared bias vectors; hyper_lhuc: the r numbers "
                                 "per speaker its LHUC scales and input offset are generated from", "symbol": "r"}
    )


def checked_rank(cfg: RankedSpeakerBiasConfig) -> int:
    """``--speaker-rank``, refused below 1."""
    if cfg.speaker_rank < 1:
        raise UserError(f"--speaker-rank must be at least 1, got {cfg.speaker_rank}")
    return cfg.speaker_rank


@register_speaker_bias("fact", dataclass=RankedSpeakerBiasConfig)
class FactorizedSpeakerBias(SpeakerBias):
    """``fact_bias`` (eq. 4 of Michel & Neubig, 2018): b_s = B~ w_s, a mixture of r shared bias vectors.

    Parameters: r * (S + V)

    Each speaker owns r mixture weights (``speaker_weights``, ``[S, r]``, starting at
    zero: every speaker begins with no bias); the r shared bias vectors
    (``shared_biases``, ``[V, r]``) start random, N(1/r, variance 1/sqrt(r)) as in the
    authors' reference implementation, so that the gradient reaching the speaker
    weights is not zero.
    """

    speaker_parameter_names = ("speaker_weights",)
    row_sparse_parameter_names = ("speaker_weights",)
    speaker_vector_label = "mixture weights"

    def __init__(self, cfg: RankedSpeakerBiasConfig, num_speakers: int, vocab_size: int):
        super().__init__(cfg, num_speakers, vocab_size)
        self.rank = rank = checked_rank(cfg)
        self.speaker_weights = nn.Parameter(torch.zeros(num_speakers, rank))  # S x r
        self.shared_biases = nn.Parameter(torch.randn(vocab_size, rank) * rank ** -0.25 + 1.0 / rank)  # V x r

    def lookup(self, speakers: Tensor, encoder_out: EncoderOut = None) -> Tensor:
        weights = self.row_lookup("speaker_weights", speakers)  # B x r
        return weights @ self.shared_biases.t()  # B x V

    def lookup_words(self, speakers: Tensor, words: Tensor) -> Tensor:
        return self.row_lookup("speaker_weights", speakers) @ self.shared_biases.index_select(0, words).t()  # B x W

    def mean_bias(self) -> Tensor:
        # the bias is linear in the speaker weights: the mean of the biases is the bias of the mean weights
        return self.shared_biases @ self.mean_rows(self.speaker_weights).mean(0)

    def own_vocabulary_vectors(self) -> Dict[str, Tensor]:
        return {"shared bias vectors": self.shared_biases.detach().float()}
