"""The checks of what a request says, shared by translation and onboarding (:class:`RequestChecks`, a part of
:class:`~fairseq_speaker.service.speaker_service.SpeakerService`): the sentences' number, lengths and text (no blank
sentence, no lone surrogate), the label rules of a speaker's name; and how the refusals name the model and a URL
of it.
"""

import re
from typing import Sequence

from fairseq_speaker.data.sentence_checks import sentence_problem
from fairseq_speaker.data.speaker_labels import label_problem, new_label_problem, surrounding_whitespace
from fairseq_speaker.service import schema
from fairseq_speaker.service.service_errors import ServiceError
from fairseq_speaker.service.service_state import ServiceState
from fairseq_speaker.service.store_schema import DEFAULT_MODEL

#: a code point of a UTF-16 surrogate: JSON can write one alone (``"\\ud800"``), UTF-8 cannot hold it
_SURROGATE = re.compile("[\ud800-\udfff]")


class RequestChecks(ServiceState):
    """A part of :class:`~fairseq_speaker.service.speaker_service.SpeakerService` (its constructor sets what these
    read: ``model``, ``limits``, ``translator``): see the module documentation."""

    @property
    def _of_model(self) -> str:
        """`` of model 'ID'`` for a model other than the default, for messages."""
        return "" if self.model == DEFAULT_MODEL else f" of model {self.model!r}"

    @property
    def _query_also(self) -> str:
        """``, with ?model=ID`` for a model other than the default, for messages that name a URL."""
        return "" if self.model == DEFAULT_MODEL else f", with ?model={self.model}"

    @property
    def _query(self) -> str:
        """The query string that names this model in a URL (none for the default model)."""
        return "" if self.model == DEFAULT_MODEL else f"?model={self.model}"

    def _check_label(self, label: str, what: str) -> None:
        """The rules of the speaker files' labels (and of every way a speaker is added)."""
        problem = new_label_problem(label, self.translator.task.speaker_dictionary)
        if problem:
            raise ServiceError(422, "invalid_speaker", f"{what}: {problem}")

    def _unknown(self, name: str, message: str) -> ServiceError:
        """The 404 ``unknown_speaker`` of ``name`` (``message``), or, for a name no speaker can have (a control or
        invisible character: the label policy), the 422 that a PUT of it would get: a 404 would tell to onboard it."""
        problem = label_problem(name) or surrounding_whitespace(name)
        if problem:
            return ServiceError(422, "invalid_speaker", f"speaker name: {problem}")
        return ServiceError(404, "unknown_speaker", message)

    def _check_lengths(self, sentences: Sequence[str], field: str) -> None:
        for i, sentence in enumerate(sentences):
            if len(sentence) > self.limits.max_chars:
                raise ServiceError(413, "sentence_too_long",
                                   f"{field}[{i}] has {len(sentence)} characters; at most {self.limits.max_chars} "
                                   f"(fairseq-speaker-serve --max-chars)")

    def _check_pairs(self, request: schema.SentencePairs, limit: int) -> None:
        if len(request.sources) > limit:
            raise ServiceError(413, "too_many_pairs",
                               f"{len(request.sources)} sentence pairs in one request; at most {limit} "
                               f"(fairseq-speaker-serve --max-pairs)")
        self._check_lengths(request.sources, "sources")
        self._check_lengths(request.targets, "targets")
        self._check_text(request.sources, "sources")
        self._check_text(request.targets, "targets")

    def _check_text(self, sentences: Sequence[str], field: str) -> None:
        """An empty sentence would be answered with an invented one, and a speaker fitted on the end of sentence; a
        lone surrogate (JSON's ``"\\ud800"``) is no text, and could not be stored."""
        for i, sentence in enumerate(sentences):
            surrogate = _SURROGATE.search(sentence)
            blank = None if surrogate else sentence_problem(sentence)
            if blank:
                raise ServiceError(422, "invalid_request", f"{field}[{i}] is {blank}: give a sentence (or leave it "
                                   f"out)")
            if surrogate:
                raise ServiceError(422, "invalid_request", f"{field}[{i}] holds a lone surrogate "
                                   f"({surrogate.group()!r} at character {surrogate.start()}), which is not text: "
                                   f"send characters, not halves of UTF-16 pairs")
