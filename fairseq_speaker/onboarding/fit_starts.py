"""Where a new speaker's fit through the decoder starts: the rows of known speakers like them.

Through the decoder each evaluation of a fit's objective is a pass of the decoder, so a new speaker's fit starts
from the rows of known speakers (the speakers the model had when the adapter was made) like them, not from the
mean speaker: in a model that remembers its speakers' words (``fairseq-speaker-words``), the speakers whose words
are most like theirs (:meth:`FitStarts.neighbours_start`, the neighbours of
:mod:`~fairseq_speaker.modules.speaker_words`, weighted as there); else, for a variant with an output bias of its
own, the speakers whose output bias makes their target words most probable (:meth:`FitStarts.likely_start`).
:class:`FitStarts` is a part of :class:`~fairseq_speaker.onboarding.adapter.SpeakerAdapter`.
"""

import math
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from fairseq_speaker.modules.speaker_bias import SpeakerBias
from fairseq_speaker.modules.speaker_words import SpeakerWords, speaker_words_of
from fairseq_speaker.modules.words_index import WordsIndex
from fairseq_speaker.onboarding.scoring import DecoderBatch, Scored

#: without the speakers' words, a new speaker's fit through the decoder starts from the LIKELY_K known speakers
#: whose output bias makes their sentences most probable, among at most LIKELY_CANDIDATES of them (evenly spaced
#: through the table), whose bias rows are read LIKELY_CHUNK at a time
LIKELY_K = 30
LIKELY_CANDIDATES = 4096
LIKELY_CHUNK = 256


class FitStarts:
    """A part of :class:`~fairseq_speaker.onboarding.adapter.SpeakerAdapter` (whose constructor sets what it reads
    and keeps: the ``model``, its ``task`` and speaker ``bias``, the ``known_speakers``, and the caches
    ``_words_index`` and ``_likely``): where a new speaker's fit starts, see the module documentation."""

    model: Any
    task: Any
    bias: SpeakerBias
    #: the speaker rows the model had when the adapter was made: where new speakers' neighbours are looked for
    known_speakers: int
    # (memory, its index) where the neighbours are looked for
    _words_index: Optional[Tuple[SpeakerWords, WordsIndex]]
    # likely_start's candidates, centre, normalizers; () where it has none
    _likely: Optional[Tuple[Tensor, ...]]

    def neighbours_start(self, chunks: List[Scored]) -> Optional[Dict[str, Tensor]]:
        """The weighted mean rows of the speakers whose words are most like those of ``chunks``' targets, among the
        speakers the model had when the adapter was made; None for a model without its speakers' words, or when no
        such speaker shares a word."""
        words = speaker_words_of(self.model)
        if words is None:
            return None
        if self._words_index is None or self._words_index[0] is not words:
            # the known speakers' words as they are now: the speakers added later are no one's neighbours, so their
            # words need no new index (at a million speakers a new one takes 40 ms: a product over everyone's words)
            self._words_index = (words, words.index())
        rows, weights = words.most_like([c.target for c in chunks], among=self.known_speakers,
                                        index=self._words_index[1])
        if not len(rows):
            return None
        table = self.bias.export_speakers(rows.tolist())
        weights = torch.from_numpy(weights).float()
        return {name: torch.tensordot(weights.to(value.device), value.float(), dims=1).unsqueeze(0).to(value.dtype)
                for name, value in table.items()}

    def likely_start(self, chunks: List[Scored]) -> Optional[Dict[str, Tensor]]:
        """The known speakers whose output bias makes the target words of ``chunks`` most probable, and their mean
        rows weighted by that probability: None for a variant without an output bias of its speakers' own (or one
        that reads the source).

        Speaker t's probability of the words is taken, to the first order, as that of a unigram model: the target
        words' frequencies in training (u), reweighted by the speaker's bias away from the known speakers' mean bias
        (c_t = b_t - mean b), so that for target words y_1..y_T::

            score(t) = sum_i c_t(y_i) - T log sum_w u(w) exp(c_t(w))

        and the LIKELY_K best known speakers are weighted by softmax(score). At most LIKELY_CANDIDATES known speakers
        are read, evenly spaced through the table."""
        likely = self._likely_candidates()
        if likely is None:
            return None
        ids, centre, lognorm = likely
        batches = [c for c in chunks if isinstance(c, DecoderBatch)]  # a fit through the decoder's: its batches
        targets = torch.cat([c.target[c.target.ne(c.pad)].reshape(-1) for c in batches]).cpu()
        counts = torch.bincount(targets, minlength=centre.numel()).to(centre.dtype)
        words = counts.nonzero().squeeze(1)
        counts = counts[words]
        at_words = torch.cat(list(self._output_biases(ids, words)))
        scores = (at_words - centre[words]) @ counts - counts.sum() * lognorm
        best = scores.topk(min(LIKELY_K, len(ids)))
        weights = torch.softmax(best.values, 0)
        table = self.bias.export_speakers(ids[best.indices].tolist())
        return {name: torch.tensordot(weights.to(value.device), value.float(), dims=1).unsqueeze(0).to(value.dtype)
                for name, value in table.items()}

    def share_starts(self, other: "FitStarts") -> None:
        """Take ``other``'s known speakers for :meth:`likely_start`, if it has made them and this adapter has not (an
        adapter of a copy of ``other``'s model: the same known speakers, whose normalizers cost a pass over their
        bias rows to make)."""
        if self._likely is None and other._likely is not None:
            self._likely = other._likely

    def _output_biases(self, ids: Tensor, words: Optional[Tensor] = None):
        """The output bias rows ``[n, V]`` (float, on the CPU) of the known speakers ``ids``, or their columns at
        ``words`` only ``[n, W]``, LIKELY_CHUNK speakers at a time."""
        device = next(self.bias.parameters()).device
        with torch.no_grad():
            for chunk in ids.split(LIKELY_CHUNK):
                chunk = chunk.to(device)
                rows = self.bias.lookup(chunk) if words is None else self.bias.lookup_words(chunk, words.to(device))
                assert rows is not None  # a variant with an output bias of its speakers' own
                yield rows.float().cpu()

    def _likely_candidates(self) -> Optional[Tuple[Tensor, ...]]:
        """:meth:`likely_start`'s known speakers, their mean bias and each one's normalizer, made at its first call
        (the known speakers do not change; the speakers added later are no one's start)."""
        if self._likely is None:
            bias, known = self.bias, self.known_speakers
            if not bias.acts_on_output or bias.reads_source or not bias.speaker_parameters() or known < 1:
                self._likely = ()
                return None
            ids = torch.arange(0, known, max(1, math.ceil(known / LIKELY_CANDIDATES)))
            centre = sum(rows.sum(0) for rows in self._output_biases(ids)) / len(ids)
            dictionary = self.task.target_dictionary
            frequency = torch.tensor(dictionary.count, dtype=torch.float64)[:centre.numel()]
            frequency[:dictionary.nspecial] = 0.0  # padding, beginning, end, unknown: not words of a speaker's
            log_u = torch.log(frequency / frequency.sum()).to(centre.dtype) if frequency.sum() > 0 else \
                torch.full_like(centre, -math.log(centre.numel()))
            lognorm = torch.cat([torch.logsumexp(rows - centre + log_u, dim=1) for rows in self._output_biases(ids)])
            self._likely = (ids, centre, lognorm)
        return self._likely or None
