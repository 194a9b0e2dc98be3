"""A model's speakers as its service lists, shows and changes them (:class:`SpeakerOnboarding`, a part of
:class:`~fairseq_speaker.service.speaker_service.SpeakerService`): a speaker onboarded, given more sentences or
deleted, one write at a time (:meth:`~SpeakerOnboarding._write_turn`); each fitted on a copy of the model while
translations go on, committed to the store, and only then put in the translator (:meth:`~SpeakerOnboarding._commit`).
"""

import contextlib
import sqlite3
from typing import List, Optional, Sequence, Tuple

from fairseq_speaker.data.speaker_labels import shown
from fairseq_speaker.errors import UserError
from fairseq_speaker.onboarding.fit import FitReport
from fairseq_speaker.onboarding.vectors_file import SpeakerVectors, vectors_bytes
from fairseq_speaker.service import schema
from fairseq_speaker.service.request_checks import RequestChecks
from fairseq_speaker.service.service_errors import Retired, ServiceError, timed_out
from fairseq_speaker.service.store_errors import StoreConflict, StoreDamaged, StoreError
from fairseq_speaker.service.store_schema import StoredSpeaker
from fairseq_speaker.service.store_sync import StoreSync, damaged, unavailable


class SpeakerOnboarding(StoreSync, RequestChecks):
    """A part of :class:`~fairseq_speaker.service.speaker_service.SpeakerService` (its constructor sets ``_writing``,
    the lock of the process's turn to write): see the module documentation."""

    def speakers(self) -> schema.SpeakerList:
        with self._lock:
            self.sync()
            onboarded = [s for s in self._store_call(self.store.speakers, self.model) if s.name in self._loaded]
        return schema.SpeakerList(speakers=self._with_traits([self._trained_speaker(name) for name in self.trained]
                                                             + [_onboarded(s) for s in onboarded]))

    def speaker(self, name: str) -> schema.Speaker:
        with self._lock:
            self.sync()
            if name in self._trained:
                return self._with_traits([self._trained_speaker(name)])[0]
            record = self._store_call(self.store.get, name, False, self.model) if name in self._loaded else None
        if record is None:
            raise self._unknown(name, f"no speaker {shown(name)}{self._of_model}: GET /speakers{self._query} lists "
                                f"them")
        return self._with_traits([_onboarded(record)])[0]

    def _with_traits(self, speakers: List[schema.Speaker]) -> List[schema.Speaker]:
        """``speakers`` with what their words suggest, where the model keeps kinds of speaker (read in one call of the
        translator, between two beam searches)."""
        traits = self.translator.speaker_traits(list(dict.fromkeys(s.name for s in speakers)), known_only=True)
        if traits is None:
            return speakers
        return [s.model_copy(update={"traits": [schema.Trait(trait=t.trait, kind=t.kind, kinds=t.kinds,
                                                             probability=t.probability, evidence=t.evidence,
                                                             words=list(t.words)) for t in traits.get(s.name, [])]})
                for s in speakers]

    def onboard(self, name: str, request: schema.OnboardRequest) -> Tuple[schema.OnboardResponse, bool]:
        """Fit ``name`` on the request's sentences and store it; returns the answer and whether it is new."""
        self._check_writable()
        self._check_pairs(request, self.limits.max_pairs)
        with self._write_turn():
            with self._lock:
                self.sync()
                self._check_label(name, what="speaker name")
                self._check_not_trained(name)
                exists = name in self._loaded
            if exists and not request.replace:
                raise ServiceError(409, "speaker_exists",
                                   f"speaker {shown(name)} is already onboarded: send \"replace\": true to fit it "
                                   f"again from these sentences alone, or POST /speakers/{{name}}/sentences to add "
                                   f"sentences{self._query_also}")
            pairs = list(zip(request.sources, request.targets))
            vectors, report = self._fit(name, pairs)  # translations go on meanwhile
            record = self._commit(name, pairs, vectors, expect=None, replace=request.replace)
        return schema.OnboardResponse(speaker=self._with_traits([_onboarded(record)])[0], fit=_fit(report)), not exists

    def add_sentences(self, name: str, request: schema.SentencePairs) -> schema.OnboardResponse:
        """Refit an onboarded speaker on its stored sentences and these; store it."""
        self._check_writable()
        self._check_pairs(request, self.limits.max_pairs)
        with self._write_turn():
            with self._lock:
                self.sync()
                self._check_not_trained(name)
                record = self._store_call(self.store.get, name, True, self.model) if name in self._loaded else None
            if record is None:
                raise self._unknown(name, f"no onboarded speaker {shown(name)}{self._of_model}: PUT "
                                          f"/speakers/{{name}}{self._query} onboards it")
            pairs = list(record.pairs) + list(zip(request.sources, request.targets))
            if len(pairs) > self.limits.max_speaker_pairs:
                raise ServiceError(413, "too_many_pairs",
                                   f"speaker {shown(name)} would be fitted on {len(pairs)} sentence pairs; at most "
                                   f"{self.limits.max_speaker_pairs} (fairseq-speaker-serve --max-speaker-pairs)")
            vectors, report = self._fit(name, pairs)
            stored = self._commit(name, pairs, vectors, expect=record.version, replace=False)
        return schema.OnboardResponse(speaker=self._with_traits([_onboarded(stored)])[0], fit=_fit(report))

    def delete(self, name: str) -> schema.Deleted:
        self._check_writable()
        with self._write_turn(), self._lock:
            self.sync()
            if name in self._trained:
                raise ServiceError(409, "trained_speaker",
                                   f"speaker {shown(name)} was trained with the model: only onboarded speakers can be "
                                   f"deleted")
            # a speaker skipped at the sync (a lookalike of another, rows this model refuses) is deleted too: it
            # was a 404, and the one the log told to delete could not be
            stored = name in self._loaded or name in self._skipped
            if not stored or not self._store_call(self.store.delete, name, self.model):
                raise self._unknown(name, f"no onboarded speaker {shown(name)}{self._of_model}")
            self._skipped.pop(name, None)
            self._twin_of.pop(name, None)
            if name in self._loaded:
                del self._loaded[name]  # its rows stay in the table, unused (see speaker_service's documentation)
                self._retire([name])
                self._release_twins_of([name])
        return schema.Deleted(deleted=name)

    # -- helpers --------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _write_turn(self):
        """This process's turn to write, waited for at most ``--request-timeout``; :class:`Retired` once the model was
        reloaded or removed."""
        if not self._writing.acquire(timeout=self.batching.request_timeout):
            raise timed_out("waiting for the onboarding before this one", self.batching.request_timeout)
        try:
            if self.retired is not None:
                raise Retired(self.model)
            yield
        finally:
            self._writing.release()

    def _fit(self, name: str, pairs: Sequence[Tuple[str, str]]) -> Tuple[SpeakerVectors, FitReport]:
        """Fit ``name`` from the mean speaker on all of ``pairs`` (so that its rows depend on its sentences
        alone, whichever process fits them), on a copy of the model: the translator is not changed."""
        sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
        try:
            return self.translator.fit_speaker(name, sources, targets)
        except UserError as e:
            raise ServiceError(422, "invalid_request", str(e)) from None

    def _commit(self, name: str, pairs, vectors: SpeakerVectors, expect: Optional[int],
                replace: bool) -> StoredSpeaker:
        """Store the speaker's rows, then put them in the translator: translated with them once they are stored."""
        try:
            record = self.store.put(name, vectors_bytes(vectors), pairs, expect=expect, replace=replace,
                                    model=self.model, fingerprint=self.fingerprint)
        except StoreConflict as e:
            if e.reason == "model":
                raise ServiceError(409, "model_changed", f"{e}: nothing was changed; reload model {self.model!r} in "
                                   f"this process too (POST /models/{self.model}/reload), then retry") from None
            if e.reason == "lookalike":
                raise ServiceError(422, "invalid_speaker", f"speaker name: {e}") from None
            if e.reason == "exists":
                raise ServiceError(409, "speaker_exists", f"{e} (onboarded by another process meanwhile): send "
                                   f"\"replace\": true to fit it again from these sentences alone") from None
            raise ServiceError(409, "conflict", f"{e}: nothing was changed; read the speaker again and retry") from None
        except sqlite3.Error as e:
            raise unavailable(self.store, e) from None
        except StoreDamaged as e:  # e.g. the record of the model the store was made for
            raise damaged(e, "what it needs to store this speaker") from None
        except StoreError as e:
            raise ServiceError(422, "invalid_speaker", str(e)) from None
        with self._lock:
            try:
                self._restore([name])
                self.translator.import_speakers(vectors, replace=True)  # a deleted name's retired rows are overwritten
                self._imported.add(name)
            except BaseException:
                self._forget(name)  # stored: the next request reads it from the store
                raise
            self._loaded[name] = record.version
        return record

    def _check_writable(self) -> None:
        if self.not_adaptable is not None:
            raise ServiceError(409, "not_adaptable", self.not_adaptable)

    def _check_not_trained(self, name: str) -> None:
        if name in self._trained:
            raise ServiceError(409, "trained_speaker",
                               f"speaker {shown(name)} was trained with the model: its rows are the checkpoint's and "
                               f"are not changed by the service; onboard the person under another name")

    def _trained_speaker(self, name: str) -> schema.Speaker:
        return schema.Speaker(name=name, kind="trained", sentences=self._counts.get(name, 0))


def _onboarded(record: StoredSpeaker) -> schema.Speaker:
    return schema.Speaker(name=record.name, kind="onboarded", sentences=record.sentences, created=record.created,
                          updated=record.updated)


def _fit(report: FitReport) -> schema.Fit:
    return schema.Fit(tokens=report.tokens, loss_before=report.loss_before, loss_after=report.loss_after,
                      iterations=report.iterations, seconds=report.seconds)
