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
(:func:`~fairseq_speaker.modules.words_estimate.choices`): the posterior over the kinds k of the choice's trait, from
the alternatives A_s they said, predicts the alternatives they never said, and the alternatives they said count
``kinds_prior`` (alpha) to one against it (a Dirichlet posterior predictive with the kinds' prediction as its mean:
MacKay & Peto, 1995)::

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

This module holds the memory (:class:`SpeakerWords`: its speakers' words, its builds, its bias rows kept between
batches, its extra state), the memory read back from a record (:func:`from_state`) or made from sentences
(:func:`remembered`), and a model's memory (:func:`speaker_words_of`, :func:`attach`). Its parts, one concern a
module: :mod:`~fairseq_speaker.modules.words_options` (:class:`WordOptions`, the equation's constants, and their
checks), :mod:`~fairseq_speaker.modules.words_estimate` (a speaker's bias row: the equation above),
:mod:`~fairseq_speaker.modules.words_fusion` (a row fused into a generation step),
:mod:`~fairseq_speaker.modules.words_index` (the index of everyone's words), :mod:`~fairseq_speaker.modules.word_kinds`
(the traits' kinds of speaker) and :mod:`~fairseq_speaker.modules.words_record` (the record in a checkpoint, written
and read back with its checks).
"""

import dataclasses
import logging
from collections import OrderedDict
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from fairseq_speaker.errors import UserError
from fairseq_speaker.modules import words_fusion
from fairseq_speaker.modules.word_kinds import TraitKinds
from fairseq_speaker.modules.words_estimate import nearest, row_bias
from fairseq_speaker.modules.words_index import WordsBase, WordsIndex
from fairseq_speaker.modules.words_options import WordOptions
from fairseq_speaker.modules.words_record import (  # noqa: F401 (CHECKPOINT_KEY: read from here too)
    CHECKPOINT_KEY,
    read_record,
    record_error,
    write_record,
)

logger = logging.getLogger(__name__)

#: speakers whose bias rows (V floats each) are kept between batches
CACHED_ROWS = 256
#: the index keeps the words of all speakers as they were at its last full build, and the rows changed since apart
#: (a change then costs one pass over the words, not a build); past max(REBUILD_ROWS, speakers / REBUILD_SHARE)
#: changed rows it is built in full again
REBUILD_ROWS = 1024
REBUILD_SHARE = 16


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
        if not len(self.words_of(row)) or self.options.weight == 0:
            out = torch.zeros(self.vocab)
        else:
            index = self._estimate_index(row)
            said_by = self._built_words if index is self._built_index else self.words
            assert said_by is not None  # the last build's index goes with its words
            bias = row_bias(row, self.words_of(row), index, said_by, self.options, self.kinds, self.vocab)
            out = torch.from_numpy(bias.astype(np.float32))
        self._rows[row] = out
        while len(self._rows) > CACHED_ROWS:
            self._rows.popitem(last=False)
        return out

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
        near, weights = nearest(similarity, self.options.k, self.options.power)
        return near, weights / weights.sum() if len(weights) else weights

    def bias(self, speakers: Tensor) -> Tensor:
        """The bias of each sentence's speaker ``[B, V]``; rows of speakers without words (or unknown, -1) are 0."""
        rows = [self.bias_row(int(s)) for s in speakers.tolist()]
        return torch.stack(rows) if rows else torch.zeros(0, self.vocab)

    def step_log_probs(self, log_probs: Tensor, rows: Tensor, index: Optional[Tensor] = None) -> Tensor:
        """A generation step's log-probabilities ``[B, V]`` with each hypothesis's bias, as this memory's options
        fuse it (:func:`~fairseq_speaker.modules.words_fusion.step_log_probs`; ``rows`` and ``index`` as
        :meth:`rerank`'s): a new float32 tensor."""
        return words_fusion.step_log_probs(log_probs, rows, index, self.options)

    def rerank(self, logits: Tensor, rows: Tensor, index: Optional[Tensor] = None) -> Tensor:
        """``logits`` ``[B, 1, V]`` with each hypothesis's row of ``rows`` added to its words within ``window`` nats of
        its most probable one (:func:`~fairseq_speaker.modules.words_fusion.rerank`): ``rows`` ``[B, V]``, or
        ``[R, V]`` and ``index`` ``[B]`` the row of each hypothesis. ``logits`` may be changed in place."""
        return words_fusion.rerank(logits, rows, index, self.options.window, self.options.floor)

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


def from_state(state, vocab: int, where: str, speakers: Optional[int] = None) -> SpeakerWords:
    """The memory saved as ``state`` (:meth:`SpeakerWords.get_extra_state`), checked against a target vocabulary of
    ``vocab`` words and a table of ``speakers`` rows (None: any); a :class:`UserError` naming ``where`` when it cannot
    be this model's (:func:`fairseq_speaker.modules.words_record.read_record`): the file it was read from, where
    :func:`fairseq_speaker.checkpoints.note_vocabulary` noted it."""
    read_from = state.get("read_from") if isinstance(state, dict) else None
    where = read_from if isinstance(read_from, str) else where

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

