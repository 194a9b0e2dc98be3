"""The memory of the speakers' words fused into a generation step (:mod:`fairseq_speaker.modules.speaker_words`, its
module text: "At each generation step"): each hypothesis's bias row added to the words within ``window`` nats of its
most probable one (:func:`rerank`), to the step's log-probabilities or, renormalized, to its logits
(:func:`step_log_probs`). :func:`fused` is the one masked sum, which the calibration of the weight
(:mod:`fairseq_speaker.onboarding.calibrate`) applies too.

Its siblings: the options (:mod:`~fairseq_speaker.modules.words_options`) and the estimate of a speaker's bias row
(:mod:`~fairseq_speaker.modules.words_estimate`); :class:`~fairseq_speaker.modules.speaker_words.SpeakerWords` calls
these with its rows.
"""

from typing import Optional

import torch
from torch import Tensor

from fairseq_speaker.modules.words_options import WordOptions

#: re-ranking finds the words within the window among each hypothesis's FEW_NEAR best (one top-k, a trained model's
#: step), else by a mask over the vocabulary, and adds the bias by the words' indices when fewer than 1 / DENSE_SHARE
#: of a step's words are within the window, as one masked dense sum otherwise (a random network's flat steps)
FEW_NEAR = 16
DENSE_SHARE = 16


def step_log_probs(log_probs: Tensor, rows: Tensor, index: Optional[Tensor], options: WordOptions) -> Tensor:
    """A generation step's log-probabilities ``[B, V]`` (the network's, as fairseq's generator computes them) with
    each hypothesis's bias (:func:`rerank`; ``rows`` and ``index`` as there): a new float32 tensor, as fairseq's
    own log-probabilities are, summed by the beam
    (:class:`fairseq_speaker.sequence_generator.SpeakerWordsEnsemble`).

    With ``add_to`` ``log_probs`` the bias is added to the step's log-probabilities, so a hypothesis's score is
    the sum over its words of the network's log-probability and the speaker's bias (shallow fusion: Gulcehre et
    al., 2015, with the speaker's log rate ratio as the second model): "le vélo" keeps vélo's bias against "la
    bécane", although after "le" the network gives vélo all the probability. With ``logits`` the step is
    renormalized after the bias (as adding it to the logits would), which then only chooses among the words of
    one step."""
    scores = rerank(log_probs.float().unsqueeze(1).clone(), rows, index, options.window, options.floor).squeeze(1)
    return torch.log_softmax(scores, dim=-1) if options.add_to == "logits" else scores


def rerank(logits: Tensor, rows: Tensor, index: Optional[Tensor], window: float, floor: bool) -> Tensor:
    """``logits`` ``[B, 1, V]`` with each hypothesis's row of ``rows`` added to its words within ``window`` nats of
    its most probable one: ``rows`` ``[B, V]``, or ``[R, V]`` and ``index`` ``[B]`` the row of each hypothesis
    (one row per speaker of a batch, not one per hypothesis); with ``floor``, a near word is kept at or above the
    window's edge. ``logits`` may be changed in place.

    Within ``window`` nats of the best log-probability is within ``window`` of the best logit (the normaliser is
    the same for a hypothesis's words), so no softmax is taken. Where few words are near (a trained model's step:
    a few per hypothesis, found among its best ``FEW_NEAR``) the bias is added to those only, by their indices;
    where many are (a random network's flat steps: all of them), as one masked ``B x V`` sum."""
    scores = logits.float()
    if scores.size(-1) > FEW_NEAR:  # a trained model's step: the words within the window are among the best few
        top, words = scores.topk(FEW_NEAR, dim=-1)  # [B, 1, FEW_NEAR], best first
        if not bool((top[..., -1] >= top[..., 0] - window).any()):  # every hypothesis's near words are there
            hypotheses, _, rank = (top >= top[..., :1] - window).nonzero(as_tuple=True)
            words = words[hypotheses, 0, rank]
            row = hypotheses if index is None else index.index_select(0, hypotheses)
            added = rows[row, words].float()
            if floor:  # kept at the window's edge: top - window - score <= added
                edge = top[hypotheses, 0, 0] - window
                added = torch.maximum(added, edge - top[hypotheses, 0, rank])
            logits[:, 0].index_put_((hypotheses, words), added.to(logits.dtype), accumulate=True)
            return logits
    best = scores.max(dim=-1, keepdim=True).values
    mask = scores >= best - window
    if int(mask.count_nonzero()) * DENSE_SHARE > mask.numel() or floor:
        gathered = rows if index is None else rows.index_select(0, index)
        return logits.copy_(fused(scores, gathered.unsqueeze(1), best, mask, window, floor))
    near = mask.nonzero(as_tuple=True)
    hypotheses, words = near[0], near[2]
    row = hypotheses if index is None else index.index_select(0, hypotheses)
    logits.index_put_(near, rows[row, words].to(logits.dtype), accumulate=True)
    return logits


def fused(scores: Tensor, bias: Tensor, best: Tensor, near: Tensor, window: float, floor: bool) -> Tensor:
    """``scores`` (float) with ``bias`` added to the ``near`` words, those within ``window`` of the ``best`` score (the
    last dimension's maximum, kept); with ``floor``, a near word is kept at or above ``best - window``. A new tensor."""
    out = scores + bias.to(scores.dtype) * near
    if floor:
        out = torch.where(near, torch.maximum(out, best - window), out)
    return out
