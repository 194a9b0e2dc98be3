"""The options every speaker bias variant has; a variant's own options dataclass derives from one of these.

Every field becomes a command-line flag (``speaker_l2`` -> ``--speaker-l2``) and a key of the model's hydra config of
every speaker model (:mod:`fairseq_speaker.modules.speaker_bias.registry`).
"""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import FairseqDataclass


@dataclass
class SpeakerBiasConfig(FairseqDataclass):
    """Options every variant has. A variant's own options subclass this."""

    speaker_l2: float = field(
        default=0.0,
        metadata={
            "help": "weight of the L2 pull on the speaker biases the batch used (the default auxiliary loss "
            "of a variant): adds speaker_l2 * mean over sentences of ||bias||^2 to the per-token "
            "(or per-sentence, with --sentence-avg) loss"
        },
    )


@dataclass
class RowSparseConfig(SpeakerBiasConfig):
    """Options of the variants whose speaker tables are updated row by row (``row_sparse_parameter_names``)."""

    speaker_dense_updates: bool = field(
        default=False,
        metadata={"help": "update every row of the speaker table (and its optimizer state) at every update, as a "
                  "dense parameter. By default only the rows of each batch's speakers are updated (with fairseq's "
                  "adam or sgd, as the authors' lookup parameters; a row seen at every update follows the dense "
                  "optimizer exactly)"},
    )
    speaker_lr_scale: Optional[str] = field(
        default=None,
        metadata={"help": "the speaker rows' learning rate, as a multiple of the shared one: 'auto' (the default for "
                  "a new run) divides it by the share of updates in which a speaker is in the batch, with Adam, so "
                  "that a speaker of a few sentences moves as far over training as a shared weight, and gives the "
                  "variant's own shared parameters (fact's shared bias vectors) the rows' mean rate; a number "
                  "multiplies the rows' rate (1: the shared rate, as before 0.5.0). A resumed run keeps the scale "
                  "it started with (its optimizer state records it; runs of 0.4.0 and earlier: 1) unless this is "
                  "given. "
                  "Applies to row-by-row and dense updates, --fp16/--bf16's fp32 copies included"},
    )
