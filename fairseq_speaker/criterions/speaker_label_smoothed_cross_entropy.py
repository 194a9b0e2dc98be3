"""Label-smoothed cross-entropy with an optional L2 penalty on the speaker biases."""

from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.logging import metrics


@dataclass
class SpeakerLabelSmoothedCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    speaker_l2: float = field(
        default=0.0,
        metadata={
            "help": "weight of an L2 penalty on the speaker biases applied in the batch: "
            "adds speaker_l2 * mean over sentences of ||b_s||^2 to the per-token (or per-sentence) loss"
        },
    )


@register_criterion(
    "speaker_label_smoothed_cross_entropy", dataclass=SpeakerLabelSmoothedCrossEntropyConfig
)
class SpeakerLabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    """fairseq's label-smoothed NLL, plus ``--speaker-l2`` and the logged norm of the speaker biases.

    The penalty is taken on the bias vectors b_s that the batch used (the decoder
    returns them as ``net_output[1]["speaker_bias"]``), so its cost does not grow
    with the number of speakers. fairseq divides the summed loss by the sample
    size; the penalty is scaled by it so that its weight is independent of the
    batch size. It is added only to reduced losses.
    """

    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0,
                 report_accuracy=False, speaker_l2=0.0):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        self.speaker_l2 = speaker_l2
        self._bias_norm_sum: Optional[torch.Tensor] = None

    def compute_loss(self, model, net_output, sample, reduce=True):
        loss, nll_loss = super().compute_loss(model, net_output, sample, reduce=reduce)
        bias = net_output[1].get("speaker_bias") if len(net_output) > 1 and net_output[1] else None
        self._bias_norm_sum = None
        if bias is not None:
            squared = bias.float().pow(2).sum(dim=1)  # B
            self._bias_norm_sum = squared.detach().sqrt().sum()
            if reduce and self.speaker_l2 > 0:
                sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
                loss = loss + self.speaker_l2 * sample_size * squared.mean()
        return loss, nll_loss

    def forward(self, model, sample, reduce=True):
        loss, sample_size, logging_output = super().forward(model, sample, reduce=reduce)
        if self._bias_norm_sum is not None:
            logging_output["speaker_bias_norm"] = self._bias_norm_sum.data
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        if any("speaker_bias_norm" in log for log in logging_outputs):
            norm_sum = utils.item(sum(log.get("speaker_bias_norm", 0) for log in logging_outputs))
            nsentences = utils.item(sum(log.get("nsentences", 0) for log in logging_outputs))
            # the mean L2 norm of the speaker bias vectors over the sentences seen
            metrics.log_scalar("bias_norm", norm_sum / max(nsentences, 1), nsentences, round=3)
