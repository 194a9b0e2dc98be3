"""Label-smoothed cross-entropy plus the speaker bias variant's own regularizers."""

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch
from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.logging import metrics

from fairseq_speaker import fast_paths
from fairseq_speaker.errors import UserError
from fairseq_speaker.fairseq_patches import uses_default_log_softmax

#: logging-output keys of the variants' regularizers: "speaker_aux:<name>"
AUX_PREFIX = "speaker_aux:"


@dataclass
class SpeakerLabelSmoothedCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    speaker_unigram: float = field(
        default=0.0,
        metadata={"help": "weight of the speakers' unigram loss: each sentence's target words scored as a bag by the "
                  "softmax of its speaker's output bias plus the corpus's log word frequencies (the target "
                  "dictionary's counts), added to the loss per target token. The bias becomes a model of the words "
                  "each speaker says, pooled over the speakers by a low-rank variant (fact), so that it also prefers "
                  "a speaker's words where the decoder commits a step earlier (an article agreeing with the noun). "
                  "0: off. Needs a variant that acts on the logits"},
    )


def unigram_loss(bias: torch.Tensor, target: torch.Tensor, log_frequencies: torch.Tensor,
                 nspecial: int) -> torch.Tensor:
    """The speakers' unigram loss of a batch, summed over its target words: ``-sum_t log softmax(bias_b +
    log_frequencies)[y_bt]`` over the words (the ``nspecial`` first symbols, padding and the end of sentence, are
    neither scored nor in the softmax: a sentence's end is no word a speaker chooses, and its count is not kept).
    ``bias``: ``[B, V]``, the speakers' output bias; ``target``: ``[B, T]``."""
    logits = bias.float() + log_frequencies.to(bias.device)  # B x V
    log_probs = torch.log_softmax(logits[:, nspecial:], dim=-1)  # B x (V - nspecial)
    words = target.ge(nspecial)
    return -(log_probs.gather(1, (target - nspecial).clamp(min=0)) * words).sum()


@register_criterion("speaker_label_smoothed_cross_entropy", dataclass=SpeakerLabelSmoothedCrossEntropyConfig)
class SpeakerLabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    """fairseq's label-smoothed NLL, plus the regularizers of the model's speaker bias variant.

    The decoder returns the variant's regularizers for the batch in
    ``net_output[1]["speaker_aux_losses"]`` (name -> mean over the batch's sentences;
    the default one is the L2 pull of ``--speaker-l2``). Each is multiplied by the sample
    size, so that its weight does not depend on the batch size (fairseq divides the summed
    loss by the sample size), added to reduced losses and logged under its name (``fact_l2``).
    ``bias_norm`` logs the mean L2 norm of the speaker biases the batch used.

    With the fast paths on (:mod:`fairseq_speaker.fast_paths`) and a model whose log-probabilities are
    fairseq's default ``log_softmax``, the loss is computed from the logits in one piece
    (:func:`label_smoothed_nll_loss_from_logits`): fairseq's losses and gradients, one vocabulary-sized
    buffer instead of four.
    """

    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0, report_accuracy=False,
                 speaker_unigram=0.0):
        if not 0.0 <= label_smoothing < 1.0:  # NaN included: above 1 the reference's weight is negative
            raise UserError(f"--label-smoothing must be a number from 0 to below 1 (the share of the probability "
                            f"spread over the vocabulary), got {label_smoothing}")
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        self._logged: Dict[str, torch.Tensor] = {}
        if not speaker_unigram >= 0 or speaker_unigram == float("inf"):
            raise UserError(f"--speaker-unigram must be a number >= 0, got {speaker_unigram}")
        self.speaker_unigram = float(speaker_unigram)
        self._log_frequencies: Optional[torch.Tensor] = None

    def compute_loss(self, model, net_output, sample, reduce=True):
        if fast_paths.enabled() and reduce and self.ignore_prefix_size == 0 and uses_default_log_softmax(model):
            target = model.get_targets(sample, net_output).reshape(-1)
            loss, nll_loss = label_smoothed_nll_loss_from_logits(net_output[0], target, self.eps, self.padding_idx)
        else:
            loss, nll_loss = super().compute_loss(model, net_output, sample, reduce=reduce)
        extra = net_output[1] if len(net_output) > 1 and isinstance(net_output[1], dict) else {}
        self._logged = {}
        bias: Optional[torch.Tensor] = extra.get("speaker_bias")
        if bias is not None:
            self._logged["speaker_bias_norm"] = bias.detach().float().norm(dim=1).sum()
        if self.speaker_unigram and bias is None:
            variant = getattr(getattr(getattr(model, "decoder", None), "speaker_bias", None), "name", None)
            raise UserError(f"--speaker-unigram {self.speaker_unigram:g} trains the speakers' bias on the logits, and "
                            f"this model has none (speaker bias variant: {variant or 'none'}): use a variant that acts "
                            f"on the logits (fact, full, fact+hyper_lhuc: lstm_speaker, ...) or leave out "
                            f"--speaker-unigram")
        if self.speaker_unigram and bias is not None and reduce:
            term = self.speaker_unigram * unigram_loss(bias, model.get_targets(sample, net_output),
                                                       self.log_frequencies(bias.size(1)),
                                                       self.task.target_dictionary.nspecial)
            loss = loss + term
            self._logged[AUX_PREFIX + "speaker_unigram"] = term.detach()
        if reduce:
            sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
            for name, value in (extra.get("speaker_aux_losses") or {}).items():
                term = sample_size * value
                loss = loss + term
                self._logged[AUX_PREFIX + name] = term.detach()
        return loss, nll_loss

    def log_frequencies(self, vocab: int) -> torch.Tensor:
        """The log of the target dictionary's word counts ``[vocab]`` (at least 1 each; words the dictionary gained
        after counting, a speaker token's, count 1)."""
        if self._log_frequencies is None or self._log_frequencies.numel() != vocab:
            counts = list(self.task.target_dictionary.count)[:vocab]
            counts += [1] * (vocab - len(counts))
            self._log_frequencies = torch.tensor(counts, dtype=torch.float).clamp(min=1).log()
        return self._log_frequencies

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


def label_smoothed_nll_loss_from_logits(logits: torch.Tensor, target: torch.Tensor, epsilon: float,
                                        ignore_index: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """fairseq's ``label_smoothed_nll_loss(log_softmax(logits), target, epsilon, ignore_index)``, summed,
    with one vocabulary-sized buffer instead of four: the log-probabilities, which the backward pass
    turns in place into the gradient (softmax minus the smoothed target). Returns ``(loss, nll_loss)``;
    like fairseq's, only ``loss`` is meant for ``backward``."""
    return _LabelSmoothedNLL.apply(logits.reshape(-1, logits.size(-1)), target, epsilon, ignore_index)


class _LabelSmoothedNLL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, epsilon, ignore_index):
        lprobs = torch.log_softmax(logits.float(), dim=-1)  # the one [tokens, V] buffer
        keep = target.ne(ignore_index)
        nll = -(lprobs.gather(1, target.unsqueeze(1)).squeeze(1) * keep).sum()
        smooth = -(lprobs.sum(-1) * keep).sum()
        eps_i = epsilon / (lprobs.size(-1) - 1)
        ctx.save_for_backward(target, keep)
        ctx.lprobs, ctx.epsilon, ctx.eps_i, ctx.dtype = lprobs, epsilon, eps_i, logits.dtype
        ctx.mark_non_differentiable(nll)
        return (1.0 - epsilon - eps_i) * nll + eps_i * smooth, nll

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        if ctx.lprobs is None:
            raise RuntimeError("the fused label-smoothed loss frees its buffer in backward: backward runs once "
                               "(no retain_graph)")
        target, keep = ctx.saved_tensors
        grad, ctx.lprobs = ctx.lprobs, None
        vocab, eps_i = grad.size(-1), ctx.eps_i
        nll_weight = 1.0 - ctx.epsilon - eps_i
        # d loss / d logits = nll_weight (p - onehot) + eps_i (V p - 1), rows of padding zero
        grad.exp_().mul_(nll_weight + eps_i * vocab).sub_(eps_i)
        grad.scatter_add_(1, target.unsqueeze(1), grad.new_full((grad.size(0), 1), -nll_weight))
        grad.mul_(keep.unsqueeze(1).to(grad) * grad_loss)
        return grad.to(ctx.dtype), None, None, None
