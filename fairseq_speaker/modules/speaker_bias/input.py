from typing import Dict, Optional

import torch
from torch import Tensor, nn

from .base import RowSparseConfig, SpeakerBias, SpeakerState, StateSites
from .registry import register_speaker_bias


@register_speaker_bias("input", dataclass=RowSparseConfig)
class InputSpeakerState(SpeakerBias):
    """A speaker embedding added to the decoder's input at every step: x_t = E_T w_(t-1) + u_s (the persona
    model of Li, Galley, Brockett, Spithourakis, Gao & Dolan, ACL 2016, which feeds a speaker embedding to
    every decoder step).

    Parameters: S * D

    Each speaker owns an offset of the size of the decoder's input (``offsets``, ``[S, D]``, D = the
    target embedding size d_in), read row by row, starting at zero: training starts from the
    speaker-blind model. In the LSTM the offset reaches the recurrence and eq. 6's W_ow term (both
    read the previous word's embedding); in the Transformer, the first layer. No bias on the logits.
    """

    acts_on_output = False
    acts_on_state = True
    speaker_parameter_names = ("offsets",)
    row_sparse_parameter_names = ("offsets",)
    speaker_vector_label = "input offsets"

    def __init__(self, cfg: RowSparseConfig, num_speakers: int, vocab_size: int):
        super().__init__(cfg, num_speakers, vocab_size)
        self.offsets = nn.Parameter(torch.zeros(num_speakers, 0))  # S x D, once attached

    def attach(self, sites: StateSites) -> None:
        fresh = self.sites is None
        super().attach(sites)
        if fresh:
            self.offsets = nn.Parameter(torch.zeros(self.num_speakers, sites.input_dim))  # S x D

    def formula_symbols(self) -> Dict[str, int]:
        return {"D": self.sites.input_dim if self.sites is not None else 0}

    def state_of_rows(self, rows: Dict[str, Tensor]) -> Optional[SpeakerState]:
        return SpeakerState(input_offset=rows["offsets"])
