"""Translation by a model's service (:class:`Translating`, a part of
:class:`~fairseq_speaker.service.speaker_service.SpeakerService`): a request checked and its sentences given the
labels they are translated as after a sync with the store (:meth:`~Translating.prepare_translation`), queued for a
beam search shared with other requests (:meth:`~Translating.submit`), and answered with what the search found
(:meth:`~Translating.answer`).
"""

from concurrent.futures import Future
from dataclasses import dataclass
from typing import List, NamedTuple, Optional

from fairseq_speaker.data.speaker_labels import shown
from fairseq_speaker.errors import UserError
from fairseq_speaker.service import schema
from fairseq_speaker.service.batcher import Hypotheses, QueueFull
from fairseq_speaker.service.request_checks import RequestChecks
from fairseq_speaker.service.service_errors import Retired, ServiceError, timed_out
from fairseq_speaker.service.store_sync import StoreSync


@dataclass
class PreparedTranslation:
    """A checked /translate request: its sentences, the labels they are translated as, and how to answer."""

    sentences: List[str]
    speakers: List[str]  # as asked
    as_labels: List[str]  # as the translator takes them
    beam: int
    nbest: int
    tokens: Optional[List[int]] = None  # each sentence's source tokens, with a batch token cap
    unknown_words: Optional[List[int]] = None  # each sentence's source tokens outside the model's dictionary


class Searched(NamedTuple):
    """One sentence as the beam search translated it: its n best, and whether the model knew its speaker then."""

    best: Hypotheses  # of this one sentence: [(text, score)], best first
    known: bool


class Translating(StoreSync, RequestChecks):
    """A part of :class:`~fairseq_speaker.service.speaker_service.SpeakerService`: see the module documentation."""

    def prepare_translation(self, request: schema.TranslateRequest,
                            wait: bool = True) -> Optional[PreparedTranslation]:
        """Check a request and choose the label each sentence is translated as (after a sync with the store).
        With ``wait=False``, None instead of waiting: when another request holds the service's bookkeeping, or
        the store changed (its rows are read, which waits for the translator); the event loop asks so first."""
        sentences, labels = list(request.sentences), request.labels()
        if not sentences:
            raise ServiceError(422, "invalid_request", "no sentences: give at least one")
        if len(sentences) > self.limits.max_sentences:
            raise ServiceError(413, "too_many_sentences",
                               f"{len(sentences)} sentences in one request; at most {self.limits.max_sentences} "
                               f"(fairseq-speaker-serve --max-sentences): split the request")
        self._check_lengths(sentences, "sentences")
        self._check_text(sentences, "sentences")
        beam = request.beam if request.beam is not None else self.beam
        if beam > self.limits.max_beam:
            raise ServiceError(422, "invalid_request", f"beam: {beam} is over this service's largest beam, "
                               f"{self.limits.max_beam} (fairseq-speaker-serve --max-beam): ask for a smaller one")
        if request.nbest > beam:
            raise ServiceError(422, "invalid_request", f"nbest: {request.nbest} translations of each sentence need a "
                               f"beam of at least {request.nbest} (the beam is {beam}): lower nbest or raise beam")
        if not self._lock.acquire(blocking=wait):
            return None
        try:
            if wait:
                self.sync()
            elif self._store_call(self.store.generation) != self._seen_generation:
                return None  # (where it has not moved, sync() has nothing to do: one read of the store, not two)
            for label in dict.fromkeys(labels):  # named as the request gives it: speaker, or speakers[i]
                self._check_label(label, what="speaker" if request.speakers is None
                                  else f"speakers[{request.speakers.index(label)}]")
            known = self._trained | set(self._loaded)
            unknown = [label for label in dict.fromkeys(labels) if label not in known]
            if unknown and self.policy == "fail":
                raise ServiceError(404, "unknown_speaker",
                                   f"unknown speaker(s) {', '.join(map(shown, unknown[:5]))}: the service translates "
                                   f"only speakers it knows (--unknown-speaker fail); GET /speakers{self._query} "
                                   f"lists them")
            as_labels = labels  # a deleted speaker's rows are retired (StoreSync._retire): its name is no row's
        finally:
            self._lock.release()
        # the tokens as the translator will read the sentences (the model's tokenizer and BPE, its end of sentence);
        # one longer than the model takes is refused here, by its place in this request (not in a shared batch)
        try:
            counts = self.translator.source_counts(sentences)
        except UserError as e:
            raise ServiceError(413, "sentence_too_long", str(e)) from None
        return PreparedTranslation(sentences, labels, as_labels, beam, request.nbest,
                                   [length for length, _ in counts] if self.batching.max_batch_tokens else None,
                                   [unknown for _, unknown in counts])

    def submit(self, prepared: PreparedTranslation) -> "Future[List[Searched]]":
        """Queue a prepared request for a shared beam search (503 when the queue is full)."""
        try:
            return self.batcher.submit(prepared.sentences, prepared.as_labels, prepared.beam, prepared.nbest,
                                       prepared.tokens)
        except QueueFull as e:
            if self.retired is not None:
                raise Retired(self.model) from None
            raise ServiceError(503, "overloaded", f"{e}: retry later", headers={"Retry-After": "1"}) from None

    def answer(self, prepared: PreparedTranslation, results: List[Searched]) -> schema.TranslateResponse:
        """The response to a prepared request, from each of its sentences as the search translated it: whether the
        unknown-speaker policy was applied is what the search found, not what the request's admission saw (a speaker
        onboarded in between is translated with its rows, and said to be)."""
        return schema.TranslateResponse(
            translations=[schema.Translation(
                text=found.best[0][0], speaker=label, unknown_speaker_policy_applied=not found.known,
                unknown_words=unknown,
                hypotheses=[schema.Hypothesis(text=text, score=score) for text, score in found.best]
                if prepared.nbest > 1 else None)
                for found, label, unknown in zip(results, prepared.speakers,
                                                 prepared.unknown_words or [0] * len(results))],
            unknown_speaker_policy=self.policy, model=self.model)

    def translate(self, request: schema.TranslateRequest) -> schema.TranslateResponse:
        """A request translated in a shared beam search, waiting at most ``--request-timeout`` (for callers in
        threads; the HTTP endpoint waits without holding a thread)."""
        prepared = self.prepare_translation(request)
        future = self.submit(prepared)
        try:
            results = future.result(timeout=self.batching.request_timeout)
        except TimeoutError:
            future.cancel()
            raise timed_out("the translation", self.batching.request_timeout) from None
        except UserError as e:
            raise ServiceError(422, "invalid_request", str(e)) from None
        return self.answer(prepared, results)

    def _translate_batch(self, sentences: List[str], labels: List[str], beam: int, nbest: int) -> List[Searched]:
        """A shared beam search; each sentence's speaker known or not as the search read the rows."""
        best, known = self.translator.translate_nbest_known(sentences, labels, beam=beam, nbest=nbest,
                                                            **self.generate)
        return [Searched(b, k) for b, k in zip(best, known)]
