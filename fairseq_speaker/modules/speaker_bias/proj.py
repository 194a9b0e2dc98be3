from dataclasses import dataclass, field
from typing import Dict

import torch
from torch import Tensor, nn

from fairseq_speaker.errors import UserError

from .base import EncoderOut, RowSparseConfig, SpeakerBias
from .registry import register_speaker_bias


@dataclass
class ProjectedSpeakerBiasConfig(RowSparseConfig):
    speaker_embed_dim: int = field(
        default=10, metadata={"help": "proj: d, the size of the speaker embeddings", "symbol": "d"}
    )


@register_speaker_bias("proj", dataclass=ProjectedSpeakerBiasConfig)
class ProjectedSpeakerBias(SpeakerBias):
    """A speaker embedding projected to the vocabulary: b_s = P e_s (the authors' user-vector output model).

    Parameters: d * (S + V)

    Each speaker owns a d-dimensional embedding e_s (``speaker_embeddings``, ``[S, d]``),
    started random, N(1/d, variance sqrt(1/d)), like the user vectors of the authors'
    ``LookupUserRecognizer``; the projection P (``projection``, ``[V, d]``) is shared and
    starts at zero (their ``usr_voc_lstm`` output bias), so training begins without bias.
    The form is fact's with the roles swapped at initialisation: here speakers start
    apart and the vocabulary directions are learned from nothing, while fact starts all
    speakers at zero with random vocabulary directions. Either way a speaker has no
    freedom beyond the d directions the projection spans.
    """

    speaker_parameter_names = ("speaker_embeddings",)
    row_sparse_parameter_names = ("speaker_embeddings",)
    speaker_vector_label = "speaker embeddings"

    def __init__(self, cfg: ProjectedSpeakerBiasConfig, num_speakers: int, vocab_size: int):
        super().__init__(cfg, num_speakers, vocab_size)
        dim = cfg.speaker_embed_dim
        if dim < 1:
            raise UserError(f"--speaker-embed-dim must be at least 1, got {dim}")
        self.speaker_embeddings = nn.Parameter(torch.randn(num_speakers, dim) * dim ** -0.25 + 1.0 / dim)  # S x d
        self.projection = nn.Parameter(torch.zeros(vocab_size, dim))  # V x d

    def lookup(self, speakers: Tensor, encoder_out: EncoderOut = None) -> Tensor:
        return self.row_lookup("speaker_embeddings", speakers) @ self.projection.t()  # B x V

    def mean_bias(self) -> Tensor:
        return self.projection @ self.mean_rows(self.speaker_embeddings).mean(0)  # linear in the embedding

    def own_vocabulary_vectors(self) -> Dict[str, Tensor]:
        return {"projection directions": self.projection.detach().float()}
