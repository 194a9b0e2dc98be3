"""An out-of-tree speaker bias variant: ``sparse_full``, registered from a package of its own.

Pass this folder to fairseq as ``--user-dir``: importing it imports fairseq-speaker (which
registers the task, the models and the built-in variants) and registers the variant below,
which ``--speaker-bias sparse_full`` then puts on any preset. See ../README.md.
"""

from dataclasses import dataclass, field
from typing import Dict, Optional

import torch
from torch import Tensor, nn

import fairseq_speaker  # noqa: F401  (the task, the models, the built-in variants)
from fairseq_speaker.modules.speaker_bias import SpeakerBias, SpeakerBiasConfig, register_speaker_bias
from fairseq_speaker.modules.speaker_bias.base import EncoderOut


@dataclass
class SparseFullConfig(SpeakerBiasConfig):
    # becomes --sparse-l1 on the command line and model.sparse_l1 in hydra configs
    sparse_l1: float = field(
        default=0.01,
        metadata={"help": "sparse_full: weight of the L1 penalty on the speaker biases the batch used"},
    )


@register_speaker_bias("sparse_full", dataclass=SparseFullConfig)
class SparseFullSpeakerBias(SpeakerBias):
    """A vocabulary-sized bias per speaker, pushed by an L1 penalty to move only the words that matter.

    Parameters: S * V

    Like ``full`` (one zero-initialised row of ``weight``, ``[S, V]``, per speaker), plus its
    own regularizer: ``sparse_l1`` times the mean L1 norm of the biases a batch used, so
    that a speaker's bias stays at zero for every word their sentences do not call for.
    """

    speaker_parameter_names = ("weight",)  # row i belongs to speaker i: export, growth, inspection
    speaker_vector_label = "sparse bias vectors"

    def __init__(self, cfg: SparseFullConfig, num_speakers: int, vocab_size: int):
        super().__init__(cfg, num_speakers, vocab_size)
        self.weight = nn.Parameter(torch.zeros(num_speakers, vocab_size))  # S x V

    def lookup(self, speakers: Tensor, encoder_out: EncoderOut = None) -> Tensor:
        return self.weight.index_select(0, speakers)  # B x V

    def mean_bias(self) -> Tensor:
        return self.mean_rows(self.weight).mean(0)  # linear in the rows: cheaper than averaging every speaker's bias

    def aux_losses(self, speakers: Optional[Tensor], bias: Optional[Tensor],
                   encoder_out: EncoderOut = None) -> Dict[str, Tensor]:
        losses = super().aux_losses(speakers, bias, encoder_out)  # the L2 pull of --speaker-l2, if any
        if bias is not None and self.cfg.sparse_l1 > 0:
            losses["sparse_full_l1"] = self.cfg.sparse_l1 * bias.float().abs().sum(dim=1).mean()
        return losses
