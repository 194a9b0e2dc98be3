"""The speakers' words' settings, chosen on held-out sentences of the user's own corpus (``fairseq-speaker-words``).

The memory of the speakers' words (:mod:`fairseq_speaker.modules.speaker_words`) is shallow fusion: a speaker's bias,
``weight`` times a log ratio, is added to the network's log-probabilities of the words within ``window`` nats of the
step's best. How much it should count depends on the corpus: where the network already knows a speaker (a gender it
has right on every word), any weight can only move it away; where the network is weak (speakers learned at a low
learning rate, words a speaker said once), the memory recovers what the network missed. So the settings are chosen
on sentences the memory was not built from, as kNN-MT chooses its interpolation (Khandelwal et al., 2021), and the
network alone, weight 0, is always a candidate: a memory written by ``fairseq-speaker-words`` is never worse than no
memory on the held-out sentences it was chosen on.

**Held-out sentences.** The split ``heldout`` (``valid``) where it holds at least :data:`MIN_SENTENCES` sentences of
the speakers remembered: the memory is built from the remembered split, the network never trained on the held-out
one. Else cross-fitting (:func:`cross_fit_split`): every :data:`FOLDS`-th sentence of each speaker of two sentences or
more is held out, the memory (and the traits' kinds) built from the rest, the settings chosen on the held-out part,
and the memory built again from every sentence. The network was trained on those sentences, so it is surer of them
than of new ones: cross-fitting then favours the network, the safe side.

**The figure.** Each held-out target token is scored teacher-forced: the network's log-probabilities with the
speaker's bias added to the words within the window of the step's best, as a generation step adds them. A candidate's
accuracy is the share of tokens whose best word is the reference (a tie of m words counts 1/m); its held-out
negative log-likelihood, with the step renormalized, is printed beside it. A candidate's gain is significant when the
sum of its differences to the network over the root of the sum of their squares (the normal approximation of a
paired sign-flip test: do the tokens it gains outweigh those it loses by more than chance would?) is at least
:data:`Z`, so that noise on a small held-out split never switches the memory on. A step's bias is fixed given the
speaker, so this figure sees what the memory changes at the steps where it acts, not what a beam makes of it across
steps (a noun's bias choosing its article).

**Decoded** (``--calibrate-by decoding``, the default). Every candidate among :data:`DECODE_WEIGHTS` and
:data:`DECODE_WINDOWS` (kinds on and off) translates the held-out sources with the beam,
each sentence as its speaker, and are scored by the reference's words they get (each hypothesis's words matched to
the reference's, a word counted at most as often as the reference has it: the unigram matches of BLEU). This figure
chooses, by the same paired test over sentences: the network alone unless a candidate gets significantly more of the
reference's words; of those that do, the one that gets most, the smaller weight and window on a tie. With
``--calibrate-by tokens`` the tokens' figure chooses the same way. The tokens do not veto a candidate from being
decoded: where a choice is committed a step early (an article agreeing with the noun), the teacher-forced tokens
score the memory's bias on the noun after the reference's article, so that they see its cost at the steps where it
disagrees with the network and none of its gain at the article. A candidate the tokens reject can be the one the beam
gains most from (the suite's ``judge-3``: every candidate with the kinds was significantly worse on the tokens, and
kinds on at weight 4, window 2 got 10 more style points of the test split than the setting the tokens let through).

**The candidates.** The traits' kinds of speaker on or off (the posterior ranking of choices against the neighbours'
votes alone), ``weight`` among :data:`WEIGHTS` and ``window`` among :data:`WINDOWS` (a smaller window leaves a step
where the network is surer to the network), each axis fixed where the user gave it. The bias is linear in ``weight``
(see :meth:`~fairseq_speaker.modules.speaker_words.SpeakerWords.bias_row`), so every candidate of one kinds setting
reads the same unit bias rows.
"""

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from fairseq_speaker.modules.words_fusion import fused
from fairseq_speaker.onboarding.scoring import Pair, collated_batches

#: the weights tried beside 0 (the network alone), and the windows
WEIGHTS = (0.5, 1.0, 2.0, 4.0, 8.0)
WINDOWS = (0.5, 1.0, 2.0, 4.0)
#: the settings decoded (:func:`choose_by_decoding`), and at most this many held-out sentences
DECODE_WEIGHTS = (1.0, 2.0, 4.0, 8.0)
DECODE_WINDOWS = (1.0, 2.0)
MAX_DECODED = 1000
#: a held-out split is used when it holds at least this many sentences of the speakers remembered
MIN_SENTENCES = 100
#: cross-fitting holds out every FOLDS-th sentence of each speaker
FOLDS = 5
#: at most this many held-out sentences are read (evenly spaced): enough to see a point of accuracy on the tokens
MAX_SENTENCES = 4000
#: a candidate is chosen over the network only when its paired gain is this many standard errors above 0 (one-sided 5%)
Z = 1.645
#: a [positions, V] matrix of at most this many floats is scored at once
CHUNK_FLOATS = 1 << 23


@dataclass(frozen=True)
class Candidate:
    """Settings of the memory: the traits' kinds used, the weight and the window."""

    kinds: bool
    weight: float
    window: float

    def describe(self) -> str:
        if self.weight == 0:
            return "the network alone (weight 0)"
        return f"weight {self.weight:g}, window {self.window:g}, kinds {'on' if self.kinds else 'off'}"


@dataclass
class Figures:
    """A candidate's figures on the held-out tokens: ``accuracy`` (share of tokens whose best word is the reference),
    ``nll`` (per token), ``choice_accuracy`` (the same, on tokens that are an alternative of a choice of the kinds;
    None when there are none), and its paired gain in accuracy over the network with the gain's z (the module's
    docstring; 0 where it changes no token)."""

    candidate: Candidate
    accuracy: float
    nll: float
    choice_accuracy: Optional[float]
    gain: float
    z: float


@dataclass
class Decoded:
    """A candidate's translations of the held-out sources: the share of the references' words they got
    (``matched``), and its paired gain over the network (per sentence, in words) with the gain's z."""

    candidate: Candidate
    matched: float
    gain: float
    z: float


@dataclass
class Calibration:
    """What :func:`choose` measured and chose: every candidate's :class:`Figures` (the network first), the chosen
    candidate, how the held-out sentences were made (``heldout``) and how many tokens were scored."""

    heldout: str
    sentences: int
    tokens: int
    figures: List[Figures]
    chosen: Candidate
    choice_tokens: int = 0
    #: the candidates decoded, the network first (empty: chosen on the tokens)
    decoded: List[Decoded] = field(default_factory=list)
    decoded_sentences: int = 0

    @property
    def network(self) -> Figures:
        return self.figures[0]

    def figures_of(self, candidate: Candidate) -> Figures:
        return next(f for f in self.figures if f.candidate == candidate)

    def score(self, candidate: Candidate) -> float:
        """The figure that chose: the share of the references' words decoded where candidates were decoded, else of
        the tokens."""
        if self.decoded:
            return next(d.matched for d in self.decoded if d.candidate == candidate)
        return self.figures_of(candidate).accuracy

    def table(self) -> str:
        """Every candidate's accuracy on the held-out tokens, one row per kinds setting and window, the weights as
        columns, and the network's; the chosen candidate starred."""
        network = self.network
        weights = sorted({f.candidate.weight for f in self.figures if f.candidate.weight > 0})
        lines = [f"held-out tokens whose best word is the reference ({self.heldout}: {self.sentences} sentences, "
                 f"{self.tokens} tokens); the network alone: {100 * network.accuracy:.2f}% "
                 f"(nll {network.nll:.4f})" + (" *" if self.chosen.weight == 0 else "")]
        if not weights:
            return lines[0]
        lines.append("| kinds | window | " + " | ".join(f"weight {w:g}" for w in weights) + " |")
        lines.append("|---|---|" + "---|" * len(weights))
        rows: Dict[Tuple[bool, float], Dict[float, Figures]] = {}
        for f in self.figures[1:]:
            rows.setdefault((f.candidate.kinds, f.candidate.window), {})[f.candidate.weight] = f
        for (kinds, window), by_weight in rows.items():
            cells = []
            for w in weights:
                f = by_weight.get(w)
                star = " *" if f is not None and f.candidate == self.chosen else ""
                cells.append("" if f is None else f"{100 * f.accuracy:.2f}{star}")
            lines.append(f"| {'on' if kinds else 'off'} | {window:g} | " + " | ".join(cells) + " |")
        if self.decoded:
            star = " *" if self.chosen.weight == 0 else ""
            lines.append(f"the reference's words got by the beam ({self.decoded_sentences} sentences), the network "
                         f"alone {100 * self.decoded[0].matched:.2f}%{star}:")
            lines.extend(f"  {d.candidate.describe()}: {100 * d.matched:.2f}% (z {d.z:+.1f})"
                         + (" *" if d.candidate == self.chosen else "") for d in self.decoded[1:])
        return "\n".join(lines)


def cross_fit_split(sentences: Dict[str, List[Pair]], folds: int = FOLDS
                    ) -> Tuple[Dict[str, List[Pair]], Dict[str, List[Pair]]]:
    """Each speaker's sentences split into those the memory is built from and those held out: every ``folds``-th
    sentence (the last one of a speaker of fewer), of the speakers with two sentences or more."""
    kept, held = {}, {}
    for name, pairs in sentences.items():
        if len(pairs) < 2:
            kept[name] = list(pairs)
            continue
        out = [i for i in range(len(pairs)) if i % folds == folds - 1] or [len(pairs) - 1]
        chosen = set(out)
        kept[name] = [p for i, p in enumerate(pairs) if i not in chosen]
        held[name] = [pairs[i] for i in out]
    return kept, held


def evenly(pairs: List[Tuple[int, Pair]], most: int) -> List[Tuple[int, Pair]]:
    """At most ``most`` of ``pairs``, evenly spaced through them (all of them when there are no more)."""
    if len(pairs) <= most:
        return pairs
    return [pairs[i] for i in np.linspace(0, len(pairs) - 1, most).round().astype(int).tolist()]


@torch.no_grad()
def heldout_log_probs(model, task, pairs: Sequence[Tuple[int, Pair]], batch_size: int = 64
                      ) -> Iterator[Tuple[Tensor, Tensor, Tensor]]:
    """The network's teacher-forced log-probabilities of each held-out sentence as its speaker, as fairseq's
    generation would compute them without the memory: ``(log_probs [P, V], target [P], row [P])`` over the real
    target positions of a batch, ``pairs`` being ``(speaker row, (source, target))``."""
    cfg = task.cfg
    device = next(model.parameters()).device
    rows = torch.tensor([r for r, _ in pairs], dtype=torch.long)
    was_training = model.training
    model.eval()
    try:
        for start, batch in collated_batches([p for _, p in pairs], task.source_dictionary, task.target_dictionary,
                                             getattr(cfg, "left_pad_source", True),
                                             getattr(cfg, "left_pad_target", False), batch_size):
            net = batch["net_input"]
            speakers = rows[batch["id"] + start].to(device)
            logits, _ = model(net["src_tokens"].to(device), net["src_lengths"].to(device),
                              net["prev_output_tokens"].to(device), speakers=speakers)
            target = batch["target"].to(device)
            keep = target.ne(task.target_dictionary.pad())
            log_probs = torch.log_softmax(logits.float(), dim=-1)[keep]
            yield log_probs, target[keep], speakers.unsqueeze(1).expand_as(target)[keep]
    finally:
        model.train(was_training)


class _Tally:
    """Running sums of one candidate: correct tokens, nll, correct choice tokens, and the paired differences to the
    network (their sum and sum of squares)."""

    def __init__(self):
        self.correct = self.nll = self.choice = self.diff = self.diff2 = 0.0

    def add(self, correct: Tensor, nll: Tensor, at_choice: Tensor, base: Tensor) -> None:
        self.correct += float(correct.sum())
        self.nll += float(nll.sum())
        self.choice += float(correct[at_choice].sum())
        d = correct - base
        self.diff += float(d.sum())
        self.diff2 += float((d * d).sum())

    def figures(self, candidate: Candidate, tokens: int, choice_tokens: int) -> Figures:
        tokens = max(tokens, 1)
        gain = self.diff / tokens
        z = self.diff / math.sqrt(self.diff2) if self.diff2 > 0 else 0.0
        return Figures(candidate, self.correct / tokens, self.nll / tokens,
                       self.choice / choice_tokens if choice_tokens else None, gain, z)


def _scored(scores: Tensor, target: Tensor) -> Tuple[Tensor, Tensor]:
    """Each position's share of being right (1/m when the reference is one of m best words, else 0) and its nll."""
    best = scores.max(dim=1, keepdim=True).values
    at_best = scores >= best
    reference = scores.gather(1, target.unsqueeze(1))
    correct = (reference >= best).squeeze(1).float() / at_best.sum(1).float()
    nll = torch.logsumexp(scores, dim=1) - reference.squeeze(1)
    return correct, nll


def calibrate(model, task, heldout: Sequence[Tuple[int, Pair]], unit_bias: Dict[bool, Callable[[int], Tensor]],
              heldout_name: str = "held-out sentences", max_sentences: int = MAX_SENTENCES, batch_size: int = 64,
              **options) -> Calibration:
    """:func:`choose` on the network's log-probabilities of the held-out sentences ``heldout`` (``(speaker row,
    pair)``; at most ``max_sentences`` of them, evenly spaced)."""
    heldout = evenly(list(heldout), max_sentences)
    result = choose(heldout_log_probs(model, task, heldout, batch_size), unit_bias, **options)
    result.heldout, result.sentences = heldout_name, len(heldout)
    return result


def matches(hypothesis: Sequence[int], reference: Sequence[int]) -> int:
    """How many of the reference's words the hypothesis has, each counted at most as often as the reference has it."""
    counts: Dict[int, int] = {}
    for w in reference:
        counts[w] = counts.get(w, 0) + 1
    got = 0
    for w in hypothesis:
        if counts.get(w, 0) > 0:
            counts[w] -= 1
            got += 1
    return got


def choose_by_decoding(result: Calibration, decode: Callable[[Candidate], List[Sequence[int]]],
                       references: Sequence[Sequence[int]], network: bool = True) -> Calibration:
    """Decode the candidates of ``result`` (measured on the tokens) among :data:`DECODE_WEIGHTS` x
    :data:`DECODE_WINDOWS` (or the weight and window the user fixed: the only ones measured), whatever their tokens'
    figure, and choose among them and the network by the reference's words each gets (the module's docstring).
    ``decode(candidate)``: the hypotheses of the held-out sources, in the order of ``references``."""
    measured = result.figures[1:]
    weights = {f.candidate.weight for f in measured}
    windows = {f.candidate.window for f in measured}
    decode_weights = weights if len(weights) == 1 else weights & set(DECODE_WEIGHTS)
    decode_windows = windows if len(windows) == 1 else windows & set(DECODE_WINDOWS)
    candidates = [f.candidate for f in measured if f.candidate.weight in decode_weights
                  and f.candidate.window in decode_windows]
    total = max(sum(len(r) for r in references), 1)
    base = np.array([matches(h, r) for h, r in zip(decode(result.network.candidate), references)], dtype=np.float64)
    decoded = [Decoded(result.network.candidate, base.sum() / total, 0.0, 0.0)]
    for candidate in candidates:
        got = np.array([matches(h, r) for h, r in zip(decode(candidate), references)], dtype=np.float64)
        d = got - base
        spread = math.sqrt(float((d * d).sum()))
        decoded.append(Decoded(candidate, got.sum() / total, float(d.sum()) / len(references),
                               float(d.sum()) / spread if spread > 0 else 0.0))
    winners = [d for d in decoded[1:] if not network or (d.gain > 0 and d.z >= Z)]
    result.decoded, result.decoded_sentences = decoded, len(references)
    result.chosen = result.network.candidate
    if winners:
        result.chosen = max(winners, key=lambda d: (d.matched, -d.candidate.weight, -d.candidate.window)).candidate
    return result


def choose(batches: Iterable[Tuple[Tensor, Tensor, Tensor]], unit_bias: Dict[bool, Callable[[int], Tensor]],
           weights: Iterable[float] = WEIGHTS, windows: Iterable[float] = WINDOWS, choice_words: Iterable[int] = (),
           network: bool = True, floor: bool = True) -> Calibration:
    """Measure every candidate on held-out tokens and choose (the module's docstring). ``batches``: the network's
    ``(log_probs [P, V], target [P], speaker row [P])`` (:func:`heldout_log_probs`); ``unit_bias[kinds]`` gives a
    speaker row's bias ``[V]`` at weight 1 with the traits' kinds used or not (a setting absent from the dict is not
    tried); ``choice_words``: the word ids of the choices' alternatives, whose tokens are counted apart. ``network``:
    whether the network alone may be chosen (else it is measured only, and the most accurate candidate is chosen,
    however small its gain: a weight the user fixed); ``floor``: the memory's option of that name."""
    weights = sorted({float(w) for w in weights if w > 0})
    windows = sorted({float(w) for w in windows})
    candidates = [Candidate(kinds, w, window) for kinds in sorted(unit_bias, reverse=True)
                  for window in windows for w in weights]
    network_chosen = network
    network_alone = Candidate(False, 0.0, windows[0] if windows else 0.0)
    tallies = {c: _Tally() for c in [network_alone] + candidates}
    choice_ids = torch.tensor(sorted(set(int(w) for w in choice_words)), dtype=torch.long)
    unit: Dict[bool, Dict[int, Tensor]] = {kinds: {} for kinds in unit_bias}
    tokens = choice_tokens = 0
    for log_probs, target, rows in batches:
        chunk = max(16, CHUNK_FLOATS // max(log_probs.size(1), 1))
        for row in rows.unique().tolist():
            for kinds, bias in unit_bias.items():
                if row not in unit[kinds]:
                    unit[kinds][row] = bias(row)
        for lo in range(0, target.numel(), chunk):
            lp, y, r = log_probs[lo:lo + chunk], target[lo:lo + chunk], rows[lo:lo + chunk]
            at_choice = torch.isin(y, choice_ids) if len(choice_ids) else torch.zeros_like(y, dtype=torch.bool)
            base, nll = _scored(lp, y)
            tallies[network_alone].add(base, nll, at_choice, base)
            tokens += y.numel()
            choice_tokens += int(at_choice.sum())
            top = lp.max(dim=1, keepdim=True).values
            for kinds, rows_bias in unit.items():
                bias = torch.stack([rows_bias[int(i)] for i in r.tolist()]).to(lp)
                for window in windows:
                    near = lp >= top - window
                    for w in weights:
                        correct, nll = _scored(fused(lp, w * bias, top, near, window, floor), y)
                        tallies[Candidate(kinds, w, window)].add(correct, nll, at_choice, base)
    figures = [tallies[c].figures(c, tokens, choice_tokens) for c in [network_alone] + candidates]
    winners = [f for f in figures[1:] if not network_chosen or (f.gain > 0 and f.z >= Z)]
    chosen = network_alone
    if winners:
        chosen = max(winners, key=lambda f: (f.accuracy, -f.candidate.weight, -f.candidate.window)).candidate
    return Calibration("held-out sentences", 0, tokens, figures, chosen, choice_tokens)
