"""The data term of a speaker's fit: the negative log-likelihood of their scored sentences under their rows.

On cached logits (:class:`~fairseq_speaker.onboarding.scoring.TokenScores`), keeping ``E_t = exp(z_t - max z_t)``
turns every evaluation into matrix-vector products::

    log sum_v exp(z_tv + b_v) = max z_t + c + log( E_t . exp(b - c) ),   c = max b

so an evaluation costs two passes over ``E`` ``[T, V]`` (one for the loss, one for its gradient), and no
exponential of size T x V. The bias ``b`` comes from the variant's own ``forward`` with the speaker's rows in
place of a trained speaker's (``torch.func.functional_call``), so any variant of the contract is fitted the
same way, including those that read the source sentence (:func:`scored_nll`).

Through the decoder (:class:`~fairseq_speaker.onboarding.scoring.DecoderBatch`, a variant acting on the
decoder's state), each evaluation runs the frozen decoder teacher-forced over the sentences, the speaker's rows
put in the variant with ``torch.func.functional_call``, and the gradient follows through the decoder to the
rows (:func:`decoder_nll`).
"""

from typing import Dict, Sequence, Union

import torch
from torch import Tensor

from fairseq_speaker import fast_paths
from fairseq_speaker.criterions.speaker_label_smoothed_cross_entropy import label_smoothed_nll_loss_from_logits
from fairseq_speaker.modules.speaker_bias import SpeakerBias
from fairseq_speaker.onboarding.scoring import DecoderBatch, Scored


def decoder_nll(bias: SpeakerBias, params: Dict[str, Tensor], batch: DecoderBatch) -> Tensor:
    """Summed negative log-likelihood of ``batch``'s targets, the decoder run with the variant's parameters
    ``params`` (the speaker's rows: row 0).

    With the fast paths on and a decoder that says what its output layer is, the output layer runs on the real
    target positions only (not on padding) and the loss is made from the logits with one vocabulary-sized buffer
    (:func:`~fairseq_speaker.criterions.speaker_label_smoothed_cross_entropy.label_smoothed_nll_loss_from_logits`):
    the output layer is most of an evaluation's cost at a real vocabulary. The same loss and gradient as the
    plain path (a unit test compares them)."""
    weights = {**batch.frozen, **{"speaker_bias." + name: value for name, value in params.items()}}
    if batch.output_names is not None and fast_paths.enabled():
        features, extra = torch.func.functional_call(batch.decoder, weights, (batch.prev_output_tokens,),
                                                     {"encoder_out": batch.encoder_out, "features_only": True})
        keep = batch.target.ne(batch.pad)
        weight_name, bias_name = batch.output_names
        weight = weights[weight_name]
        out_bias = weights[bias_name] if bias_name is not None else None
        speaker_bias = extra.get("speaker_bias")  # [N, V] or None
        if speaker_bias is not None and not bias.reads_source:  # every sentence is speaker 0's: one row for all
            row = speaker_bias[0].to(weight)
            out_bias, speaker_bias = (row if out_bias is None else out_bias + row), None
        logits = torch.nn.functional.linear(features[keep], weight, out_bias)
        if speaker_bias is not None:  # a bias that reads the source: each position gets its sentence's row
            sentence = torch.arange(keep.size(0), device=keep.device).unsqueeze(1).expand_as(keep)[keep]
            logits = logits + speaker_bias.index_select(0, sentence).to(logits)
        loss, _ = label_smoothed_nll_loss_from_logits(logits, batch.target[keep], 0.0, batch.pad)
        return loss
    logits, _ = torch.func.functional_call(batch.decoder, weights, (batch.prev_output_tokens,),
                                           {"encoder_out": batch.encoder_out})
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    nll = -lprobs.gather(2, batch.target.unsqueeze(2)).squeeze(2)
    return nll[batch.target.ne(batch.pad)].sum()


def scored_nll(bias: SpeakerBias, params: Dict[str, Tensor], scores: Scored, smoothing: float = 0.0) -> Tensor:
    """Summed negative log-likelihood of ``scores``' targets under the bias of rows ``params``; with
    ``smoothing`` e, the label-smoothed loss of training, (1 - e) NLL + e * (mean over the vocabulary of
    -log p), which keeps a bias from pushing words the sentences never show without bound."""
    if isinstance(scores, DecoderBatch):
        return decoder_nll(bias, params, scores)
    if bias.reads_source:
        ids = torch.zeros(scores.num_sentences, dtype=torch.long, device=scores.target.device)
        b = torch.func.functional_call(bias, params, (ids, {"source_tokens": [scores.source]}))
    else:
        ids = torch.zeros(1, dtype=torch.long, device=scores.target.device)
        b = torch.func.functional_call(bias, params, (ids, None))
    b = b.float()
    c = b.detach().max()
    w = torch.exp(b - c)
    if b.size(0) == 1:
        total = scores.exp_logits @ w[0]  # T
        target_bias = b[0].index_select(0, scores.target)
    else:
        total = (scores.exp_logits * w.index_select(0, scores.sentence)).sum(1)
        target_bias = b[scores.sentence, scores.target]
    log_z = torch.log(total) + c + scores.shift
    nll = (log_z - scores.target_logit - target_bias).sum()
    if not smoothing:
        return nll
    mean_bias = b.mean(1)[0] if b.size(0) == 1 else b.mean(1).index_select(0, scores.sentence)
    uniform = (log_z - scores.mean_logit - mean_bias).sum()
    return (1 - smoothing) * nll + smoothing * uniform


def data_nll(bias: SpeakerBias, rows: Dict[str, Tensor], chunks: Sequence[Scored]) -> Union[Tensor, float]:
    """Summed negative log-likelihood of a speaker's scored sentences under their ``rows`` (the fit's data term; 0
    without sentences)."""
    params = {**dict(bias.shared_parameters()), **rows}
    return sum(scored_nll(bias, params, c) for c in chunks)
