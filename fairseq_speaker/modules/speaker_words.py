"""A speaker's own words, remembered: decoding re-ranks the words the network finds plausible by what the speaker
and the speakers most like them said (``fairseq-speaker-words``; docs/speaker_learning.md, "The speakers' words").

A speaker's r numbers are a point estimate from a few sentences, learned by gradient among millions of shared weights,
and they keep far less of those sentences than the sentences say: a speaker who said "la bécane" once says it again, and
the speakers who chose as they did elsewhere show what they will choose for words they never said. This memory keeps
both, in closed form, for any variant whose speakers have parameters of their own. With x_s(w) = 1 when speaker s said
word w in their sentences, S the speakers with sentences, df(w) the speakers who said w and p(w) = max(df(w), 1) / S::

    sim(s, t) = cos(x_s * idf, x_t * idf)           idf(w) = log(S / df(w))
    n_s(w)    = sum_t sim(s, t)^power x_t(w) / sum_t sim(s, t)^power      over the k speakers t most like s
                (p(w) for a speaker whose words no other speaker shares)
    p_s(w)    = own * x_s(w) + neighbours * n_s(w) + (1 - own - neighbours) * p(w)
    bias_s(w) = weight * m_s / (m_s + evidence) * log(p_s(w) / p(w))
                (0 for words no speaker said, and for speakers without sentences)

With the traits' kinds of speaker (``fairseq-speaker-words --kinds``, :mod:`fairseq_speaker.analysis.choices`), the
words that are the alternatives a of a choice c are ranked by the speaker's posterior predictive instead
(:meth:`SpeakerWords._choices`): the posterior over the kinds k of the choice's trait, from the alternatives A_s they
said, predicts the alternatives they never said, and the alternatives they said count ``kinds_prior`` (alpha) to one
against it (a Dirichlet posterior predictive with the kinds' prediction as its mean: MacKay & Peto, 1995)::

    post_s(k) ∝ prior(k) * prod over the trait's choices c', alternatives a' in A_s of p(a' | k, c')
    q_s(a)    = sum_k post_s(k) p(a | k, c)
    r_s(a)    = (x_s(a) + alpha q_s(a)) / (sum over c's alternatives a' of x_s(a') + alpha)
    bias_s(a) = max(0, max over c's alternatives a' of bias_s(a')) + weight * log(r_s(a) / max over a' of r_s(a'))

The choice as a whole keeps the level the equation above gives its likeliest alternative (in which the neighbours'
votes n_s of c's alternatives are q_s(a) times the sum of their votes), and every other alternative is lowered by how
much less likely the speaker's posterior makes it. Without the shrinking m_s / (m_s + evidence): a posterior says
itself how little is known of a speaker, and ranks by it from their first sentence. The choices then rank the
rivals, and every other word's bias is only ever a rise, max(bias_s(w), 0): that a speaker of a few sentences has not
said a word yet is no evidence that they would not, and its penalties, added up along a hypothesis, let one that
leaves words out win. A record written before ``rank_choices`` (0.7.0) ranks them by the equation above alone, and
lowers the other words too, as it did (``rank_choices`` ``rates``).

m_s is the number of distinct words speaker s said: a speaker known from one sentence (m_s about 6) has their bias
shrunk ten-fold, one of thirty sentences (about 50) not even halved, since the speakers most like someone of a few
words are a guess.

p_s is a speaker's rate of use of a word, interpolated (Jelinek & Mercer, 1980) between their own sentences (a cache:
Kuhn & De Mori, 1990), the sentences of the speakers most like them (user-based collaborative filtering: Resnick et
al., 1994) and everyone's; the bias is its log ratio to everyone's rate, so a word every speaker says gets none. It
is not a distribution over the next word: added to every logit it would put a speaker's nouns anywhere. At each
generation step it is added to the words within ``window`` nats of the step's most probable word only, so it
chooses among what the network proposes there (the article's noun, a synonym, the participle's agreement) and never
proposes a word itself. It is added to the step's log-probabilities (``add_to`` ``log_probs``), not renormalized, so
a hypothesis keeps the bias of its words: the score of "le vélo" counts vélo's bias against that of "la bécane",
although the article came a step before the noun and after "le" the network gives vélo all the probability (added
to the logits, as records written before the option do, it could only choose among the words of one step).
Teacher-forced passes (training, the validation loss, scoring a reference) do not use it; generation does,
``fairseq-train --eval-bleu`` included.

Per speaker: the ids of the distinct words they said (their sentences' vocabulary), no parameters. In a checkpoint
the memory is the extra state of ``decoder.speaker_words`` (:data:`CHECKPOINT_KEY`); a checkpoint without it
decodes as before. Rows follow the speaker table: onboarding (``fairseq-speaker-adapt``, ``SpeakerTranslator``)
gives a new speaker the words of their sentences, an update adds its sentences' words, and rows replaced from a
vectors file lose theirs (the words were another estimate's; the other speakers keep their rows, as after an
update).

**The known speakers stay as they were built.** Everyone's words make every row (idf, p(w), the neighbours), so a
speaker onboarded would move every other speaker's bias a little. The memory keeps the words as they were at its
last build (:meth:`SpeakerWords.rebuild`: ``fairseq-speaker-words`` builds it; a record read is its own build), and a
speaker whose words have not changed since is biased by the build's estimate: onboarding and updating speakers
change their own rows only, and the known speakers translate as before. A speaker whose words are forgotten
(:meth:`SpeakerWords.forget`) is taken out of the build too, so their words no longer count among anyone's
neighbours. ``fairseq-speaker-words`` on a checkpoint builds it again from every speaker's words.
"""

import dataclasses
import logging
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor, nn

from fairseq_speaker.errors import UserError
from fairseq_speaker.modules.word_kinds import TraitKinds
from fairseq_speaker.modules.words_index import WordsBase, WordsIndex
from fairseq_speaker.modules.words_record import (  # noqa: F401 (CHECKPOINT_KEY: read from here too)
    CHECKPOINT_KEY,
    read_record,
    record_error,
    write_record,
)

logger = logging.getLogger(__name__)

#: what a step's bias can be added to (:attr:`WordOptions.add_to`); a record written before the option existed
#: (0.6.0 and before) added it to the logits, and keeps doing so
ADD_TO = ("log_probs", "logits")
#: how the alternatives of a choice of the kinds are ranked (:attr:`WordOptions.rank_choices`); a record written before
#: the option existed (0.7.0) ranked them by their rate ratio, and keeps doing so
RANK_CHOICES = ("posterior", "rates")

#: the largest weight accepted: beyond it the memory overrides every word the network proposes (a weight of 1e30
#: makes every output one repeated word)
MAX_WEIGHT = 100.0
#: the most ``evidence`` and ``kinds_prior`` may be (counts of words: beyond, a speaker's words weigh nothing)
MAX_COUNT = 1e6

#: speakers whose bias rows (V floats each) are kept between batches
CACHED_ROWS = 256
#: re-ranking finds the words within the window among each hypothesis's FEW_NEAR best (one top-k, a trained model's
#: step), else by a mask over the vocabulary, and adds the bias by the words' indices when fewer than 1 / DENSE_SHARE
#: of a step's words are within the window, as one masked dense sum otherwise (a random network's flat steps)
FEW_NEAR = 16
DENSE_SHARE = 16
#: the index keeps the words of all speakers as they were at its last full build, and the rows changed since apart
#: (a change then costs one pass over the words, not a build); past max(REBUILD_ROWS, speakers / REBUILD_SHARE)
#: changed rows it is built in full again
REBUILD_ROWS = 1024
REBUILD_SHARE = 16


@dataclass
class WordOptions:
    """The estimator's constants (the module docstring's equation). The defaults were chosen on the styles corpus
    (docs/speaker_learning.md, "How the options were chosen"); no other corpus was measured."""

    weight: float = 6.0
    window: float = 2.0
    own: float = 0.3
    neighbours: float = 0.6
    k: int = 30
    power: float = 4.0
    evidence: float = 60.0
    #: what a generation step's bias is added to: ``log_probs``, the step's normalized log-probabilities, so that a
    #: hypothesis keeps its word's bias and the words of the speaker can choose the article before them; or ``logits``
    #: (0.6.0 and before), renormalized at the step, where a noun's bias cannot undo its article
    add_to: str = "log_probs"
    #: how the alternatives of a choice of the traits' kinds are ranked: by the speaker's posterior predictive, every
    #: other word then only raised (``posterior``, the module docstring), or by their rate ratio alone, as everything
    #: else (``rates``, 0.7.0)
    rank_choices: str = "posterior"
    #: how many of a speaker's own choices the kinds' prediction of a choice counts as (alpha): below 1, an
    #: alternative the speaker said outranks any they did not
    kinds_prior: float = 0.3
    #: whether a word within the window is kept at or above the window's edge (the step's best minus ``window``), so
    #: that the memory only re-ranks the words the network proposes and a word outside the window never wins by the
    #: network's best being lowered (records written before the option existed, 0.8.0 and before, do not)
    floor: bool = True

    def problems(self) -> List[str]:
        out = []
        if self.add_to not in ADD_TO:
            out.append(f"add_to must be one of {', '.join(ADD_TO)}, got {self.add_to!r}")
        if self.rank_choices not in RANK_CHOICES:
            out.append(f"rank_choices must be one of {', '.join(RANK_CHOICES)}, got {self.rank_choices!r}")
        for name in ("weight", "window", "own", "neighbours", "power", "evidence", "kinds_prior"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                out.append(f"{name} must be a number >= 0, got {value!r}")
        if not out and self.weight > MAX_WEIGHT:
            out.append(f"weight must be at most {MAX_WEIGHT:g}, got {self.weight!r}")
        for name in ("evidence", "kinds_prior"):  # beyond them every speaker's bias is 0: a memory that does nothing
            if not out and getattr(self, name) > MAX_COUNT:
                out.append(f"{name} must be at most {MAX_COUNT:g} (a count of words; weight 0 is the memory that does "
                           f"nothing), got {getattr(self, name)!r}")
        if not out and self.kinds_prior == 0:
            out.append("kinds_prior must be above 0 (the kinds' prediction of the alternatives a speaker never said)")
        if not out and self.own + self.neighbours > 1:
            out.append(f"own + neighbours must be at most 1, got {self.own} + {self.neighbours}")
        if not isinstance(self.floor, bool):
            out.append(f"floor must be true or false, got {self.floor!r}")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            out.append(f"k must be a whole number >= 1, got {self.k!r}")
        return out


class SpeakerWords(nn.Module):
    """The words of every speaker row (``words[i]``: the sorted distinct ids speaker i said; empty: none known),
    over a target vocabulary of ``vocab`` words, of which ``ignored`` (padding, unknown) are never remembered."""

    _rows: "OrderedDict[int, Tensor]"
    _index: Optional["WordsIndex"]

    def __init__(self, vocab: int, options: Optional[WordOptions] = None, ignored: Iterable[int] = ()):
        super().__init__()
        self.vocab = int(vocab)
        self.options = options or WordOptions()
        problems = self.options.problems()
        if problems:
            raise UserError(f"speaker words: {'; '.join(problems)}")
        self.ignored = sorted({int(i) for i in ignored})
        self.words: List[np.ndarray] = []
        #: the traits' kinds of speaker (``fairseq-speaker-words --kinds``; empty: the neighbours alone)
        self.kinds: List[TraitKinds] = []
        #: the words of the rows at the last build (:meth:`rebuild`); None: never built, every row as it is now
        self._built_words: Optional[List[np.ndarray]] = None
        self._built_index: Optional[WordsIndex] = None
        self._reset()

    def __deepcopy__(self, memo) -> "SpeakerWords":
        """A copy with a speaker list of its own (a fit on a copy of the model adds its speaker there); the arrays of
        words are shared, as nothing changes one in place."""
        other = SpeakerWords(self.vocab, dataclasses.replace(self.options), self.ignored)
        other.words = list(self.words)
        other.kinds = self.kinds  # never changed in place
        other._base, other._changed = self._base, set(self._changed)  # neither is ever changed in place
        other._index = self._index
        other._built_words, other._built_index = self._built_words, self._built_index  # never changed in place
        other.train(self.training)
        memo[id(self)] = other
        return other

    # -- the speakers' words ---------------------------------------------------------------------------------
    @property
    def num_speakers(self) -> int:
        return len(self.words)

    def ids(self, tokens: Iterable) -> np.ndarray:
        """The sorted distinct ids of ``tokens`` (id tensors or lists) this memory keeps: in the vocabulary, not
        ignored."""
        parts = [np.asarray(t.tolist() if isinstance(t, Tensor) else t, dtype=np.int64).reshape(-1) for t in tokens]
        ids = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        ids = ids[(ids >= 0) & (ids < self.vocab)]
        return np.setdiff1d(ids, np.asarray(self.ignored, dtype=np.int64), assume_unique=True)

    def resize(self, speakers: int) -> None:
        """As many rows as the speaker table: new rows know no words."""
        if speakers == self.num_speakers:
            return
        if speakers < self.num_speakers:
            del self.words[speakers:]
            if self._built_words is not None and speakers < len(self._built_words):
                self._built_words, self._built_index = self._built_words[:speakers], None
            if self._base is not None and speakers < self._base.speakers:  # rare (a table cut): built in full
                self._reset()
        else:
            self.words.extend(np.zeros(0, dtype=np.int64) for _ in range(speakers - self.num_speakers))
        self._forget()

    def set_options(self, options: WordOptions) -> None:
        """Estimate with ``options`` from now on (the rows made with the earlier ones are dropped)."""
        problems = options.problems()
        if problems:
            raise UserError(f"speaker words: {'; '.join(problems)}")
        self.options = options
        self._rows = OrderedDict()

    def set_words(self, row: int, sentences: Iterable) -> None:
        """Speaker ``row``'s words are those of ``sentences`` (token id tensors or lists) alone."""
        if row >= self.num_speakers:
            self.resize(row + 1)
        self.words[row] = self.ids(sentences)
        self._changed.add(row)
        self._forget()

    def add_words(self, row: int, sentences: Iterable) -> None:
        """Speaker ``row`` said ``sentences`` too."""
        self.set_words(row, [self.words_of(row)] + list(sentences))

    def forget(self, rows: Iterable[int]) -> None:
        """Speakers ``rows`` know no words any more."""
        forgotten = [row for row in rows if len(self.words_of(row))]
        for row in forgotten:
            self.words[row] = np.zeros(0, dtype=np.int64)
            self._changed.add(row)
            if self._built_words is not None and row < len(self._built_words):  # out of everyone's neighbours too
                self._built_words = list(self._built_words)
                self._built_words[row], self._built_index = self.words[row], None
        if forgotten:  # the estimate of everyone is made again only when a speaker's words changed
            self._forget()

    def drop(self, rows: Iterable[int]) -> None:
        """Speakers ``rows`` know no words any more, as their rows were replaced (a vectors file, a speaker added again
        with ``replace``): their own bias changes, the known speakers' stay as they were built (their neighbours'
        words included, as an update leaves them). :meth:`forget` takes the words out of everyone's neighbours too."""
        for row in rows:
            if len(self.words_of(row)):
                self.set_words(row, [])

    def words_of(self, row: int) -> np.ndarray:
        return self.words[row] if 0 <= row < self.num_speakers else np.zeros(0, dtype=np.int64)

    # -- the estimate -----------------------------------------------------------------------------------------
    def _forget(self) -> None:
        """Drop what depends on everyone's words (the bias rows, the index), keeping the last full build."""
        self._rows = OrderedDict()  # the last CACHED_ROWS speakers' bias rows
        self._index = None

    def _reset(self) -> None:
        """Forget everything built, the last full build too (the speaker list was replaced)."""
        self._base: Optional[WordsBase] = None
        self._changed: set = set()
        self._forget()

    def rebuild(self) -> None:
        """Make the words as they are now the build that the known speakers' rows are estimated from."""
        self._built_words, self._built_index = list(self.words), None
        self._forget()

    def _frozen(self, row: int) -> bool:
        """Whether ``row``'s bias comes from the last build: its words are those it had then."""
        built = self._built_words
        return built is not None and row < len(built) and built[row] is self.words[row]

    def _estimate_index(self, row: int) -> "WordsIndex":
        """The index ``row``'s bias is estimated from: the last build's for a row unchanged since, else the current."""
        if not self._frozen(row):
            return self._built()
        if self._built_index is None:
            assert self._built_words is not None  # a frozen row is one of the last build's
            self._built_index = WordsIndex(WordsBase(self._built_words, self.vocab), self._built_words, (), self.vocab)
        return self._built_index

    def _built(self) -> "WordsIndex":
        if self._index is None:
            if self._base is None or len(self._changed) > max(REBUILD_ROWS, self._base.speakers // REBUILD_SHARE):
                self._base, self._changed = WordsBase(self.words, self.vocab), set()
            self._index = WordsIndex(self._base, self.words, self._changed, self.vocab)
        return self._index

    def bias_row(self, row: int) -> Tensor:
        """Speaker ``row``'s bias over the vocabulary ``[V]`` (zeros for a speaker of no known words)."""
        cached = self._rows.get(row)
        if cached is not None:
            self._rows.move_to_end(row)
            return cached
        o = self.options
        if not len(self.words_of(row)) or o.weight == 0:
            out = torch.zeros(self.vocab)
        else:
            index = self._estimate_index(row)
            p, anyone = index.p, index.anyone
            ids = self.words_of(row)
            query = np.zeros(self.vocab, dtype=np.float32)
            query[ids] = index.idf[ids] / max(float(index.norms[row]), 1e-12)  # the speaker's unit row
            similarity = index.similarity(query)
            similarity[row] = 0.0
            nearest, weights = self._nearest(similarity)
            neighbours = p  # a speaker like no other: everyone's rate
            if len(nearest):
                neighbours = np.zeros(self.vocab)
                said_by = self._built_words if index is self._built_index else self.words
                assert said_by is not None  # the last build's index goes with its words
                for t, weight in zip(nearest.tolist(), weights.tolist()):  # k rows of distinct ids each
                    neighbours[said_by[t]] += weight
                neighbours /= weights.sum()
            own = np.zeros(self.vocab, dtype=np.float64)
            own[ids] = 1.0
            choices = self._choices(own > 0)
            if choices:  # each choice's votes shared by the speaker's posterior predictive
                neighbours = np.array(neighbours, dtype=np.float64)
                for words, predicted in choices:
                    neighbours[words] = predicted * neighbours[words].sum()
            rate = o.own * own + o.neighbours * neighbours + (1.0 - o.own - o.neighbours) * p
            said = len(ids)
            bias = o.weight * said / (said + o.evidence) * np.log(np.maximum(rate, 1e-12) / p)
            if o.rank_choices == "posterior" and choices:
                # the choices rank the rivals: any other word is only ever raised (that a speaker of a few sentences
                # has not said it yet is no evidence that they would not, and lowered, it adds up along a hypothesis)
                np.maximum(bias, 0.0, out=bias)
                for words, predicted in choices:
                    r = own[words] + o.kinds_prior * predicted
                    bias[words] = bias[words].max() + o.weight * np.log(r / r.max())
            bias[~anyone] = 0.0
            out = torch.from_numpy(bias.astype(np.float32))
        self._rows[row] = out
        while len(self._rows) > CACHED_ROWS:
            self._rows.popitem(last=False)
        return out

    def _choices(self, said: np.ndarray) -> List[Tuple[np.ndarray, np.ndarray]]:
        """Every choice of the traits' kinds: its alternatives' word ids and the speaker's posterior predictive over
        them, given the alternatives they said (``said``: a mask over the vocabulary)."""
        out: List[Tuple[np.ndarray, np.ndarray]] = []
        for trait in self.kinds:
            log_posterior = np.log(trait.prior)
            for words, table in zip(trait.choices, trait.tables):
                log_posterior = log_posterior + np.log(table[:, said[words]]).sum(1)
            posterior = np.exp(log_posterior - log_posterior.max())
            posterior /= posterior.sum()
            out.extend((words, posterior @ table) for words, table in zip(trait.choices, trait.tables))
        return out

    def _nearest(self, similarity: np.ndarray):
        """The (at most) ``k`` rows of largest positive ``similarity`` (of equal ones, the earlier rows) and their
        weights sim^power, not normalized: relative to the most similar row's (its weight 1), so that a large power
        gives the nearest rows all the weight instead of underflowing every weight to 0 (empty arrays when no row is
        similar)."""
        similarity = np.maximum(similarity, 0.0)
        k = min(self.options.k, int((similarity > 0).sum()))
        if k == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        kth = np.partition(similarity, len(similarity) - k)[len(similarity) - k]  # the k-th largest
        above = np.flatnonzero(similarity > kth)
        nearest = np.concatenate([above, np.flatnonzero(similarity == kth)[:k - len(above)]])  # ties: earlier rows
        return nearest, (similarity[nearest] / similarity[nearest].max()) ** self.options.power

    def index(self) -> "WordsIndex":
        """The estimate's index of the speakers' words as it is now (never changed: a later change of the memory
        makes a new one and leaves this one as it was), for :meth:`most_like`."""
        return self._built()

    def most_like(self, ids: Iterable, among: int, index: Optional["WordsIndex"] = None):
        """The speakers most like a speaker who said the words ``ids``, among rows ``0 .. among - 1``: their rows and
        weights, summing to 1 (the neighbours of the module's equation; empty when none of them shares a word).
        ``index``: an :meth:`index` taken earlier, else the current."""
        index = index if index is not None else self._built()
        ids = self.ids([ids])
        query = np.zeros(self.vocab, dtype=np.float32)
        query[ids] = index.idf[ids]
        norm = float(np.linalg.norm(query))
        if norm == 0.0 or among <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        similarity = index.similarity(query / norm)[:among]
        nearest, weights = self._nearest(similarity)
        return nearest, weights / weights.sum() if len(weights) else weights

    def bias(self, speakers: Tensor) -> Tensor:
        """The bias of each sentence's speaker ``[B, V]``; rows of speakers without words (or unknown, -1) are 0."""
        rows = [self.bias_row(int(s)) for s in speakers.tolist()]
        return torch.stack(rows) if rows else torch.zeros(0, self.vocab)

    def step_log_probs(self, log_probs: Tensor, rows: Tensor, index: Optional[Tensor] = None) -> Tensor:
        """A generation step's log-probabilities ``[B, V]`` (the network's, as fairseq's generator computes them) with
        each hypothesis's bias (:meth:`rerank`; ``rows`` and ``index`` as there): a new float32 tensor, as fairseq's
        own log-probabilities are, summed by the beam
        (:class:`fairseq_speaker.sequence_generator.SpeakerWordsEnsemble`).

        With ``add_to`` ``log_probs`` the bias is added to the step's log-probabilities, so a hypothesis's score is
        the sum over its words of the network's log-probability and the speaker's bias (shallow fusion: Gulcehre et
        al., 2015, with the speaker's log rate ratio as the second model): "le vélo" keeps vélo's bias against "la
        bécane", although after "le" the network gives vélo all the probability. With ``logits`` the step is
        renormalized after the bias (as adding it to the logits would), which then only chooses among the words of
        one step."""
        scores = self.rerank(log_probs.float().unsqueeze(1).clone(), rows, index).squeeze(1)
        return torch.log_softmax(scores, dim=-1) if self.options.add_to == "logits" else scores

    def rerank(self, logits: Tensor, rows: Tensor, index: Optional[Tensor] = None) -> Tensor:
        """``logits`` ``[B, 1, V]`` with each hypothesis's row of ``rows`` added to its words within ``window`` nats of
        its most probable one: ``rows`` ``[B, V]``, or ``[R, V]`` and ``index`` ``[B]`` the row of each hypothesis
        (one row per speaker of a batch, not one per hypothesis). ``logits`` may be changed in place.

        Within ``window`` nats of the best log-probability is within ``window`` of the best logit (the normaliser is
        the same for a hypothesis's words), so no softmax is taken. Where few words are near (a trained model's step:
        a few per hypothesis, found among its best ``FEW_NEAR``) the bias is added to those only, by their indices;
        where many are (a random network's flat steps: all of them), as one masked ``B x V`` sum."""
        scores = logits.float()
        window, floor = self.options.window, self.options.floor
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

    # -- saved state -------------------------------------------------------------------------------------------
    def get_extra_state(self) -> Dict:
        built = self._built_words
        moved = [r for r in range(len(built)) if not self._frozen(r)] if built is not None else []
        return write_record(self.vocab, dataclasses.asdict(self.options), self.ignored, self.words, built, moved,
                            self.kinds)

    def set_extra_state(self, state: Dict) -> None:
        other = from_state(state, self.vocab, "the checkpoint")
        self.options, self.ignored, self.words, self.kinds = other.options, other.ignored, other.words, other.kinds
        self._built_words, self._built_index = other._built_words, None
        self._reset()


def fused(scores: Tensor, bias: Tensor, best: Tensor, near: Tensor, window: float, floor: bool) -> Tensor:
    """``scores`` (float) with ``bias`` added to the ``near`` words, those within ``window`` of the ``best`` score (the
    last dimension's maximum, kept); with ``floor``, a near word is kept at or above ``best - window``. A new tensor."""
    out = scores + bias.to(scores.dtype) * near
    if floor:
        out = torch.where(near, torch.maximum(out, best - window), out)
    return out


def from_state(state, vocab: int, where: str, speakers: Optional[int] = None) -> SpeakerWords:
    """The memory saved as ``state`` (:meth:`SpeakerWords.get_extra_state`), checked against a target vocabulary of
    ``vocab`` words and a table of ``speakers`` rows (None: any); a :class:`UserError` naming ``where`` when it cannot
    be this model's (:func:`fairseq_speaker.modules.words_record.read_record`)."""
    def memory(options: Dict, ignored: List[int]) -> SpeakerWords:
        try:
            return SpeakerWords(vocab, WordOptions(**options), ignored)
        except (UserError, TypeError) as e:
            raise record_error(where, f"have bad options ({e})") from None

    record = read_record(state, vocab, where, {f.name for f in dataclasses.fields(WordOptions)}, memory, speakers)
    words: SpeakerWords = record.memory
    words.words, words.kinds, words._built_words = record.words, record.kinds, record.built
    return words


def remembered(dictionary, speakers: int, said: Mapping[int, Sequence], options: Optional[WordOptions] = None
               ) -> SpeakerWords:
    """A memory of ``speakers`` rows over ``dictionary`` (its padding, beginning and unknown words never remembered)
    where row i said the target sentences ``said[i]`` (token id tensors) and the other rows nothing."""
    words = SpeakerWords(len(dictionary), options, ignored=(dictionary.pad(), dictionary.bos(), dictionary.unk()))
    words.resize(speakers)
    for row, sentences in said.items():
        words.set_words(row, sentences)
    return words


def speaker_words_of(model) -> Optional[SpeakerWords]:
    """The model's memory of its speakers' words, if it has one."""
    words = getattr(getattr(model, "decoder", None), "speaker_words", None)
    return words if isinstance(words, SpeakerWords) else None


def attach(model, words: Optional[SpeakerWords]) -> None:
    """Give ``model``'s decoder ``words`` (None: take its memory away)."""
    decoder = model.decoder
    if words is None:
        if "speaker_words" in dict(decoder.named_children()):
            del decoder.speaker_words
        return
    decoder.speaker_words = words

