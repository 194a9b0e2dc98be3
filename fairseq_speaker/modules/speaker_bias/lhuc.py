from typing import Dict, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from .base import RowSparseConfig, SpeakerBias, SpeakerState, StateSites
from .registry import register_speaker_bias


def lhuc_scales(amplitudes: Tensor, layer_dims: Sequence[int]) -> Tuple[Tensor, ...]:
    """LHUC's scales ``2 sigmoid(a)`` in (0, 2), one ``[B, d_l]`` per layer, from amplitudes ``[B, sum d_l]``
    (a = 0: a scale of 1, the speaker-blind unit)."""
    return tuple((2.0 * torch.sigmoid(amplitudes)).split(list(layer_dims), dim=1))


@register_speaker_bias("lhuc", dataclass=RowSparseConfig)
class LHUCSpeakerState(SpeakerBias):
    """LHUC (learning hidden unit contributions): every speaker scales the hidden units of every decoder layer,
    h'_l = h_l * 2 sigmoid(a_{s,l}) (Swietojanski, Li & Renals, IEEE/ACM TASLP 2016; for NMT: Vilar, NAACL 2018).

    Parameters: S * H

    Each speaker owns one amplitude per hidden unit of each decoder layer (``amplitudes``,
    ``[S, H]``, H = sum of the layers' sizes d_l: the LSTM's h_t, the Transformer's residual
    stream after each layer), read row by row. They start at zero, a scale of 1: training starts
    from the speaker-blind model. No bias on the logits. The mean speaker is the speaker of the
    mean amplitudes, whose scale is 2 sigmoid(mean a), not the mean of the scales.
    """

    acts_on_output = False
    acts_on_state = True
    speaker_parameter_names = ("amplitudes",)
    row_sparse_parameter_names = ("amplitudes",)
    speaker_vector_label = "LHUC amplitudes"

    def __init__(self, cfg: RowSparseConfig, num_speakers: int, vocab_size: int):
        super().__init__(cfg, num_speakers, vocab_size)
        self.amplitudes = nn.Parameter(torch.zeros(num_speakers, 0))  # S x H, once attached

    def attach(self, sites: StateSites) -> None:
        fresh = self.sites is None
        super().attach(sites)
        if fresh:
            self.amplitudes = nn.Parameter(torch.zeros(self.num_speakers, sites.hidden_dim))  # S x H

    def formula_symbols(self) -> Dict[str, int]:
        return {"H": self.sites.hidden_dim if self.sites is not None else 0}

    def state_of_rows(self, rows: Dict[str, Tensor]) -> Optional[SpeakerState]:
        assert self.sites is not None  # attached to a decoder's sites
        return SpeakerState(layer_scales=lhuc_scales(rows["amplitudes"], self.sites.layer_dims))
