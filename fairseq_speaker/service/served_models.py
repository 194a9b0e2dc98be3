"""The models one service process serves, by id: loaded, reloaded, added and removed without a restart.

Each model is a :class:`~fairseq_speaker.service.speaker_service.SpeakerService` of its own (its translator, its
batcher, its speakers in the shared store under its id). A request names its model (``"model"`` of ``POST
/translate``, ``?model=`` of the speaker endpoints) or goes to the default one; an id the process does not serve is a
404 listing the ones it does.

A load (``POST /models``, ``POST /models/{id}/reload``) reads the checkpoint off the request path, beside the
translations of every model, and builds the new service beside the old one: its stored speakers are put in the new
model (refitted from their sentences where its shared parameters differ from those they were fitted on). Then the
new service takes the old one's place in one assignment, while the old one's writes are held: a request admitted
before finishes on the model it started on (its batch, queued or under way, is translated by the old service,
stopped once they are answered); a write that was waiting is sent to the new one. A load that fails (no such file, a
checkpoint of other dictionaries, a damaged file, a store that refuses it) changes nothing: the old model goes on
serving, and the answer names the file and why.

Loads take turns (one at a time per process). Models added or reloaded here last as long as the process: the
command line says what a restart loads. Replicas are reloaded one by one (docs/serving.md, "Several models").
"""

import contextlib
import datetime
import gc
import hashlib
import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional

from fairseq_speaker.errors import UserError
from fairseq_speaker.onboarding.translator import SpeakerTranslator
from fairseq_speaker.tasks.data_files import one_folder_problem
from fairseq_speaker.service import schema
from fairseq_speaker.service.service_errors import ServiceError
from fairseq_speaker.service.speaker_service import SpeakerService
from fairseq_speaker.service.store_errors import StoreError
from fairseq_speaker.service.store_schema import DEFAULT_MODEL, MODEL_ID_RULE, model_id_problem

logger = logging.getLogger("fairseq_speaker.service")

#: ``load(checkpoint, data)``: a translator of the checkpoint with the dictionaries of the data directory
Loader = Callable[[str, str], SpeakerTranslator]
#: ``make(translator, model_id, refit)``: the service of a loaded model (see :class:`SpeakerService`'s ``refit``)
ServiceMaker = Callable[[SpeakerTranslator, str, bool], SpeakerService]


def case_twin(model: str, ids: Iterable[str]) -> Optional[str]:
    """The id among ``ids`` that ``model`` equals but for case, or None: two such ids would read as one model in a
    URL, a log or a metric label written by hand, each request going to one of them by the letters' case."""
    for other in ids:
        if other != model and other.casefold() == model.casefold():
            return other
    return None


def _utc(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class CheckpointFile:
    """A checkpoint file as it was read: what ``GET /models`` shows to tell one version from another."""

    sha256: str
    size: int
    modified: str

    @classmethod
    def of(cls, path: str) -> "CheckpointFile":
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            stat = os.fstat(f.fileno())
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return cls(digest.hexdigest(), stat.st_size, _utc(stat.st_mtime))


@dataclass
class ServedModel:
    """One model of the process: its service, where it was loaded from and when."""

    id: str
    service: SpeakerService
    data: str
    file: CheckpointFile
    loaded_at: str
    load_seconds: float

    def describe(self, default: bool, refitted: Optional[int] = None) -> schema.ModelInfo:
        service = self.service
        return schema.ModelInfo(
            id=self.id, default=default, checkpoint=service.translator.checkpoint, data=self.data,
            checkpoint_sha256=self.file.sha256, checkpoint_bytes=self.file.size,
            checkpoint_modified=self.file.modified, loaded_at=self.loaded_at, load_seconds=round(self.load_seconds, 3),
            speakers=service.counts(), variant=service.fingerprint.get("variant_spelling"),
            unknown_speaker_policy=service.policy, refitted=refitted)


class ServedModels:
    """The models of a process (see the module documentation). Safe to use from several threads.

    Args:
        translators: the models loaded at the start, by id, in order.
        default: the id of the model a request that names none goes to.
        make: builds the service of a loaded model (the process's store, limits and batching).
        load: loads a checkpoint with a data directory's dictionaries (a reload and ``POST /models``).
        data: the data directory of each start-up model (default: the one its translator was loaded with).
        on_change: called after every change of the models (the app keeps ``app.state.service`` the default's).
    """

    def __init__(self, translators: Dict[str, SpeakerTranslator], default: str, make: ServiceMaker, load: Loader,
                 data: Optional[Dict[str, str]] = None, on_change: Optional[Callable[[], None]] = None):
        if default not in translators:
            raise ValueError(f"the default model {default!r} is not among the models {list(translators)}")
        for number, model_id in enumerate(translators):
            problem = model_id_problem(model_id)
            twin = case_twin(model_id, list(translators)[:number]) if problem is None else None
            if problem or twin:
                raise UserError(problem or f"the model ids {twin!r} and {model_id!r} differ only by case: give each "
                                f"model an id that differs from the others in more than case")
        self.default = default
        self._make, self._load, self._on_change = make, load, on_change
        self._loading = threading.Lock()  # one load at a time
        self._models: Dict[str, ServedModel] = {}
        ordered = [default] + [model_id for model_id in translators if model_id != default]
        try:
            for model_id in ordered:
                translator = translators[model_id]
                start = time.perf_counter()
                service = make(translator, model_id, False)
                where = (data or {}).get(model_id) or _data_of(translator)
                self._models[model_id] = ServedModel(model_id, service, where, CheckpointFile.of(translator.checkpoint),
                                                     _utc(time.time()), time.perf_counter() - start)
        except BaseException:
            self.close()
            raise

    # -- finding a model ----------------------------------------------------------------------------------
    @property
    def ids(self) -> List[str]:
        """The ids of the models served, the default first."""
        return list(self._models)

    def get(self, model: Optional[str] = None) -> SpeakerService:
        """The service of ``model`` (None: the default), or a 404 naming the models served."""
        served = self._models.get(self.default if model is None else model)
        if served is None:
            raise ServiceError(404, "unknown_model", f"no model {model!r}: this service serves "
                               f"{', '.join(map(repr, self.ids))} (GET /models lists them)")
        return served.service

    @property
    def services(self) -> List[SpeakerService]:
        """The service of each model, the default first."""
        return [served.service for served in list(self._models.values())]

    def known(self, model: Optional[str]) -> Optional[str]:
        """``model`` if it is one of the ids served, the default's for None, otherwise None (for metric labels:
        only ids the service has)."""
        if model is None:
            return self.default
        return model if model in self._models else None

    def describe(self, model: Optional[str] = None) -> schema.ModelInfo:
        self.get(model)  # 404 for an unknown id
        served = self._models[self.default if model is None else model]
        return served.describe(served.id == self.default)

    def describe_all(self) -> schema.ModelList:
        return schema.ModelList(models=[served.describe(served.id == self.default)
                                        for served in list(self._models.values())])

    # -- loading, reloading, removing -------------------------------------------------------------------------
    def add(self, model: str, checkpoint: str, data: Optional[str] = None) -> schema.ModelInfo:
        """Load ``checkpoint`` as the new model ``model`` (with ``data``'s dictionaries, default: the default
        model's); its speakers in the store, if the store has that id, are put in it."""
        problem = model_id_problem(model)
        if problem:
            raise ServiceError(422, "invalid_request", f"id: {problem}")
        with self._turn():
            if model in self._models:
                raise ServiceError(409, "model_exists", f"model {model!r} is already served: POST "
                                   f"/models/{model}/reload loads another checkpoint for it")
            twin = case_twin(model, self._models)
            if twin is not None:
                raise ServiceError(409, "model_exists", f"model {twin!r} is served, whose id differs from {model!r} "
                                   f"only by case: give the new model an id that differs in more than case, or "
                                   f"POST /models/{twin}/reload to load another checkpoint for {twin!r}")
            served = self._loaded(model, checkpoint, data or self._models[self.default].data, None)
            self._models[model] = served
            self._changed()
        logger.info(f"model {model!r}: added from {checkpoint} ({served.file.sha256[:12]}) in "
                    f"{served.load_seconds:.1f} s", extra={"model": model})
        return served.describe(False, refitted=len(served.service.refitted))

    def reload(self, model: str, checkpoint: Optional[str] = None, data: Optional[str] = None) -> schema.ModelInfo:
        """Load ``checkpoint`` (default: the model's own, read again) for ``model`` and put it in the old one's
        place (see the module documentation)."""
        self.get(model)
        with self._turn():
            old = self._models.get(model)
            if old is None:  # removed while this waited for its turn
                self.get(model)
            assert old is not None
            served = self._loaded(model, checkpoint or old.service.translator.checkpoint, data or old.data, old)
        logger.info(f"model {model!r}: reloaded from {served.service.translator.checkpoint} "
                    f"({served.file.sha256[:12]}, was {old.file.sha256[:12]}) in {served.load_seconds:.1f} s; "
                    f"{served.service.counts()['onboarded']} onboarded speakers, {len(served.service.refitted)} of "
                    f"them refitted", extra={"model": model})
        return served.describe(model == self.default, refitted=len(served.service.refitted))

    def remove(self, model: str) -> schema.ModelRemoved:
        """Stop serving ``model`` (not the default); its speakers stay in the store, for when it is added again."""
        self.get(model)
        if model == self.default:
            raise ServiceError(409, "default_model", f"model {model!r} is the default model, which a request that "
                               f"names no model goes to: it can be reloaded, not removed")
        with self._turn():
            old = self._models.get(model)
            if old is None:
                self.get(model)
            assert old is not None
            with old.service.retiring("removed"):
                del self._models[model]
            self._changed()
        self._dispose(old)
        logger.info(f"model {model!r}: removed (its stored speakers are kept)", extra={"model": model})
        return schema.ModelRemoved(removed=model)

    @contextlib.contextmanager
    def _turn(self):
        """This load's turn (one at a time), or a 409 while another is under way."""
        if not self._loading.acquire(blocking=False):
            raise ServiceError(409, "load_under_way", "another model is being loaded, reloaded or removed: retry once "
                               "it is done", {"Retry-After": "5"})
        try:
            yield
        finally:
            self._loading.release()

    def _loaded(self, model: str, checkpoint: str, data: str, old: Optional[ServedModel]) -> ServedModel:
        """The model ``model`` loaded from ``checkpoint``, with its stored speakers, in ``old``'s place if given
        (added otherwise by the caller); what fails is a :class:`ServiceError` naming the file, and changes
        nothing."""
        keeps = (f"; model {model!r} goes on serving {old.service.translator.checkpoint}" if old is not None else
                 "; nothing was loaded")
        start = time.perf_counter()
        shards = one_folder_problem(data)
        if shards:
            raise ServiceError(422, "load_failed", f"data directory {shards}{keeps}")
        if not os.path.isdir(data):
            raise ServiceError(422, "load_failed", f"data directory not found: {data} (the one the model was trained "
                               f"on, with its dict.*.txt){keeps}")
        try:
            translator = self._load(checkpoint, data)
            file = CheckpointFile.of(checkpoint)
        except (UserError, OSError) as e:
            raise ServiceError(422, "load_failed", f"{checkpoint} cannot be loaded with the dictionaries of {data}: "
                               f"{e}{keeps}") from None
        except Exception as e:  # fairseq's, or torch's, on a file neither expected: the log has the traceback
            logger.warning(f"model {model!r}: loading {checkpoint} failed", exc_info=True, extra={"model": model})
            raise ServiceError(422, "load_failed", f"{checkpoint} cannot be loaded with the dictionaries of {data} "
                               f"({type(e).__name__}: {e}){keeps}") from None
        try:
            if old is None:
                service = self._make(translator, model, True)
                return ServedModel(model, service, data, file, _utc(time.time()), time.perf_counter() - start)
            with old.service.retiring("reloaded"):  # its writes held: none lands between the two
                service = self._make(translator, model, True)
                served = ServedModel(model, service, data, file, _utc(time.time()), time.perf_counter() - start)
                self._models[model] = served  # the swap: the next request finds the new model
        except StoreError as e:
            raise ServiceError(409, "load_refused", f"{checkpoint}: {e}{keeps}") from None
        except sqlite3.Error as e:
            raise ServiceError(503, "store_unavailable", f"the speaker store cannot be read now ({e}){keeps}: retry "
                               f"later") from None
        self._changed()
        self._dispose(old)
        return served

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()

    @staticmethod
    def _dispose(old: ServedModel) -> None:
        """Stop ``old``'s service once the requests it admitted are answered, then let its model be freed, in a
        thread of its own (the load's answer does not wait for them)."""
        def stop():
            old.service.stop()
            if gc.get_freeze_count():  # the command froze what it loaded (freeze_loaded_objects): that model too
                gc.unfreeze()
                gc.collect()
                gc.freeze()

        threading.Thread(target=stop, name=f"fairseq-speaker-retire-{old.id}", daemon=True).start()

    def close(self, timeout: Optional[float] = None) -> None:
        """Stop every model's batcher, once the requests queued are answered."""
        for served in list(self._models.values()):
            served.service.batcher.close(timeout)


def _data_of(translator: SpeakerTranslator) -> str:
    """The data directory ``translator`` was loaded with."""
    return str(getattr(translator.task.cfg, "data", "") or "")


__all__ = ["DEFAULT_MODEL", "MODEL_ID_RULE", "ServedModels", "case_twin", "model_id_problem"]
