"""Translating as each speaker: the part of :class:`~fairseq_speaker.onboarding.translator.SpeakerTranslator` that
runs fairseq's beam search (:class:`TranslatorSearch`: ``translate``, ``translate_nbest``, ``translate_nbest_known``,
``source_lengths``, ``unknown_words``, ``source_counts``), every argument checked first
(:mod:`~fairseq_speaker.onboarding.arguments`), a speaker label that looks like one of the model's without being it
refused, a sentence longer than the model takes refused by its place, a sentence most of whose words the model does
not know translated with an :class:`UnknownWordsWarning` (the model invents a fluent sentence that has nothing to do
with it).
"""

import warnings
from typing import List, Optional, Sequence, Tuple, Union

import torch

from fairseq_speaker.data.speaker_labels import invisible_in
from fairseq_speaker.onboarding.arguments import (
    Sentences,
    as_list,
    checked_beam,
    checked_nbest,
    checked_options,
    checked_step_args,
    not_blank,
    per_sentence,
    some,
)
from fairseq_speaker.onboarding.checkpoint import OnboardingError
from fairseq_speaker.onboarding.translator_base import TranslatorBase, serialized

#: the share of a sentence's words outside the source dictionary from which its translation is warned about ("zzz ."
#: is half unknown: its translation has nothing of it)
MOSTLY_UNKNOWN = 0.5


class UnknownWordsWarning(UserWarning):
    """A sentence translated though most of its words are not in the model's source dictionary (``<unk>``): text in
    another form than the training data's (not tokenized or BPE-encoded, full-width forms, NFD accents), or another
    language. The translation has nothing to go by."""


class TranslatorSearch(TranslatorBase):
    """A part of :class:`~fairseq_speaker.onboarding.translator.SpeakerTranslator`: see the module documentation."""

    def _not_lookalikes(self, labels: List[str]) -> List[str]:
        """``labels`` if none looks like a speaker of the model without being it (invisible characters added, another
        normalization, another space: docs/reliability.md, "Speaker labels"): such a label would silently get the
        unknown-speaker policy instead of the speaker meant."""
        dictionary = self.task.speaker_dictionary
        for i, label in enumerate(labels):
            if not label.strip():
                raise OnboardingError(f"speakers[{i}] is {'empty' if not label else 'only whitespace'}: give a "
                                      f"speaker's name (an unknown one gets the unknown-speaker policy)")
            twin = dictionary.lookalike(label) if label not in dictionary else None
            if twin is not None:
                raise OnboardingError(f"speakers[{i}]: {label!r} looks like {twin!r}, a speaker of the model, but is "
                                      f"not it (invisible characters, another space or another Unicode normalization): "
                                      f"write {twin!r}")
        return labels

    @serialized
    def translate(self, sentences: Sentences, speakers: Sentences, beam: Optional[int] = None,
                  **kwargs) -> Union[str, List[str]]:
        """Translate each sentence as its speaker (one name for all, or one per sentence). Speakers the
        model does not know get what the task's ``unknown_speaker`` says (the mean speaker by default).
        A single sentence gives a single translation."""
        hypotheses = self._search(sentences, speakers, beam, None, kwargs, warn=True)
        out = [self.hub.decode(best[0]["tokens"]) for best in hypotheses]
        return out[0] if isinstance(sentences, str) else out

    def _search(self, sentences: Sentences, speakers: Sentences, beam: Optional[int], nbest: Optional[int],
                options: dict, warn: bool) -> List[List[dict]]:
        """The beam search of :meth:`translate` and :meth:`translate_nbest`, every argument checked first (``beam``:
        the translator's own where None; ``nbest``: checked against the beam where given): each sentence's
        hypotheses, best first. ``warn``: an :class:`UnknownWordsWarning` for each sentence mostly of unknown words
        (a service says it in its answer instead)."""
        batch = some(not_blank(as_list(sentences)))
        if beam is None and options.get("sampling"):  # a sample is one draw: as many as the translations asked for
            beam = nbest or 1
        beam = checked_beam(self.hub.cfg.generation.beam if beam is None else beam)
        if nbest is not None:
            checked_nbest(nbest, beam)
        options = checked_options(options, self.hub.cfg.generation)
        if options.get("sampling") and (nbest or 1) != beam:  # fairseq-generate refuses it: not a sample
            raise OnboardingError(f"sampling draws one translation for each of the beam's {beam} hypotheses, and "
                                  f"{nbest or 1} of them is asked for (the likeliest of the draws, no longer a "
                                  f"sample): give beam=1 for one sample, or translate_nbest with nbest equal to beam")
        tokens = self._encoded(batch)
        if warn:
            for i, (unknown, words) in enumerate(map(self._unknown, tokens)):
                if unknown and unknown >= MOSTLY_UNKNOWN * words:
                    warnings.warn(f"sentences[{i}]: {unknown} of its {words} words are not in the model's source "
                                  f"dictionary (<unk>), so its translation has little to do with it: give text in the "
                                  f"form of the training data (tokenized, BPE-encoded; not full-width forms or NFD "
                                  f"accents)", UnknownWordsWarning, stacklevel=4)
                invisible = invisible_in(batch[i]) if unknown else None
                if invisible:  # "ti\u200bred" is no word of the model: the sentence was translated without it
                    warnings.warn(f"sentences[{i}] holds {invisible}, which shows nothing, and {unknown} of its words "
                                  f"are not in the model's source dictionary (<unk>): the word holding it is read as "
                                  f"an unknown word; remove the character", UnknownWordsWarning, stacklevel=4)
        checked_step_args(options, len(batch), len(self.task.target_dictionary))
        self.task.set_inference_speakers(self._not_lookalikes(per_sentence(speakers, len(batch))))
        return self.hub.generate(tokens, beam, **options)

    def source_lengths(self, sentences: Sequence[str]) -> List[int]:
        """How many tokens the model reads of each sentence (its tokenizer and BPE, the end of sentence); a sentence
        longer than the model takes is refused, naming its place in ``sentences``."""
        return [length for length, _ in self.source_counts(sentences)]

    def unknown_words(self, sentences: Sequence[str]) -> List[int]:
        """How many of each sentence's words (tokens, as the model reads them) are not in its source dictionary."""
        return [unknown for _, unknown in self.source_counts(sentences)]

    def source_counts(self, sentences: Sequence[str]) -> List[Tuple[int, int]]:
        """:meth:`source_lengths` and :meth:`unknown_words` of each sentence, from one encoding of them (a service
        asks both of every request)."""
        return [(len(tokens), self._unknown(tokens)[0])
                for tokens in self._encoded(some(not_blank(as_list(sentences))))]

    def _unknown(self, tokens: torch.Tensor) -> Tuple[int, int]:
        """(the tokens that are ``<unk>``, the tokens) of one encoded sentence, its end of sentence left out."""
        words = tokens[tokens != self.task.source_dictionary.eos()]
        return int((words == self.task.source_dictionary.unk()).sum()), len(words)

    def _encoded(self, batch: List[str]) -> List[torch.Tensor]:
        """Each sentence as the model's token ids (the hub's ``encode``); one longer than the model takes is refused,
        naming it (fairseq's batching ends in an assertion or an exception)."""
        tokens = [self.hub.encode(sentence) for sentence in batch]
        positions = self.hub.max_positions
        positions = positions[0] if isinstance(positions, tuple) else positions
        max_tokens = self.hub.cfg.dataset.max_tokens
        for i, sentence in enumerate(tokens):
            for limit, what in ((positions, "source positions the model takes"),
                                (max_tokens, "tokens of a batch (max_tokens)")):
                if limit is not None and len(sentence) > limit:
                    raise OnboardingError(f"sentences[{i}]: {len(sentence)} tokens (with the end of sentence), more "
                                          f"than the {int(limit)} {what}: split it into sentences")
        return tokens

    @serialized
    def translate_nbest(self, sentences: Sequence[str], speakers: Sentences, beam: Optional[int] = None, nbest: int = 1,
                        **kwargs) -> List[List[Tuple[str, float]]]:
        """The ``nbest`` best translations of each sentence as its speaker, best first, each with fairseq's score
        (the mean log-probability of its tokens, with their speaker's words' bias in a model that remembers them);
        the first is what :meth:`translate` gives."""
        hypotheses = self._search(sentences, speakers, beam, nbest, kwargs, warn=not self._answers_unknown_words)
        return [[(self.hub.decode(h["tokens"]), float(h["score"])) for h in best[:nbest]] for best in hypotheses]

    @serialized
    def translate_nbest_known(self, sentences: Sequence[str], speakers: Sentences, beam: Optional[int] = None,
                              nbest: int = 1, **kwargs) -> Tuple[List[List[Tuple[str, float]]], List[bool]]:
        """:meth:`translate_nbest`, and for each sentence whether the model knew its speaker when it was translated
        (False: the speaker got the unknown-speaker policy). Both come from one call, holding the translator: a
        speaker another thread imports meanwhile is known to both or to neither, so the answer says which rows
        were read."""
        labels = per_sentence(speakers, len(as_list(sentences)))
        known = [label in self.task.speaker_dictionary for label in labels]
        self._answers_unknown_words = True  # a service counts them in its answer: no warning (the lock is held)
        try:
            return self.translate_nbest(sentences, labels, beam=beam, nbest=nbest, **kwargs), known
        finally:
            self._answers_unknown_words = False
