"""Fitting a speaker's parameters on a frozen network, fast: the solver.

The network runs once over the speaker's sentences (:mod:`fairseq_speaker.onboarding.scoring`), and the speaker's
parameters are then fitted with L-BFGS (:func:`fit_speakers`). For a variant on the logits the fit reads the cached
logits alone: a small smooth problem, convex for ``full``, ``fact`` and ``proj``, whose cost per iteration does not
involve the network at all; for a variant acting on the decoder's state each evaluation runs the frozen decoder
(:mod:`fairseq_speaker.onboarding.fit_loss`). Same objective, same options
(:mod:`fairseq_speaker.onboarding.fit_options`); only the cost of an iteration differs (a decoder pass and its
backward).

The objective for one speaker with parameter rows ``theta`` is the per-token mean of::

    sum_t -log p(y_t | z_t, b(theta)) + l2 * ||theta - theta_mean||^2

the pull towards the mean speaker's rows (``theta_mean``) keeping words the few sentences never
show where the mean speaker has them (or, under a :class:`~fairseq_speaker.onboarding.prior.SpeakerPrior`, the
mixture's own penalty). With held-out sentences, the fit stops where their per-token loss stops improving and
keeps the best parameters. An incremental update through the decoder replaces the sentences fitted before (and
the prior) by the quadratic model their fit left (:class:`~fairseq_speaker.onboarding.curvature.Curvature`).
"""

import math
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from fairseq_speaker.modules.speaker_bias import SpeakerBias
from fairseq_speaker.onboarding.curvature import Curvature
from fairseq_speaker.onboarding.fit_loss import scored_nll
from fairseq_speaker.onboarding.fit_options import FitOptions
from fairseq_speaker.onboarding.prior import SpeakerPrior
from fairseq_speaker.onboarding.scoring import DecoderBatch, Scored


@dataclass
class FitReport:
    """How one fit went: per-token losses before and after, iterations, held-out loss, seconds."""

    tokens: int
    loss_before: float
    loss_after: float
    iterations: int
    seconds: float
    heldout_before: Optional[float] = None
    heldout_after: Optional[float] = None
    heldout_tokens: int = 0
    extra: Dict[str, float] = field(default_factory=dict)
    #: evaluations of the objective (and its gradient): what a fit through the decoder costs, one decoder pass each
    evaluations: int = 0


def _objective(bias, shared, rows, prior, problems, l2, smoothing: float = 0.0,
               curvatures: Optional[Sequence[Optional[Curvature]]] = None) -> Tensor:
    loss: Union[float, Tensor] = 0.0
    tokens = 0
    for i, (speaker_rows, speaker_prior, chunks) in enumerate(zip(rows, prior, problems)):
        params = {**shared, **speaker_rows}
        for scores in chunks:
            loss = loss + scored_nll(bias, params, scores, smoothing)
            tokens += scores.num_tokens
        curvature = curvatures[i] if curvatures is not None else None
        if curvature is not None:  # the sentences fitted before and the prior, as the last fit left them
            assert isinstance(loss, Tensor)  # every speaker fitted has sentences
            loss = loss + curvature.penalty(speaker_rows).to(loss.dtype)
            tokens += curvature.tokens
            continue
        if isinstance(speaker_prior, SpeakerPrior):  # a mixture over kinds of speakers: its own precision
            loss = loss + speaker_prior.penalty(speaker_rows)
            continue
        for name, value in speaker_rows.items():
            loss = loss + l2 * (value - speaker_prior[name]).pow(2).sum()
    return torch.as_tensor(loss / max(tokens, 1))


def fit_speakers(bias: SpeakerBias, problems: Sequence[Sequence[Scored]], options: FitOptions,
                 init: Optional[Sequence[Dict[str, Tensor]]] = None,
                 heldout: Optional[Sequence[Sequence[Scored]]] = None,
                 fit_shared: bool = False, prior: Optional[Sequence[Union[Dict[str, Tensor], SpeakerPrior]]] = None,
                 curvatures: Optional[Sequence[Optional[Curvature]]] = None,
                 curvature_out: Optional[List[Optional[Curvature]]] = None,
                 ) -> Tuple[List[Dict[str, Tensor]], Dict[str, Tensor], FitReport]:
    """Fit the rows of ``len(problems)`` speakers together (each problem: one speaker's scored
    sentences, as chunks: :class:`TokenScores` for a variant on the logits, :class:`DecoderBatch` es for one
    acting on the decoder's state), starting from ``init`` (default: the mean speaker), pulled towards
    ``prior`` (default: the mean speaker; per speaker, rows to be pulled towards with ``options.l2``, or a
    :class:`~fairseq_speaker.onboarding.prior.SpeakerPrior`, a mixture with its own precision). With
    ``fit_shared``, the variant's shared parameters are fitted too.

    Returns the rows (name -> ``[1, ...]``) of each speaker, the shared parameters (fitted or not),
    and a report. Nothing in ``bias`` is changed.
    """
    start = time.perf_counter()
    if init is None or prior is None:  # the mean of a large table costs a pass over it: only when needed
        mean = {name: row.detach().float() for name, row in bias.new_speaker_rows(1, "mean").items()}
    if init is None:
        init = [mean] * len(problems)
    rows = [{name: value.detach().float().clone().requires_grad_(True) for name, value in r.items()} for r in init]
    shared = {name: p.detach().clone().requires_grad_(fit_shared) for name, p in bias.shared_parameters().items()}
    if prior is None:
        prior = [mean] * len(problems)
    prior = [p if isinstance(p, SpeakerPrior) else {k: v.detach().float() for k, v in p.items()} for p in prior]
    variables = [v for r in rows for v in r.values()] + (list(shared.values()) if fit_shared else [])
    flat = [c for chunks in problems for c in chunks]
    if not flat or sum(c.num_tokens for c in flat) == 0:
        raise ValueError("no target words to fit on")
    held = [list(h) for h in heldout] if heldout is not None else None

    def heldout_loss() -> Optional[float]:
        if not held or not any(held):
            return None
        tokens = sum(s.num_tokens for h in held for s in h)
        total = 0.0
        with torch.no_grad():
            for r, h in zip(rows, held):
                total += sum(float(scored_nll(bias, {**shared, **r}, s)) for s in h)
        return total / max(tokens, 1)

    def objective() -> Tensor:
        return _objective(bias, shared, rows, prior, problems, options.l2, options.label_smoothing, curvatures)

    held_before = heldout_loss()
    losses: List[float] = []  # the first is the loss at the start: no pass of its own
    through_decoder = any(isinstance(c, DecoderBatch) for c in flat)
    optimizer = torch.optim.LBFGS(variables, lr=1.0, max_iter=options.max_iter if held is None else options.check_every,
                                  tolerance_grad=options.gradient_tolerance,
                                  tolerance_change=options.decoder_tolerance if through_decoder else options.tolerance,
                                  history_size=10, line_search_fn="strong_wolfe")

    last: Dict[str, Any] = {}  # through the decoder, the last evaluation: its loss and the variables it was made at

    def closure():
        optimizer.zero_grad()
        loss = objective()
        loss.backward()
        losses.append(float(loss.detach()))
        if through_decoder:  # on cached logits a pass costs less than copying a large table at every evaluation
            last["loss"], last["at"] = losses[-1], [v.detach().clone() for v in variables]
        return loss

    best, best_held, since_best, iterations = None, held_before, 0, 0
    while True:
        optimizer.step(closure)
        done = optimizer.state[optimizer.param_groups[0]["params"][0]]["n_iter"]
        progressed = done > iterations
        iterations = done
        if held is None:
            break
        current = heldout_loss()
        if current is None or best_held is None or current < best_held - 1e-9:
            best_held, since_best = current, 0
            best = ([{k: v.detach().clone() for k, v in r.items()} for r in rows],
                    {k: v.detach().clone() for k, v in shared.items()})
        else:
            since_best += 1
        if since_best >= options.patience or iterations >= options.max_iter or not progressed:
            break
    if held is not None:
        if best is None:  # the held-out loss never improved on the mean speaker: keep the start
            best = ([{k: v.detach().clone() for k, v in r.items()} for r in init],
                    {k: p.detach().clone() for k, p in bias.shared_parameters().items()})
        for r, b in zip(rows, best[0]):
            for k in r:
                r[k] = b[k]
        shared = best[1]
    if held is None and last and all(torch.equal(v, w) for v, w in zip(variables, last["at"])):
        after = last["loss"]  # the line search ended at its last evaluation: no pass of its own (through the decoder)
    else:
        with torch.no_grad():
            after = float(objective())
    report = FitReport(sum(c.num_tokens for c in flat), losses[0], after, iterations, time.perf_counter() - start,
                       held_before, heldout_loss() if held is not None else None,
                       sum(s.num_tokens for h in (held or []) for s in h), evaluations=len(losses))
    if curvature_out is not None:
        single = len(rows) == 1 and held is None and not fit_shared
        tokens = sum(c.num_tokens for c in flat) + sum(c.tokens for c in curvatures or () if c is not None)
        curvature_out.append(Curvature.from_lbfgs(optimizer.state[optimizer.param_groups[0]["params"][0]],
                                                  rows[0], tokens, after) if single else None)
    dtype = {name: p.dtype for name, p in bias.speaker_parameters().items()}
    out_rows = [{k: v.detach().to(dtype[k]) for k, v in r.items()} for r in rows]
    out_shared = {k: v.detach().to(bias.get_parameter(k).dtype) for k, v in shared.items()}
    if not all(math.isfinite(float(v.float().abs().max())) for r in out_rows for v in r.values() if v.numel()):
        raise FloatingPointError("the fit diverged (non-finite parameters): its pull toward the mean speaker (adapt's "
                                 "--adapt-l2, refit's --l2 and --style-precision) is too weak to hold the rows, or so "
                                 "strong that its arithmetic overflows; try a value nearer 1")
    return out_rows, out_shared, report
