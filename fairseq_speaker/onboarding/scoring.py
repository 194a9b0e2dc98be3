"""What a fit reads of a speaker's sentences: the frozen network run over them once.

A speaker's bias only shifts the logits, ``p(y_t) = softmax(z_t + b)``, where ``z_t`` (the logits of the
speaker-free network) does not depend on the speaker: for a variant on the logits the network runs once over
the speaker's sentences (:func:`score_tokens`, kept as :class:`TokenScores`), and the fit then reads ``z``
alone (:mod:`fairseq_speaker.onboarding.fit_loss`). A variant acting on the decoder's state changes the
logits through the whole decoder, so cached logits do not hold: the encoder runs once over the sentences and
its output is kept (:func:`decoder_batches`, :class:`DecoderBatch` es), for the frozen decoder to be run
teacher-forced over them at each evaluation of the fit's objective. Both come in fairseq's collated batches
(:func:`collated_batches`); :func:`split_scores` cuts the scores of several speakers' sentences, made in one
pass, apart.
"""

import itertools
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from fairseq.data import LanguagePairDataset, data_utils
from torch import Tensor

from fairseq_speaker.data import NO_SPEAKER

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
