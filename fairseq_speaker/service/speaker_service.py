"""What the service does, without HTTP: a translator kept in step with the speaker store, under limits.

The store is the source of truth for onboarded speakers. Every request first brings the translator in step
with it (one read of the store's generation; the changed speakers' rows when it moved), so that a request
sees every write committed, by this process or another, before it began. A write fits the speaker on a copy
of the model (:meth:`SpeakerTranslator.fit_speaker`), commits its rows to the store, and only then puts them
in the translator, in one call: a speaker is translated with its new rows once they are stored, and a write
the store refuses (another process got there first) leaves the translator as it was.

Speakers the model was trained with ("trained") are the checkpoint's: they are translated, listed and shown,
never replaced, updated or deleted here. A deleted speaker's rows stay in the translator's table (a table does
not shrink) but are no longer used: the speaker gets the unknown-speaker policy again, as any unknown name.

Translations go through the :class:`~fairseq_speaker.service.batcher.Batcher`: concurrent requests share beam
searches, each sentence with its own speaker. Writes take turns (one fit at a time per process) but hold the
translator only to copy the model and to put the new rows in: translations go on while a speaker is fitted.

One service is one model of the process, under its model id (:mod:`~fairseq_speaker.service.served_models` keeps
the models of a process): it reads and writes only that id's speakers in the store. A reload builds a new service
beside it and retires this one (:meth:`SpeakerService.retire`): the requests it admitted finish on its model; a
write that was waiting for its turn is refused with :class:`Retired`, to be sent to the new one.
"""

import contextlib
import dataclasses
import logging
import re
import sqlite3
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

import numpy as np

from fairseq_speaker.data.speaker_dictionary import new_label_problem, sentence_problem, shown
from fairseq_speaker.errors import UserError
from fairseq_speaker.onboarding.checkpoint import adaptable_bias
from fairseq_speaker.onboarding.fit import FitReport
from fairseq_speaker.onboarding.translator import SpeakerTranslator
from fairseq_speaker.onboarding.vectors import SpeakerVectors, describe, read_speaker_vectors, vectors_bytes
from fairseq_speaker.service import schema
from fairseq_speaker.service.batcher import Batcher, BatchOptions, Hypotheses, QueueFull
from fairseq_speaker.service.store import (DEFAULT_MODEL, SpeakerStore, StoreConflict, StoreDamaged, StoredSpeaker,
                                           StoreError, StoreModelMismatch, StoreUnavailable, fingerprint_of,
                                           speaker_text)

logger = logging.getLogger(__name__)

#: a code point of a UTF-16 surrogate: JSON can write one alone (``"\\ud800"``), UTF-8 cannot hold it
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Limits:
    """What one request may ask (each is a command-line option of ``fairseq-speaker-serve``)."""

    #: sentences in one /translate request
    max_sentences: int = 64
    #: characters in one sentence (translated, or of an onboarding pair)
    max_chars: int = 1000
    #: sentence pairs in one onboarding request (PUT /speakers/{name}, POST /speakers/{name}/sentences)
    max_pairs: int = 256
    #: sentence pairs one onboarded speaker is fitted on, in all (an update refits on all of them)
    max_speaker_pairs: int = 2048
    #: the beam a /translate request may ask for
    max_beam: int = 16

    def __post_init__(self):
        for name in ("max_sentences", "max_chars", "max_pairs", "max_speaker_pairs", "max_beam"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value!r}")

    @property
    def max_body_bytes(self) -> int:
        """The largest request body: every allowed character as a 6-byte JSON escape, and 64 KiB of the rest."""
        return 6 * self.max_chars * max(self.max_sentences, 2 * self.max_pairs) + 65536


class ServiceError(Exception):
    """A refused request: HTTP ``status``, a stable ``code`` and a ``message`` saying what to do."""

    def __init__(self, status: int, code: str, message: str, headers: Optional[Dict[str, str]] = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


class Retired(ServiceError):
    """A request that reached a service once its model was reloaded or removed (:meth:`SpeakerService.retire`): the
    caller sends it to the model's new service (HTTP: 503 ``model_reloaded`` if it cannot)."""

    def __init__(self, model: str):
        super().__init__(503, "model_reloaded", f"model {model!r} was reloaded or removed while this request waited: "
                         f"send it again", {"Retry-After": "0"})


def timed_out(what: str, seconds: float) -> ServiceError:
    return ServiceError(504, "timeout", f"{what} took longer than the service's {seconds:g} s (fairseq-speaker-serve "
                        f"--request-timeout): retry later, or send fewer sentences")


@dataclass
class PreparedTranslation:
    """A checked /translate request: its sentences, the labels they are translated as, and how to answer."""

    sentences: List[str]
    speakers: List[str]  # as asked
    as_labels: List[str]  # as the translator takes them (a deleted speaker's label is one no speaker has)
    beam: int
    nbest: int
    tokens: Optional[List[int]] = None  # each sentence's source tokens, with a batch token cap


class Searched(NamedTuple):
    """One sentence as the beam search translated it: its n best, and whether the model knew its speaker then."""

    best: Hypotheses  # of this one sentence: [(text, score)], best first
    known: bool


def _retired(name: str) -> str:
    """The label a deleted speaker is translated as: one no speaker can have (surrounding whitespace: the label
    rules refuse it), so that it gets the unknown-speaker policy as any unknown name."""
    return f" {name} (deleted) "


class SpeakerService:
    """The translator and the store of one process (see the module documentation).

    Args:
        translator: a loaded model; its speakers at this point are the "trained" ones.
        store: the speaker store; bound to the model on first use, refused if it was made for another.
        limits: what one request may ask.
        beam: the beam of a translation whose request does not say.
        generate: more of fairseq's generation options for every translation (``max_len_b=...``).
        batching: how concurrent translations are gathered, the queue's size, the requests' timeout.
        on_batch: called with the sentences and the requests of every batch translated (the metrics).
        skip_broken_speakers: start even when stored speakers cannot be read or used (a damaged record, rows of
            another model), logging their names, instead of refusing the store; later such records are always logged
            and left unused.
        model: the model id: the store's speakers of that id are this service's.
        refit: where the store ties ``model`` to a model of another fingerprint (the id's checkpoint before a
            reload), refit each of its speakers on ``translator`` from their stored sentences and tie the id to this
            model (:meth:`SpeakerStore.rebind`), instead of refusing the store.
    """

    def __init__(self, translator: SpeakerTranslator, store: SpeakerStore, limits: Limits = Limits(), beam: int = 5,
                 generate: Optional[Dict] = None, batching: BatchOptions = BatchOptions(),
                 on_batch: Optional[Callable[[int, int], None]] = None, skip_broken_speakers: bool = False,
                 model: str = DEFAULT_MODEL, refit: bool = False):
        self.translator, self.store, self.limits, self.model = translator, store, limits, model
        #: why the service no longer takes requests (its model reloaded or removed), or None
        self.retired: Optional[str] = None
        #: the speakers refitted on this model as it was bound (a reload to a model of another fingerprint)
        self.refitted: List[str] = []
        self.skip_broken_speakers = skip_broken_speakers
        self.beam, self.generate, self.batching = beam, dict(generate or {}), batching
        if not 1 <= beam <= limits.max_beam:
            raise ValueError(f"--beam must be between 1 and --max-beam ({limits.max_beam}), got {beam}")
        if batching.max_queue < limits.max_sentences:
            raise ValueError(f"--max-queue ({batching.max_queue}) must be at least --max-sentences "
                             f"({limits.max_sentences}), or the largest request could never be queued")
        self.batcher = Batcher(self._translate_batch, batching, on_batch)
        self._writing = threading.Lock()  # one write at a time: the order of a process's writes is the store's
        self.trained: List[str] = translator.speakers
        self._trained: Set[str] = set(self.trained)
        self._counts = dict(zip(self.trained, translator.task.speaker_dictionary.counts))
        policy = translator.task.cfg.unknown_speaker  # a fairseq ChoiceEnum member, or a str
        self.policy: str = str(getattr(policy, "value", policy))
        self._lock = threading.RLock()
        #: onboarded speaker -> the store version of its rows in the translator (-1: to be read again)
        self._loaded: Dict[str, int] = {}
        self._seen_generation = -1
        #: names whose rows this service put in the translator (deleted ones too: their rows stay, unused)
        self._imported: Set[str] = set()
        #: store speakers not used: trained names (see _bind), or rows this model refuses (name -> version)
        self._skipped: Dict[str, int] = {}
        try:
            bias = adaptable_bias(translator.model, translator.task, translator.checkpoint)
        except UserError as e:
            self.not_adaptable: Optional[str] = str(e)
            self.fingerprint: Dict = {}
        else:
            self.not_adaptable = None
            self.fingerprint = fingerprint_of(describe(bias, translator.task.target_dictionary))
        self._bind(refit)

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
        with this model's fingerprint in one transaction (see ``refit`` in the class documentation)."""
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

    @contextlib.contextmanager
    def retiring(self, why: str):
        """Hold this service's writes (after the one under way, waited for at most ``--request-timeout``) while its
        successor is made and put in its place; once the block ends without an error, the service is retired: a write
        that waited for its turn gets :class:`Retired`, and so does a translation submitted once it is stopped
        (:meth:`stop`)."""
        if not self._writing.acquire(timeout=self.batching.request_timeout):
            raise timed_out("waiting for the onboarding under way", self.batching.request_timeout)
        try:
            yield
            self.retired = why
        finally:
            self._writing.release()

    def stop(self) -> None:
        """Translate the requests queued, then stop the batcher's thread (waited for at most --request-timeout)."""
        self.batcher.close(self.batching.request_timeout)

    # -- keeping the translator in step with the store -------------------------------------------------
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
                if any(name in self._imported for name in deleted):
                    self.translator.forget_words([name for name in deleted if name in self._imported])
                self._seen_generation = generation
            except sqlite3.Error as e:
                if strict:
                    raise _unreadable(self.store, e) from None
                raise _unavailable(self.store, e) from None

    def _install(self, records: List[StoredSpeaker], strict: bool) -> None:
        """Put the rows of ``records`` in the translator, in one import (a table grows once, not per speaker)."""
        usable = []
        for record in records:
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
        self.translator.import_speakers(together, replace=True)  # a deleted name's unused rows are overwritten
        self._imported.update(r.name for r, _ in usable)
        for record, _ in usable:
            self._loaded[record.name] = record.version

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

    def _in_model(self) -> Set[str]:
        """The names of the translator's rows (without asking it: it may be translating)."""
        return self._trained | self._imported

    @property
    def onboarded(self) -> List[str]:
        with self._lock:
            return [name for name, version in self._loaded.items() if version >= 0]

    # -- translating --------------------------------------------------------------------------------------
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
            for label in dict.fromkeys(labels):
                self._check_label(label, what="speaker")
            known = self._trained | set(self._loaded)
            unknown = [label for label in dict.fromkeys(labels) if label not in known]
            if unknown and self.policy == "fail":
                raise ServiceError(404, "unknown_speaker",
                                   f"unknown speaker(s) {', '.join(map(shown, unknown[:5]))}: the service translates "
                                   f"only speakers it knows (--unknown-speaker fail); GET /speakers{self._query} "
                                   f"lists them")
            in_model = self._in_model() if unknown else set()
            as_labels = [label if label in known or label not in in_model else _retired(label) for label in labels]
        finally:
            self._lock.release()
        # the tokens as the translator will read the sentences (the model's tokenizer and BPE, its end of sentence);
        # one longer than the model takes is refused here, by its place in this request (not in a shared batch)
        try:
            tokens = self.translator.source_lengths(sentences)
        except UserError as e:
            raise ServiceError(413, "sentence_too_long", str(e)) from None
        return PreparedTranslation(sentences, labels, as_labels, beam, request.nbest,
                                   tokens if self.batching.max_batch_tokens else None)

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
                hypotheses=[schema.Hypothesis(text=text, score=score) for text, score in found.best]
                if prepared.nbest > 1 else None)
                for found, label in zip(results, prepared.speakers)],
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
        """A shared beam search; each sentence's speaker known or not as the search read the rows (a retired label,
        :func:`_retired`, never is)."""
        best, known = self.translator.translate_nbest_known(sentences, labels, beam=beam, nbest=nbest,
                                                            **self.generate)
        return [Searched(b, k) for b, k in zip(best, known)]

    # -- the speakers ---------------------------------------------------------------------------------
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
            raise ServiceError(404, "unknown_speaker", f"no speaker {shown(name)}{self._of_model}: GET "
                               f"/speakers{self._query} lists them")
        return self._with_traits([_onboarded(record)])[0]

    def _with_traits(self, speakers: List[schema.Speaker]) -> List[schema.Speaker]:
        """``speakers`` with what their words suggest, where the model keeps kinds of speaker (read in one call of the
        translator, between two beam searches)."""
        traits = self.translator.speaker_traits([s.name for s in speakers])
        if traits is None:
            return speakers
        return [s.model_copy(update={"traits": [schema.Trait(trait=t.trait, kind=t.kind, kinds=t.kinds,
                                                             probability=t.probability, evidence=t.evidence,
                                                             words=list(t.words)) for t in traits.get(s.name, [])]})
                for s in speakers]

    def limits_of_a_request(self) -> schema.ServiceLimits:
        return schema.ServiceLimits(**dataclasses.asdict(self.limits), beam=self.beam,
                                    max_body_bytes=self.limits.max_body_bytes)

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
                raise ServiceError(404, "unknown_speaker", f"no onboarded speaker {shown(name)}{self._of_model}: PUT "
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
            if name not in self._loaded or not self._store_call(self.store.delete, name, self.model):
                raise ServiceError(404, "unknown_speaker", f"no onboarded speaker {shown(name)}{self._of_model}")
            del self._loaded[name]  # its rows stay in the table, unused (see the module documentation)
            self.translator.forget_words([name])  # but not its words: they would shape the others' neighbours
        return schema.Deleted(deleted=name)

    def health(self, writes: bool, models: List[str]) -> schema.Health:
        """Ready: the model is loaded (it is, once this object exists) and the store answers; ``models``: the ids of
        the process's models."""
        self._store_call(self.store.generation)
        return schema.Health(status="ok", speakers=self.counts(), models=models, writes=writes,
                             model={"checkpoint": self.translator.checkpoint, **self.fingerprint,
                                    "unknown_speaker_policy": self.policy})

    def counts(self) -> Dict[str, int]:
        """The model's speakers by kind (trained, onboarded)."""
        return {"trained": len(self.trained), "onboarded": len(self.onboarded)}

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
            if e.reason == "exists":
                raise ServiceError(409, "speaker_exists", f"{e} (onboarded by another process meanwhile): send "
                                   f"\"replace\": true to fit it again from these sentences alone") from None
            raise ServiceError(409, "conflict", f"{e}: nothing was changed; read the speaker again and retry") from None
        except sqlite3.Error as e:
            raise _unavailable(self.store, e) from None
        except StoreError as e:
            raise ServiceError(422, "invalid_speaker", str(e)) from None
        with self._lock:
            try:
                self.translator.import_speakers(vectors, replace=True)  # a deleted name's unused rows are overwritten
                self._imported.add(name)
            except BaseException:
                self._forget(name)  # stored: the next request reads it from the store
                raise
            self._loaded[name] = record.version
        return record

    def _store_call(self, method, *args):
        try:
            return method(*args)
        except sqlite3.Error as e:
            raise _unavailable(self.store, e) from None
        except StoreDamaged as e:
            logger.error(str(e))
            raise ServiceError(503, "store_damaged", f"the speaker store cannot read this speaker's record "
                               f"({e.what}): the service's log says how to recover") from None

    def _check_writable(self) -> None:
        if self.not_adaptable is not None:
            raise ServiceError(409, "not_adaptable", self.not_adaptable)

    def _check_not_trained(self, name: str) -> None:
        if name in self._trained:
            raise ServiceError(409, "trained_speaker",
                               f"speaker {shown(name)} was trained with the model: its rows are the checkpoint's and "
                               f"are not changed by the service; onboard the person under another name")

    def _check_label(self, label: str, what: str) -> None:
        """The rules of the speaker files' labels (and of every way a speaker is added)."""
        problem = new_label_problem(label, self.translator.task.speaker_dictionary)
        if problem:
            raise ServiceError(422, "invalid_speaker", f"{what}: {problem}")

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

    def _trained_speaker(self, name: str) -> schema.Speaker:
        return schema.Speaker(name=name, kind="trained", sentences=self._counts.get(name, 0))


def _onboarded(record: StoredSpeaker) -> schema.Speaker:
    return schema.Speaker(name=record.name, kind="onboarded", sentences=record.sentences, created=record.created,
                          updated=record.updated)


def _fit(report: FitReport) -> schema.Fit:
    return schema.Fit(tokens=report.tokens, loss_before=report.loss_before, loss_after=report.loss_after,
                      iterations=report.iterations, seconds=report.seconds)


def _unreadable(store: SpeakerStore, error: sqlite3.Error) -> StoreError:
    """The refusal of a store that cannot be read as the service starts."""
    if isinstance(error, StoreUnavailable):  # a database server: its message says what failed
        return StoreError(f"--store {store.path}: {error}: retry once it answers")
    if isinstance(error, sqlite3.DatabaseError) and not isinstance(error, sqlite3.OperationalError):
        return StoreDamaged(store.path, f"the file is damaged ({error})")
    return StoreError(f"--store {store.path}: cannot be read ({error}): is another program holding it? Retry, or "
                      f"check it with sqlite3 {store.path} 'PRAGMA integrity_check'")


def _unavailable(store: SpeakerStore, error: Exception) -> ServiceError:
    logger.error(f"speaker store {store.path}: {error}")
    return ServiceError(503, "store_unavailable", "the speaker store cannot be read or written now (busy or failing); "
                        "retry later")
