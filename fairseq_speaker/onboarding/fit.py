"""Fitting a speaker's parameters on a frozen network, fast.

A speaker's bias only shifts the logits: ``p(y_t) = softmax(z_t + b)``, where ``z_t`` (the logits
of the speaker-free network) does not depend on the speaker. So the network runs once over the
speaker's sentences (:func:`score_tokens`), and the speaker's parameters are then fitted on
``z`` alone with L-BFGS (:func:`fit_speakers`): a small smooth problem, convex for ``full``,
``fact`` and ``proj``, whose cost per iteration does not involve the network at all.

Keeping ``E_t = exp(z_t - max z_t)`` turns every evaluation into matrix-vector products::

    log sum_v exp(z_tv + b_v) = max z_t + c + log( E_t . exp(b - c) ),   c = max b

so an iteration costs two passes over ``E`` ``[T, V]`` (one for the loss, one for its gradient),
and no exponential of size T x V. The bias ``b`` comes from the variant's own ``forward`` with the
speaker's rows in place of a trained speaker's (``torch.func.functional_call``), so any variant of
the contract is fitted the same way, including those that read the source sentence.

The objective for one speaker with parameter rows ``theta`` is the per-token mean of::

    sum_t -log p(y_t | z_t, b(theta)) + l2 * ||theta - theta_mean||^2

the pull towards the mean speaker's rows (``theta_mean``) keeping words the few sentences never
show where the mean speaker has them. With held-out sentences, the fit stops where their
per-token loss stops improving and keeps the best parameters.

A variant acting on the decoder's state (``lhuc``, ``hyper_lhuc``, ``input``, ``fact+hyper_lhuc``)
changes the logits through the whole decoder: cached logits do not hold. Its speakers are fitted
on :class:`DecoderBatch` es instead (:func:`decoder_batches`): the encoder runs once over the
speaker's sentences and its output is kept; each evaluation of the objective runs the frozen
decoder teacher-forced over them, the speaker's rows put in the variant with
``torch.func.functional_call``, and L-BFGS follows the gradient through the decoder to the rows.
Same objective, same options; only the cost of an iteration differs (a decoder pass and its backward).

An incremental update of such a speaker (one more sentence) need not run the decoder over the
sentences fitted before: the fit keeps a quadratic model of its objective around where it ended
(:class:`Curvature`: the BFGS matrix L-BFGS built from its last steps, the Hessian along the
directions the fit explored), and the update minimizes that model of the old sentences (and of the
prior) plus the new sentences' exact loss: the online Laplace approximation, the way a posterior is
carried from one batch of evidence to the next (MacKay, 1992; Kirkpatrick et al., 2017 keep a diagonal
one). Its cost is the new sentences'.
"""

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from fairseq.data import LanguagePairDataset, data_utils
from torch import Tensor

from fairseq_speaker import fast_paths
from fairseq_speaker.criterions.speaker_label_smoothed_cross_entropy import label_smoothed_nll_loss_from_logits
from fairseq_speaker.data import NO_SPEAKER
from fairseq_speaker.errors import UserError
from fairseq_speaker.modules.speaker_bias import SpeakerBias
from fairseq_speaker.onboarding.prior import SpeakerPrior

Pair = Tuple[Tensor, Tensor]  # source and target token ids, each ending with </s>


@dataclass
class TokenScores:
    """What the frozen network predicts at each target position ``t`` of some sentences, without any
    speaker bias: ``exp_logits`` ``[T, V]`` = ``exp(z_t - shift_t)``, ``shift`` ``[T]`` = ``max z_t``,
    ``target_logit`` ``[T]`` = ``z_t[target_t]``, ``target`` ``[T]``, ``sentence`` ``[T]`` (which of the
    ``source`` rows ``[N, L]`` position t belongs to)."""

    exp_logits: Tensor
    shift: Tensor
    target_logit: Tensor
    target: Tensor
    sentence: Tensor
    source: Tensor
    #: ``[T]`` the mean of ``z_t`` over the vocabulary (what a label-smoothed fit reads)
    mean_logit: Optional[Tensor] = None

    @property
    def num_tokens(self) -> int:
        return int(self.target.numel())

    @property
    def num_sentences(self) -> int:
        return int(self.source.size(0))

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in vars(self).values() if t is not None)


def collated_batches(pairs: Sequence[Pair], source_dictionary, target_dictionary, left_pad_source: bool,
                     left_pad_target: bool, batch_size: int):
    """``(start, batch)``: fairseq's collated batches of ``batch_size`` consecutive pairs, the first being
    ``pairs[start]`` (a batch is sorted by length; ``batch["id"]`` gives each row's place in its chunk)."""
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        dataset = LanguagePairDataset(
            [s for s, _ in chunk], [len(s) for s, _ in chunk], source_dictionary,
            [t for _, t in chunk], [len(t) for _, t in chunk], target_dictionary,
            left_pad_source=left_pad_source, left_pad_target=left_pad_target, shuffle=False)
        yield start, dataset.collater([dataset[i] for i in range(len(chunk))])


@torch.no_grad()
def score_tokens(model, pairs: Sequence[Pair], source_dictionary, target_dictionary,
                 left_pad_source: bool = True, left_pad_target: bool = False,
                 batch_size: int = 64) -> TokenScores:
    """Run the speaker-free network (teacher-forced, eval mode) over ``pairs`` once, ``batch_size``
    sentences at a time; sentence ``i`` of the result is ``pairs[i]``."""
    if not pairs:
        raise ValueError("no sentences to score")
    pad = source_dictionary.pad()
    device = next(model.parameters()).device
    parts, sources = [], [None] * len(pairs)
    for start, batch in collated_batches(pairs, source_dictionary, target_dictionary, left_pad_source,
                                         left_pad_target, batch_size):
        net = batch["net_input"]
        src = net["src_tokens"].to(device)
        speakers = torch.full((src.size(0),), NO_SPEAKER, dtype=torch.long, device=device)
        encoder_out = model.encoder(src, src_lengths=net["src_lengths"].to(device), speakers=speakers)
        features, _ = model.decoder(net["prev_output_tokens"].to(device), encoder_out=encoder_out,
                                    features_only=True)
        target = batch["target"].to(device)
        keep = target.ne(target_dictionary.pad())
        ids = batch["id"].to(device) + start
        rows = ids.unsqueeze(1).expand_as(target)[keep]
        order = torch.argsort(rows, stable=True)  # positions in input order, so that speakers are slices
        rows, y = rows[order], target[keep][order]
        # the logits of real positions only, no speaker bias: positions x V
        z = model.decoder.output_layer(features[keep][order].unsqueeze(0)).squeeze(0).float()
        shift = z.max(dim=1).values
        target_logit = z.gather(1, y.unsqueeze(1)).squeeze(1)
        mean_logit = z.mean(dim=1)
        parts.append((z.sub_(shift.unsqueeze(1)).exp_(), shift, target_logit, y, rows, mean_logit))
        for i, s in zip(ids.tolist(), src):
            sources[i] = s[s.ne(pad)]
    def joined(k: int) -> Tensor:  # no copy of the big matrix when there is one part
        return parts[0][k] if len(parts) == 1 else torch.cat([p[k] for p in parts])

    source = data_utils.collate_tokens(sources, pad, left_pad=left_pad_source)
    return TokenScores(joined(0), joined(1), joined(2), joined(3), joined(4), source, joined(5))


@dataclass
class DecoderBatch:
    """Some sentences of one speaker, ready for the frozen decoder: the encoder's output ``encoder_out`` (every
    sentence said by speaker 0: the fit puts the speaker's rows in row 0), ``prev_output_tokens`` and
    ``target`` ``[N, T]``. ``frozen``: the decoder's parameters outside the speaker variant, detached, so
    that no gradient is computed for the network."""

    decoder: torch.nn.Module
    encoder_out: Dict
    prev_output_tokens: Tensor
    target: Tensor
    pad: int
    frozen: Dict[str, Tensor]
    #: the names in ``frozen`` of the output layer's weight and bias (``x W^T + b``), where the decoder says what
    #: its output layer is (``output_weight_and_bias``): the loss is then made from the real target positions only
    output_names: Optional[Tuple[str, Optional[str]]] = None

    @property
    def num_tokens(self) -> int:
        return int(self.target.ne(self.pad).sum())

    @property
    def num_sentences(self) -> int:
        return int(self.target.size(0))


#: what a fit reads of some sentences: the cached scores (a bias on the logits) or the decoder's input (a state)
Scored = Union[TokenScores, DecoderBatch]


@torch.no_grad()
def decoder_batches(model, pairs: Sequence[Pair], source_dictionary, target_dictionary,
                    left_pad_source: bool = True, left_pad_target: bool = False,
                    batch_size: int = 64) -> List[DecoderBatch]:
    """Run the encoder (eval mode) over ``pairs`` once, ``batch_size`` sentences at a time, and keep what the
    decoder needs to be run teacher-forced over them by the fit."""
    if not pairs:
        raise ValueError("no sentences to score")
    device = next(model.parameters()).device
    decoder = model.decoder
    frozen = {name: p.detach() for name, p in decoder.named_parameters() if not name.startswith("speaker_bias.")}
    output_names = _output_layer_names(decoder)
    out = []
    for start, batch in collated_batches(pairs, source_dictionary, target_dictionary, left_pad_source,
                                         left_pad_target, batch_size):
        net = batch["net_input"]
        src = net["src_tokens"].to(device)
        speakers = torch.zeros(src.size(0), dtype=torch.long, device=device)
        encoder_out = model.encoder(src, src_lengths=net["src_lengths"].to(device), speakers=speakers)
        out.append(DecoderBatch(decoder, encoder_out, net["prev_output_tokens"].to(device),
                                batch["target"].to(device), target_dictionary.pad(), frozen, output_names))
    return out


def _output_layer_names(decoder) -> Optional[Tuple[str, Optional[str]]]:
    """The names among ``decoder``'s parameters of its output layer's weight and bias, or None where the decoder
    does not say that its output layer is ``x W^T + b``."""
    layer = decoder.output_weight_and_bias() if hasattr(decoder, "output_weight_and_bias") else None
    if layer is None:
        return None
    names = {id(p): name for name, p in decoder.named_parameters()}
    weight, out_bias = layer
    if id(weight) not in names or (out_bias is not None and id(out_bias) not in names):
        return None
    return names[id(weight)], (names[id(out_bias)] if out_bias is not None else None)


def _decoder_nll(bias: SpeakerBias, params: Dict[str, Tensor], batch: DecoderBatch) -> Tensor:
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


def split_scores(scores: TokenScores, sizes: Sequence[int]) -> List[TokenScores]:
    """Cut the scores of consecutive groups of sentences (``sizes`` sentences each) apart: views, no copies
    (positions are in sentence order, as :func:`score_tokens` gives them)."""
    bounds = torch.searchsorted(scores.sentence, torch.tensor([0] + list(itertools.accumulate(sizes)),
                                                              device=scores.sentence.device)).tolist()
    out, start = [], 0
    for size, a, b in zip(sizes, bounds, bounds[1:]):
        out.append(TokenScores(scores.exp_logits[a:b], scores.shift[a:b], scores.target_logit[a:b],
                               scores.target[a:b], scores.sentence[a:b] - start, scores.source[start:start + size],
                               None if scores.mean_logit is None else scores.mean_logit[a:b]))
        start += size
    return out


#: the largest l2 taken: far past it a new speaker is the mean speaker whatever their sentences, and beyond float32's
#: range (3.4e38) the fit's arithmetic overflows
MAX_L2 = 1e9


@dataclass
class FitOptions:
    """How speakers are fitted (the options of ``fairseq-speaker-adapt``)."""

    l2: float = 1.0  # weight of the pull towards the mean speaker's rows (in units of one token's loss)
    label_smoothing: float = 0.0  # e of the label-smoothed loss (training's criterion); 0: the likelihood
    max_iter: int = 100  # L-BFGS iterations at most
    check_every: int = 5  # iterations between two looks at the held-out loss
    patience: int = 2  # looks without improvement before stopping
    tolerance: float = 1e-6  # stop when the per-token loss changes less than this
    #: the same through the decoder, where each evaluation is a pass of the network: from 1e-6 to 1e-4, new speakers
    #: of the styles corpus took a median of 6 L-BFGS iterations instead of 9 at n = 10 and were translated as well
    #: at n = 1 to 30 (docs/onboarding.md, "How fast")
    decoder_tolerance: float = 1e-4
    gradient_tolerance: float = 1e-7  # stop when no gradient entry is larger than this

    def __post_init__(self):
        if not (math.isfinite(self.l2) and 0 <= self.l2 <= MAX_L2):
            raise UserError(f"the fit's l2 (--adapt-l2) must be a number from 0 to {MAX_L2:g} (at {MAX_L2:g} a new "
                            f"speaker is already the mean speaker), got {self.l2}")
        for name in ("max_iter", "check_every", "patience"):
            if int(getattr(self, name)) < 1:
                raise UserError(f"the fit's {name} must be at least 1, got {getattr(self, name)}")


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


def _nll(bias: SpeakerBias, params: Dict[str, Tensor], scores: Scored, smoothing: float = 0.0) -> Tensor:
    """Summed negative log-likelihood of ``scores``' targets under the bias of rows ``params``; with
    ``smoothing`` e, the label-smoothed loss of training, (1 - e) NLL + e * (mean over the vocabulary of
    -log p), which keeps a bias from pushing words the sentences never show without bound."""
    if isinstance(scores, DecoderBatch):
        return _decoder_nll(bias, params, scores)
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
    return sum(_nll(bias, params, c) for c in chunks)


@dataclass
class Curvature:
    """A quadratic model of a speaker's fitted objective (the per-token loss of their sentences and the prior)
    around the rows the fit ended at, ``center``: ``tokens * (loss + 1/2 d^T H d)``, d the rows' change.
    ``hessian``: the BFGS matrix of the fit's L-BFGS steps, over the rows flattened in ``center``'s order."""

    center: Dict[str, Tensor]
    hessian: Tensor  # P x P, float64
    tokens: int
    loss: float

    def penalty(self, rows: Dict[str, Tensor]) -> Tensor:
        """The summed (not per-token) model of the old objective at ``rows``."""
        d = torch.cat([(rows[k].double() - v.double()).reshape(-1) for k, v in self.center.items()])
        return self.tokens * (self.loss + 0.5 * d @ (self.hessian @ d))

    @staticmethod
    def from_lbfgs(state: dict, center: Dict[str, Tensor], tokens: int, loss: float) -> Optional["Curvature"]:
        """The BFGS matrix of L-BFGS's kept steps ``s`` and gradient changes ``y`` (torch's ``old_stps``,
        ``old_dirs``), from its scaling ``H_diag`` (B_0 = I / H_diag); None if the fit took no step."""
        steps, changes = state.get("old_stps") or [], state.get("old_dirs") or []
        if not steps:
            return None
        size = steps[0].numel()
        hessian = torch.eye(size, dtype=torch.float64) / float(state["H_diag"])
        for s, y in zip(steps, changes):
            s, y = s.double(), y.double()
            bs = hessian @ s
            hessian = hessian - torch.outer(bs, bs) / (s @ bs) + torch.outer(y, y) / (y @ s)
        if not bool(torch.isfinite(hessian).all()):
            return None
        return Curvature({k: v.detach().double().clone() for k, v in center.items()}, hessian, tokens, loss)


def _objective(bias, shared, rows, prior, problems, l2, smoothing: float = 0.0,
               curvatures: Optional[Sequence[Optional[Curvature]]] = None) -> Tensor:
    loss: Union[float, Tensor] = 0.0
    tokens = 0
    for i, (speaker_rows, speaker_prior, chunks) in enumerate(zip(rows, prior, problems)):
        params = {**shared, **speaker_rows}
        for scores in chunks:
            loss = loss + _nll(bias, params, scores, smoothing)
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
                total += sum(float(_nll(bias, {**shared, **r}, s)) for s in h)
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
