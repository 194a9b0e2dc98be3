from typing import Dict, Optional

import torch
from torch import Tensor, nn

from fairseq_speaker.errors import UserError

from .base import EncoderOut, SpeakerBias
from .fact import RankedSpeakerBiasConfig
from .registry import register_speaker_bias


@register_speaker_bias("simplex", dataclass=RankedSpeakerBiasConfig)
class SimplexSpeakerBias(SpeakerBias):
    """Every speaker a mixture of r prototypes: b_s = B~ softmax(z_s).

    Parameters: r * (S + V)

    Like ``fact``, but a speaker's r weights are a softmax (``speaker_logits``, ``[S, r]``),
    so they are positive and sum to one: each speaker reads as a blend of r prototype
    biases (``prototypes``, ``[V, r]``). The logits start at zero (an even blend) and the
    prototypes random, N(0, variance 1/sqrt(r)), then centred so that the even blend is
    zero: every speaker starts with no bias, and the prototypes differ, so the logits
    receive gradient.
    """

    speaker_parameter_names = ("speaker_logits",)
    row_sparse_parameter_names = ("speaker_logits",)
    speaker_vector_label = "mixture weights (softmax)"

    def __init__(self, cfg: RankedSpeakerBiasConfig, num_speakers: int, vocab_size: int):
        super().__init__(cfg, num_speakers, vocab_size)
        rank = cfg.speaker_rank
        if rank < 2:
            raise UserError(f"simplex needs --speaker-rank of at least 2 (one prototype is no mixture), got {rank}")
        self.rank = rank
        self.speaker_logits = nn.Parameter(torch.zeros(num_speakers, rank))  # S x r
        prototypes = torch.randn(vocab_size, rank) * rank ** -0.25
        self.prototypes = nn.Parameter(prototypes - prototypes.mean(dim=1, keepdim=True))  # V x r

    def lookup(self, speakers: Tensor, encoder_out: EncoderOut = None) -> Tensor:
        weights = torch.softmax(self.row_lookup("speaker_logits", speakers).float(), dim=1)  # B x r
        return weights.to(self.prototypes) @ self.prototypes.t()  # B x V

    def mean_bias(self) -> Tensor:
        weights = torch.softmax(self.mean_rows(self.speaker_logits).float(), dim=1).mean(0)  # r
        return self.prototypes @ weights.to(self.prototypes)

    def mean_speaker_row(self, name: str) -> Tensor:
        # the bias is linear in the mixture weights, not in the logits: the mean speaker's
        # logits are the log of the mean mixture
        mean = torch.softmax(self.mean_rows(self.speaker_logits).detach().float(), dim=1).mean(0, keepdim=True)
        return mean.clamp(min=1e-12).log().to(self.speaker_logits)

    def own_speaker_vectors(self) -> Optional[Tensor]:
        return torch.softmax(self.speaker_logits.detach().float(), dim=1)

    def own_vocabulary_vectors(self) -> Dict[str, Tensor]:
        return {"prototypes": self.prototypes.detach().float()}
