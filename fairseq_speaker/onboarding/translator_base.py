"""What every part of :class:`~fairseq_speaker.onboarding.translator.SpeakerTranslator` reads: its state (set by its
constructor), the lock each public call holds (:func:`serialized`), the model and task it serves, the model's
speakers, the model's :class:`~fairseq_speaker.onboarding.adapter.SpeakerAdapter` and the encoding of raw sentence
pairs as the model's inputs (:meth:`TranslatorBase.encode_pairs`).
"""

import functools
import os
import threading
from typing import List, Optional, Sequence, Tuple

from fairseq import hub_utils

from fairseq_speaker.atomic_write import check_not_an_input
from fairseq_speaker.data import preprocessing
from fairseq_speaker.data.speaker_labels import is_retired_name
from fairseq_speaker.modules.speaker_words import speaker_words_of
from fairseq_speaker.onboarding.adaptation_sentences import check_pair_counts
from fairseq_speaker.onboarding.adapter import SpeakerAdapter
from fairseq_speaker.onboarding.arguments import Sentences, as_list, checked_path, name_list, not_blank
from fairseq_speaker.onboarding.checkpoint import OnboardingError, adaptable_bias
from fairseq_speaker.onboarding.fit_options import FitOptions
from fairseq_speaker.onboarding.prior import prior_of_checkpoint


def serialized(method):
    """Run ``method`` holding the translator's lock (see the documentation of
    :mod:`~fairseq_speaker.onboarding.translator`)."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return locked


class TranslatorBase:
    """The state of a :class:`~fairseq_speaker.onboarding.translator.SpeakerTranslator`, set by its constructor, and
    what its parts (:class:`~fairseq_speaker.onboarding.translator_search.TranslatorSearch`,
    :class:`~fairseq_speaker.onboarding.translator_onboarding.TranslatorOnboarding`,
    :class:`~fairseq_speaker.onboarding.translator_words.TranslatorWords`) share."""

    #: fairseq's hub interface of the loaded model: loading, tokenization and BPE, generation
    hub: hub_utils.GeneratorHubInterface
    #: the checkpoint's path, as given
    checkpoint: str
    #: the checkpoint's absolute path, taken when it was loaded
    _checkpoint_file: Optional[str]
    _fit: Optional[FitOptions]
    _adapter: Optional[SpeakerAdapter]
    _lock: threading.RLock
    #: (the hub's tokenizer, the same for target sentences): :meth:`encode_pairs`
    _target_tokenizer: Optional[tuple]
    #: the checkpoint as it was read, without the weights
    _state: dict
    #: True while a caller that counts the unknown words itself searches (no warning: translator_search)
    _answers_unknown_words: bool = False

    @property
    def task(self):
        return self.hub.task

    @property
    def model(self):
        return self.hub.models[0]

    @property
    def speakers(self) -> List[str]:
        """The speakers the model knows, in the order of their rows (not the rows of retired speakers:
        ``retire_speakers``)."""
        with self._lock:
            return [name for name in self.task.speaker_dictionary.names if name == name.strip()]

    @property
    def adapter(self) -> SpeakerAdapter:
        if self._adapter is None:
            self._adapter = self._new_adapter(self.model, self.task)
        return self._adapter

    def _new_adapter(self, model, task) -> SpeakerAdapter:
        """The adapter of ``model`` (this translator's, or a copy of it:
        :meth:`~fairseq_speaker.onboarding.translator_onboarding.TranslatorOnboarding.fit_speaker`)."""
        return SpeakerAdapter(model, task, self._fit,
                              prior=prior_of_checkpoint(self._state, adaptable_bias(model, task)))

    def encode_pairs(self, sources: Sentences, targets: Sentences, named: Tuple[str, str] = ("sources", "targets")):
        """Token ids of raw sentence pairs, tokenized and BPE-encoded as the model's inputs are (the targets with
        the target language's tokenization rules, where the tokenizer has languages: Moses); ``named``: the two
        lists' names in a refusal."""
        source_name, target_name = named
        sources, targets = as_list(sources, source_name), as_list(targets, target_name)
        check_pair_counts(sources, targets, named)
        tokenizer = self.hub.tokenizer
        if self._target_tokenizer is None or self._target_tokenizer[0] is not tokenizer:
            self._target_tokenizer = (tokenizer, preprocessing.for_target(tokenizer))
        target_tokenizer = self._target_tokenizer[1]
        sources = [self.hub.apply_bpe(self.hub.tokenize(x)) for x in not_blank(sources, source_name)]
        targets = [self.hub.apply_bpe(target_tokenizer.encode(x) if target_tokenizer is not None else x)
                   for x in not_blank(targets, target_name)]
        return self.adapter.encode(sources, targets)

    def _known_names(self, names: Sequence[str], method: str, done: str) -> List[str]:
        """``names``, a list of speakers of the model; else :class:`OnboardingError` in the words of ``method``."""
        names = name_list(names, method, empty=False, every=False)
        unknown = [name for name in names  # a retired speaker's rows (retire_speakers) are no speaker's
                   if name not in self.task.speaker_dictionary or is_retired_name(name)]
        if unknown:
            raise OnboardingError(f"{method}: no speaker(s) {', '.join(map(repr, unknown[:5]))} in the model "
                                  f"(translator.speakers lists them): nothing was {done}")
        return names

    def _forget_words_of(self, names: Sequence[str]) -> None:
        """The memory of the speakers' words (if the model has one) forgets those of ``names``."""
        words = speaker_words_of(self.model)
        if words is not None:
            words.forget([self.task.speaker_dictionary.index(name) for name in names])

    def _output(self, path, what: str) -> str:
        """``path``, a file :meth:`save` or :meth:`export_speakers` writes, as text; refused where it is a file this
        translator reads (its checkpoint, a file of its data folder): the write would replace it whole."""
        path = checked_path(path, what)
        data = getattr(self.task.cfg, "data", None)
        check_not_an_input(path, what, [("the checkpoint this translator was loaded from", self._checkpoint_file)],
                           [("the data folder", data.split(os.pathsep)[0] if data else None)])
        return path
