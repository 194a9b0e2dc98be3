"""What the service does, without HTTP: a translator kept in step with the speaker store, under limits.

The store is the source of truth for onboarded speakers. Every request first brings the translator in step
with it (one read of the store's generation; the changed speakers' rows when it moved), so that a request
sees every write committed, by this process or another, before it began. A write fits the speaker on a copy
of the model (:meth:`SpeakerTranslator.fit_speaker`), commits its rows to the store, and only then puts them
in the translator, in one call: a speaker is translated with its new rows once they are stored, and a write
the store refuses (another process got there first) leaves the translator as it was.

Speakers the model was trained with ("trained") are the checkpoint's: they are translated, listed and shown,
never replaced, updated or deleted here. A deleted speaker's rows stay in the translator's table (a table does
not shrink), retired under a name no speaker can have (``SpeakerTranslator.retire_speakers``): the speaker gets the
unknown-speaker policy again, as any unknown name, a new speaker may take a name that looks like theirs, as in a
service that never had it, and the rows are overwritten if the name is onboarded again.

Translations go through the :class:`~fairseq_speaker.service.batcher.Batcher`: concurrent requests share beam
searches, each sentence with its own speaker. Writes take turns (one fit at a time per process) but hold the
translator only to copy the model and to put the new rows in: translations go on while a speaker is fitted.

One service is one model of the process, under its model id (:mod:`~fairseq_speaker.service.served_models` keeps
the models of a process): it reads and writes only that id's speakers in the store. A reload builds a new service
beside it and retires this one (:meth:`SpeakerService.retiring`): the requests it admitted finish on its model; a
write that was waiting for its turn is refused with :class:`~fairseq_speaker.service.service_errors.Retired`, to be
sent to the new one.

Its parts, each a module: the store kept in step (:mod:`~fairseq_speaker.service.store_sync`), translation
(:mod:`~fairseq_speaker.service.translating`), the speakers listed and onboarded
(:mod:`~fairseq_speaker.service.speaker_onboarding`), the checks of a request's text
(:mod:`~fairseq_speaker.service.request_checks`) and the refusals (:mod:`~fairseq_speaker.service.service_errors`);
the limits of a request and the state the parts share (:mod:`~fairseq_speaker.service.service_state`). This
module holds :class:`SpeakerService`, which joins the parts: the model and its state, its retirement, its health.
"""

import contextlib
import dataclasses
import threading
from typing import Callable, Dict, List, Optional, Set

from fairseq_speaker.errors import UserError
from fairseq_speaker.onboarding.checkpoint import adaptable_bias, speaker_counts
from fairseq_speaker.onboarding.translator import SpeakerTranslator
from fairseq_speaker.onboarding.vectors_file import describe
from fairseq_speaker.service import schema
from fairseq_speaker.sequence_generator import check_beam_within
from fairseq_speaker.service.batcher import Batcher, BatchOptions
from fairseq_speaker.service.service_errors import timed_out
from fairseq_speaker.service.service_state import Limits
from fairseq_speaker.service.speaker_onboarding import SpeakerOnboarding
from fairseq_speaker.service.store import SpeakerStore
from fairseq_speaker.service.store_schema import DEFAULT_MODEL, fingerprint_of
from fairseq_speaker.service.translating import Translating


class SpeakerService(SpeakerOnboarding, Translating):
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
        # /limits would promise a beam every request of it is refused
        check_beam_within(limits.max_beam, len(translator.task.target_dictionary), "--max-beam")
        if batching.max_queue < limits.max_sentences:
            raise ValueError(f"--max-queue ({batching.max_queue}) must be at least --max-sentences "
                             f"({limits.max_sentences}), or the largest request could never be queued")
        self.batcher = Batcher(self._translate_batch, batching, on_batch)
        self._writing = threading.Lock()  # one write at a time: the order of a process's writes is the store's
        self.trained: List[str] = translator.speakers
        self._trained: Set[str] = set(self.trained)
        # by name: zipped with the dictionary's counts, every speaker after a retired row took its neighbour's count
        self._counts = speaker_counts(translator.task)
        policy = translator.task.cfg.unknown_speaker  # a fairseq ChoiceEnum member, or a str
        self.policy: str = str(getattr(policy, "value", policy))
        self._lock = threading.RLock()
        #: onboarded speaker -> the store version of its rows in the translator (-1: to be read again)
        self._loaded: Dict[str, int] = {}
        self._seen_generation = -1
        #: names whose rows this service put in the translator and did not retire
        self._imported: Set[str] = set()
        #: store speakers not used: trained names (see _bind), or rows this model refuses (name -> version)
        self._skipped: Dict[str, int] = {}
        #: skipped store speakers whose names look like another's, served instead (name -> that other's name)
        self._twin_of: Dict[str, str] = {}
        try:
            bias = adaptable_bias(translator.model, translator.task, translator.checkpoint)
        except UserError as e:
            self.not_adaptable: Optional[str] = str(e)
            self.fingerprint: Dict = {}
        else:
            self.not_adaptable = None
            self.fingerprint = fingerprint_of(describe(bias, translator.task.target_dictionary))
        self._bind(refit)

    @contextlib.contextmanager
    def retiring(self, why: str):
        """Hold this service's writes (after the one under way, waited for at most ``--request-timeout``) while its
        successor is made and put in its place; once the block ends without an error, the service is retired: a write
        that waited for its turn gets :class:`~fairseq_speaker.service.service_errors.Retired`, and so does a
        translation submitted once it is stopped (:meth:`stop`)."""
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

    def limits_of_a_request(self) -> schema.ServiceLimits:
        return schema.ServiceLimits(**dataclasses.asdict(self.limits), beam=self.beam,
                                    max_body_bytes=self.limits.max_body_bytes)

    def health(self, writes: bool, models: List[str]) -> schema.Health:
        """Ready: the model is loaded (it is, once this object exists) and the store answers; ``models``: the ids of
        the process's models."""
        self._store_call(self.store.ready)
        return schema.Health(status="ok", speakers=self.counts(), models=models, writes=writes,
                             model={"checkpoint": self.translator.checkpoint, **self.fingerprint,
                                    "unknown_speaker_policy": self.policy})

    def counts(self) -> Dict[str, int]:
        """The model's speakers by kind (trained, onboarded)."""
        return {"trained": len(self.trained), "onboarded": len(self.onboarded)}
