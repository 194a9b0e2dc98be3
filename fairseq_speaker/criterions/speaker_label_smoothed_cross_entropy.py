"""Label-smoothed cross-entropy plus the speaker bias variant's own regularizers."""

from typing import Dict, Optional

import torch
from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.logging import metrics

#: logging-output keys of the variants' regularizers: "speaker_aux:<name>"
AUX_PREFIX = "speaker_aux:"


@register_criterion("speaker_label_smoothed_cross_entropy", dataclass=LabelSmoothedCrossEntropyCriterionConfig)
class SpeakerLabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    """fairseq's label-smoothed NLL, plus the regularizers of the model's speaker bias variant.

    The decoder returns the variant's regularizers for the batch in
    ``net_output[1]["speaker_aux_losses"]`` (name -> mean over the batch's sentences;
    the default one is the L2 pull of ``--speaker-l2``). Each is multiplied by the sample
    size, so that its weight does not depend on the batch size (fairseq divides the summed
    loss by the sample size), added to reduced losses and logged under its name (``fact_l2``).
    ``bias_norm`` logs the mean L2 norm of the speaker biases the batch used.
    """

    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0, report_accuracy=False):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        self._logged: Dict[str, torch.Tensor] = {}

    def compute_loss(self, model, net_output, sample, reduce=True):
        loss, nll_loss = super().compute_loss(model, net_output, sample, reduce=reduce)
        extra = net_output[1] if len(net_output) > 1 and isinstance(net_output[1], dict) else {}
        self._logged = {}
        bias: Optional[torch.Tensor] = extra.get("speaker_bias")
        if bias is not None:
            self._logged["speaker_bias_norm"] = bias.detach().float().norm(dim=1).sum()
        if reduce:
            sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
            for name, value in (extra.get("speaker_aux_losses") or {}).items():
                term = sample_size * value
                loss = loss + term
                self._logged[AUX_PREFIX + name] = term.detach()
        return loss, nll_loss

    def forward(self, model, sample, reduce=True):
        loss, sample_size, logging_output = super().forward(model, sample, reduce=reduce)
        for key, value in self._logged.items():
            logging_output[key] = value.data
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        if any("speaker_bias_norm" in log for log in logging_outputs):
            norm_sum = utils.item(sum(log.get("speaker_bias_norm", 0) for log in logging_outputs))
            nsentences = utils.item(sum(log.get("nsentences", 0) for log in logging_outputs))
            # the mean L2 norm of the speaker bias vectors over the sentences seen
            metrics.log_scalar("bias_norm", norm_sum / max(nsentences, 1), nsentences, round=3)
        names = sorted({key for log in logging_outputs for key in log if key.startswith(AUX_PREFIX)})
        if names:
            sample_size = utils.item(sum(log.get("sample_size", 0) for log in logging_outputs))
            for key in names:
                total = utils.item(sum(log.get(key, 0) for log in logging_outputs))
                metrics.log_scalar(key[len(AUX_PREFIX):], total / max(sample_size, 1), sample_size, round=4)
