"""A model's service kept in step with its speakers in the store (:class:`StoreSync`, a part of
:class:`~fairseq_speaker.service.speaker_service.SpeakerService`): the store bound to the model as the service
starts (or its speakers refitted on a reloaded model of another fingerprint), each request's sync (one read of the
store's generation; the rows of the speakers that changed, put in the translator in one import), stored speakers
that cannot be used logged and left unused, and the store's failures as the service answers them
(:func:`unavailable`).
"""

import logging
import sqlite3
from typing import Dict, List, Tuple

import numpy as np

from fairseq_speaker.data.speaker_labels import shown, visible_form
from fairseq_speaker.errors import UserError
from fairseq_speaker.onboarding.vectors_file import SpeakerVectors, read_speaker_vectors, vectors_bytes
from fairseq_speaker.service.service_errors import ServiceError
from fairseq_speaker.service.service_state import ServiceState
from fairseq_speaker.service.store import SpeakerStore
from fairseq_speaker.service.store_errors import (StoreConflict, StoreDamaged, StoreError, StoreFileGone,
                                                  StoreModelMismatch, StoreUnavailable)
from fairseq_speaker.service.store_schema import StoredSpeaker, fingerprint_of, speaker_text

#: the logger of :mod:`~fairseq_speaker.service.speaker_service`, whose part this is (a logging configuration names it)
logger = logging.getLogger("fairseq_speaker.service.speaker_service")


class StoreSync(ServiceState):
    """A part of :class:`~fairseq_speaker.service.speaker_service.SpeakerService` (its constructor sets the state
    these keep: ``_loaded``, ``_seen_generation``, ``_imported``, ``_skipped``; see there): see the module
    documentation."""

    def _bind(self, refit: bool) -> None:
        where = self.translator.checkpoint
        try:
            if self.not_adaptable is None:
                try:
                    self.store.bind(self.fingerprint, where, model=self.model)
                except StoreModelMismatch:
                    if not refit:
                        raise
                    self._refit_stored()
            held = list(self._readable_versions(strict=True)[1])
        except sqlite3.Error as e:
            raise _unreadable(self.store, e) from None
        if held and self.not_adaptable is not None:
            raise StoreError(f"--store {self.store.path} holds {len(held)} onboarded speakers, but "
                             f"{self.not_adaptable}")
        clash = [name for name in held if name in self._trained]
        if clash:
            raise StoreError(
                f"--store {self.store.path} holds speaker(s) {', '.join(map(shown, clash[:5]))} that {where} was "
                f"trained with (a checkpoint saved with onboarded speakers?): serve it with a new --store file, or "
                f"serve the checkpoint the store was made for")
        self.sync(strict=True)

    def _refit_stored(self) -> None:
        """Fit each stored speaker of this model id on this service's model from its sentences, and store the rows
        with this model's fingerprint in one transaction (see ``refit`` in the documentation of
        :class:`~fairseq_speaker.service.speaker_service.SpeakerService`)."""
        _, versions = self.store.versions(self.model)
        if any(name in self._trained for name in versions):
            return  # refused by _bind, with its message, before anything is written
        rows = {}
        for name in versions:
            record = self.store.get(name, model=self.model)
            if record is None:
                raise StoreError(f"--store {self.store.path}: speaker {self._shown(name)} was deleted while the "
                                 f"speakers were refitted: load the model again")
            try:
                vectors, _ = self.translator.fit_speaker(name, [s for s, _ in record.pairs or []],
                                                         [t for _, t in record.pairs or []])
            except UserError as e:
                raise StoreError(f"cannot refit the stored speaker {self._shown(name)} on {self.translator.checkpoint} "
                                 f"from its sentences: {e}") from None
            rows[name] = vectors_bytes(vectors)
        try:
            self.store.rebind(self.model, self.fingerprint, self.translator.checkpoint, rows, versions)
        except StoreConflict as e:
            raise StoreError(f"--store {self.store.path}: {e}: load the model again") from None
        self.refitted = sorted(rows)

    def _shown(self, name: str) -> str:
        """The speaker ``name`` of this model, as messages name it."""
        return speaker_text(self.model, name)

    def _readable_versions(self, strict: bool) -> Tuple[int, Dict[str, int], Dict[str, str]]:
        """The store's generation, its speakers' versions and those whose records cannot be read (with why): the
        last only with ``--skip-broken-speakers`` or after the start, the start refusing a damaged store otherwise."""
        try:
            generation, versions = self.store.versions(self.model)
            return generation, versions, {}
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) or (strict and not self.skip_broken_speakers):
                raise
        return self.store.readable_versions(self.model)

    def _broken(self, name: str, version: int, problem: str, strict: bool) -> None:
        """A stored speaker that cannot be used: the start is refused (``strict``, without --skip-broken-speakers),
        otherwise it is logged and left unused."""
        if strict and not self.skip_broken_speakers:
            raise StoreDamaged(self.store.path, problem, name)
        logger.error(f"--store {self.store.path}: skipped speaker {self._shown(name)}: {problem}; it is left unused (restore the "
                     f"store from a backup, or onboard the speaker again)")
        self._skipped[name] = version

    def sync(self, strict: bool = False) -> None:
        """Bring the translator's onboarded speakers in step with the store (see the module documentation).
        Stored speakers that cannot be read, or whose rows this model refuses, stop the start-up (``strict``) unless
        ``skip_broken_speakers``; later they are logged and left unused."""
        with self._lock:
            try:
                if self.store.generation() == self._seen_generation:
                    return
                generation, versions, broken = self._readable_versions(strict)
                for name, problem in broken.items():
                    if name not in self._skipped:
                        self._broken(name, -1, problem, strict)
                changed = [name for name, version in versions.items()
                           if self._loaded.get(name) != version and self._skipped.get(name) != version]
                records = []
                for name in changed:
                    try:
                        record = self.store.get(name, model=self.model)
                    except StoreDamaged as e:
                        self._broken(name, versions[name], e.what, strict)
                        continue
                    if record is not None:  # None: deleted meanwhile
                        records.append(record)
                self._install(records, strict)
                deleted = [n for n in self._loaded if n not in versions and n not in broken]
                for name in deleted:
                    del self._loaded[name]
                self._retire(deleted)
                self._release_twins_of(deleted)
                for name in [n for n in self._skipped if n not in versions]:  # deleted as it was skipped
                    self._skipped.pop(name)
                    self._twin_of.pop(name, None)
                self._seen_generation = generation
            except sqlite3.Error as e:
                if strict:
                    raise _unreadable(self.store, e) from None
                raise unavailable(self.store, e) from None

    def _install(self, records: List[StoredSpeaker], strict: bool) -> None:
        """Put the rows of ``records`` in the translator, in one import (a table grows once, not per speaker)."""
        usable = []
        for record in self._not_lookalikes(records):
            try:
                if record.name in self._trained:  # written by a process whose model lacks it (see _bind)
                    raise StoreError(f"store speaker {self._shown(record.name)} is a trained speaker of this model")
                vectors = read_speaker_vectors(record.rows,
                                               where=f"{self.store.path}: speaker {self._shown(record.name)}")
                if vectors.names != [record.name]:
                    raise StoreError(f"{self.store.path}: the rows of speaker {self._shown(record.name)} are named "
                                     f"{vectors.names}: the store is damaged")
                if fingerprint_of(vectors.meta) != self.fingerprint:
                    raise StoreError(f"{self.store.path}: the rows of speaker {self._shown(record.name)} are not this "
                                     f"model's: another process reloaded model {self.model!r} with another checkpoint "
                                     f"(reload this one too: POST /models/{self.model}/reload), or the store is "
                                     f"damaged")
            except UserError as e:
                self._broken(record.name, record.version, str(e), strict)
                continue
            usable.append((record, vectors))
        if not usable:
            return
        first = usable[0][1]
        rows = {key: np.concatenate([v.rows[key] for _, v in usable]) for key in first.rows}
        # each speaker's words: with their rows from a process whose model remembers words, else from their sentences
        words = [w for r, v in usable
                 for w in (v.words if v.words is not None else [self._sentence_words(r)] * len(v.names))]
        together = SpeakerVectors([r.name for r, _ in usable], rows, dict(first.meta, speakers=len(usable)),
                                  f"{self.store.path}", words)
        self._restore([r.name for r, _ in usable])
        self.translator.import_speakers(together, replace=True)  # a deleted name's retired rows are overwritten
        self._imported.update(r.name for r, _ in usable)
        for record, _ in usable:
            self._loaded[record.name] = record.version

    def _not_lookalikes(self, records: List[StoredSpeaker]) -> List[StoredSpeaker]:
        """``records`` without those whose names look like a speaker's of the translator, or an earlier record's, but
        are not it: those are logged and left unused (the translator would refuse the import of all of them). A store
        written by fairseq-speaker before schema 3 could hold two such names onboarded by two replicas at one moment:
        the earlier onboarded is served."""
        dictionary = self.translator.task.speaker_dictionary
        kept, forms = [], {}
        for record in sorted(records, key=lambda r: (r.created, r.name)):
            twin = dictionary.lookalike(record.name) if record.name not in dictionary else None
            twin = twin or forms.setdefault(visible_form(record.name), record.name)
            if twin != record.name:
                logger.error(f"--store {self.store.path}: skipped speaker {self._shown(record.name)}: it looks like "
                             f"{twin!r}, a speaker of this model; it is left unused: delete the one that is wrong "
                             f"(DELETE /speakers/NAME, either of the two)")
                self._skipped[record.name] = record.version
                self._twin_of[record.name] = twin
                continue
            kept.append(record)
        return kept

    def _release_twins_of(self, names: List[str]) -> None:
        """Store speakers skipped as lookalikes of ``names`` (deleted) are read again at the next sync: with the
        speaker they looked like gone, they are served, as a restarted service would serve them."""
        for twin in [t for t, of in self._twin_of.items() if of in names]:
            self._skipped.pop(twin, None)
            del self._twin_of[twin]

    def _retire(self, names: List[str]) -> None:
        """The rows of deleted speakers stay in the translator's table, unused, under a name no speaker can have
        (``retire_speakers``): a deleted speaker is translated with the unknown-speaker policy, and a new speaker may
        look like it, as in a service that never had it (another replica, or this one restarted). Their words are
        forgotten: they would shape the others' neighbours."""
        names = [name for name in names if name in self._imported]
        if names:
            self.translator.retire_speakers(names)
            self._imported.difference_update(names)

    def _restore(self, names: List[str]) -> None:
        """Speakers onboarded again get the rows they had before they were deleted back, to be overwritten (the table
        does not grow)."""
        self._imported.update(self.translator.restore_speakers(names))

    def _sentence_words(self, record: StoredSpeaker):
        """The words of a stored speaker's translations, for a model that remembers its speakers' words (none: an
        empty set; a record whose sentences this model cannot read keeps none, logged)."""
        try:
            found = self.translator.sentence_words(record.pairs or [])
        except UserError as e:
            logger.error(f"{self.store.path}: speaker {record.name!r}: {e}: their words are not remembered")
            found = None
        return found if found is not None else np.zeros(0, np.int64)

    def _forget(self, name: str) -> None:
        """After a failed write: the translator's rows of ``name`` are read from the store again at the next sync
        (and until then not used: every request syncs first)."""
        self._loaded[name] = -1
        self._seen_generation = -1

    @property
    def onboarded(self) -> List[str]:
        with self._lock:
            return [name for name, version in self._loaded.items() if version >= 0]

    def _store_call(self, method, *args):
        try:
            return method(*args)
        except sqlite3.Error as e:
            raise unavailable(self.store, e) from None
        except StoreDamaged as e:
            raise damaged(e, "this speaker's record") from None


def _unreadable(store: SpeakerStore, error: sqlite3.Error) -> StoreError:
    """The refusal of a store that cannot be read as the service starts."""
    if isinstance(error, StoreUnavailable):  # a database server: its message says what failed
        return StoreError(f"--store {store.path}: {error}: retry once it answers")
    if isinstance(error, sqlite3.DatabaseError) and not isinstance(error, sqlite3.OperationalError):
        return StoreDamaged(store.path, f"the file is damaged ({error})")
    return StoreError(f"--store {store.path}: cannot be read ({error}): is another program holding it? Retry, or "
                      f"check it with sqlite3 {store.path} 'PRAGMA integrity_check'")


def unavailable(store: SpeakerStore, error: Exception) -> ServiceError:
    logger.error(f"speaker store {store.path}: {error}")
    if isinstance(error, StoreFileGone):  # retrying cannot help: the operator must restore the file and restart
        return ServiceError(503, "store_unavailable", "the speaker store's file was removed or replaced while the "
                            "service ran: nothing more is written to it; the service's log says how to recover")
    return ServiceError(503, "store_unavailable", "the speaker store cannot be read or written now (busy or failing); "
                        "retry later")


def damaged(error: StoreDamaged, what: str) -> ServiceError:
    """The answer to a request that needs ``what`` of a store that cannot read it: 503, the way to recover logged."""
    logger.error(str(error))
    return ServiceError(503, "store_damaged", f"the speaker store cannot read {what} ({error.what}): the service's "
                        f"log says how to recover")
