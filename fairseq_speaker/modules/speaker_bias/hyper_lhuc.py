from typing import Dict, Optional

import torch
from torch import Tensor, nn

from .base import SpeakerBias, SpeakerState, StateSites
from .fact import RankedSpeakerBiasConfig, checked_rank
from .lhuc import lhuc_scales
from .registry import register_speaker_bias


@register_speaker_bias("hyper_lhuc", dataclass=RankedSpeakerBiasConfig)
class HyperLHUCSpeakerState(SpeakerBias):
    """LHUC and an input offset generated from r numbers per speaker: a_{s,l} = W_l r_s scales layer l's hidden
    units by 2 sigmoid(a_{s,l}), and U r_s is added to the decoder's input at every step (a hyper-network of
    the speaker code, as the hyper-adapters of Baziotis, Artetxe, Cross & Bhosale, EMNLP 2022, generate
    adapters from a language embedding; LHUC: Swietojanski et al. 2016, Vilar, NAACL 2018).

    Parameters: r * (S + H + D)

    Each speaker owns r numbers (``speaker_codes``, ``[S, r]``, ``--speaker-rank``, read row by
    row): the paper's economy of fact_bias, acting on the decoder's state instead of its logits.
    Shared: W (``layer_maps``, ``[H, r]``, the W_l of every layer stacked, H = sum of d_l) and U
    (``input_map``, ``[D, r]``, D = d_in). W and U start at zero, so every speaker starts as the
    speaker-blind model (2 sigmoid(0) = 1, no offset); the codes then start random, N(0, 1/sqrt(r))
    (standard deviation r^-1/2), for with W = U = 0 and zero codes no gradient would ever reach
    either. The mean speaker is the speaker of the mean code: a is linear in r_s, so its
    amplitudes are the speakers' mean amplitudes and its offset their mean offset, and its scale
    is 2 sigmoid(mean a), not the mean of the speakers' scales. A new speaker starts there too.
    """

    acts_on_output = False
    acts_on_state = True
    speaker_parameter_names = ("speaker_codes",)
    row_sparse_parameter_names = ("speaker_codes",)
    speaker_vector_label = "speaker codes"

    def __init__(self, cfg: RankedSpeakerBiasConfig, num_speakers: int, vocab_size: int):
        super().__init__(cfg, num_speakers, vocab_size)
        self.rank = rank = checked_rank(cfg)
        self.speaker_codes = nn.Parameter(torch.randn(num_speakers, rank) * rank ** -0.5)  # S x r
        self.layer_maps = nn.Parameter(torch.zeros(0, rank))  # H x r, once attached
        self.input_map = nn.Parameter(torch.zeros(0, rank))  # D x r, once attached

    def attach(self, sites: StateSites) -> None:
        fresh = self.sites is None
        super().attach(sites)
        if fresh:
            self.layer_maps = nn.Parameter(torch.zeros(sites.hidden_dim, self.rank))  # H x r
            self.input_map = nn.Parameter(torch.zeros(sites.input_dim, self.rank))  # D x r

    def formula_symbols(self) -> Dict[str, int]:
        sites = self.sites
        return {"H": sites.hidden_dim if sites is not None else 0, "D": sites.input_dim if sites is not None else 0}

    def state_of_rows(self, rows: Dict[str, Tensor]) -> Optional[SpeakerState]:
        codes = rows["speaker_codes"]  # B x r
        amplitudes = codes @ self.layer_maps.t()  # B x H
        assert self.sites is not None  # attached to a decoder's sites
        return SpeakerState(input_offset=codes @ self.input_map.t(),  # B x D
                            layer_scales=lhuc_scales(amplitudes, self.sites.layer_dims))
