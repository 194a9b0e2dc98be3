"""``fairseq-speaker-serve``: speaker models over HTTP (FastAPI + uvicorn). docs/serving.md is the guide.

::

    fairseq-speaker-serve checkpoints/checkpoint_best.pt --data data-bin --store speakers.db \\
        --token-file token.txt --port 8000
    fairseq-speaker-serve --model en-fr=en-fr/checkpoint_best.pt:en-fr/bin \\
        --model en-de=en-de/checkpoint_best.pt:en-de/bin --store speakers.db --token-file token.txt

:func:`create_app` builds the application around loaded :class:`SpeakerTranslator` s (one, or several by id) and a
:class:`SpeakerStore` (what the tests and an embedding program use); :func:`main` is the command.
Every endpoint answers at ``/...`` and at ``/v1/...``; the OpenAPI description is at ``/docs``, and ``/`` is a
page to try the service in a browser.

This module wires the parts together; each lives in a module of its own: the endpoints by resource
(:mod:`~fairseq_speaker.service.translate_routes`, :mod:`~fairseq_speaker.service.speaker_routes`,
:mod:`~fairseq_speaker.service.model_routes`, :mod:`~fairseq_speaker.service.service_routes`: limits, health,
metrics and the pages), the routes' checks of query parameters and token (:mod:`~fairseq_speaker.service.routing`),
the checks and parsing of request bodies (:mod:`~fairseq_speaker.service.bodies`), the middleware
(:mod:`~fairseq_speaker.service.middleware`), the JSON errors (:mod:`~fairseq_speaker.service.http_errors`) and the
command line (:mod:`~fairseq_speaker.service.options`).
"""

import contextlib
import gc
import logging
import os
import time
import warnings
from typing import Dict, List, Mapping, Optional, Sequence, Union

from fastapi import APIRouter, FastAPI
from starlette.concurrency import run_in_threadpool

from fairseq_speaker import __version__
from fairseq_speaker.errors import UserError, command, fail
from fairseq_speaker.onboarding.translator import SpeakerTranslator
from fairseq_speaker.tasks.data_files import one_folder_problem
from fairseq_speaker.service import model_routes, service_routes, speaker_routes, translate_routes
from fairseq_speaker.service.batcher import BatchOptions
from fairseq_speaker.service.bodies import body_problem
from fairseq_speaker.service.connections import bounded_http_protocol
from fairseq_speaker.service.http_errors import add_error_handlers
from fairseq_speaker.service.logs import LogLines, configure_logging
from fairseq_speaker.service.metrics import Metrics
from fairseq_speaker.service.middleware import BodyRefused, HeadAsGet, Observed
from fairseq_speaker.service.options import build_parser, check_listening, parse_args, read_token
from fairseq_speaker.service.routing import read_router, write_router
from fairseq_speaker.service.served_models import ServedModels
from fairseq_speaker.service.speaker_service import Limits, SpeakerService
from fairseq_speaker.service.store import SpeakerStore
from fairseq_speaker.service.store_schema import DEFAULT_MODEL
from fairseq_speaker.service.stores import open_store
from fairseq_speaker.service.translate_routes import TranslateDirectly
from fairseq_speaker.user_dir import import_user_dir

#: what this module gives, its own and the names it gave before its parts moved out (the tests', scripts')
__all__ = ["BodyRefused", "body_problem", "build_parser", "create_app", "freeze_loaded_objects", "main", "parse_args",
           "read_token", "_Observed"]

logger = logging.getLogger("fairseq_speaker.service")

#: :class:`Observed` by the name it had here (tests/integration/test_probes_service.py builds one alone)
_Observed = Observed


def _reads() -> APIRouter:
    """The endpoints that read, in the order they are routed and described at ``/docs``."""
    router = read_router()
    for routes in (translate_routes, speaker_routes, model_routes, service_routes):
        routes.add_reads(router)
    return router


def _writes() -> APIRouter:
    """The endpoints that write (the token checked first), in the order they are routed and described."""
    router = write_router()
    for routes in (speaker_routes, model_routes):
        routes.add_writes(router)
    return router


def _warn_of_unserved_speakers(store: SpeakerStore, served: List[str]) -> None:
    """Say which speakers of the store this process leaves out: those of a model id it does not serve (a store of
    fairseq-speaker 0.8 keeps its speakers as the model 'default''s; a model removed before a restart). Requests
    naming them get the unknown-speaker policy, which nothing else would explain."""
    for model in store.models():
        count = len(store.versions(model)[1]) if model not in served else 0
        if count:
            logger.warning(f"--store {store.path} holds {count} speaker(s) of the model {model!r}, which this service "
                           f"does not serve ({', '.join(map(repr, served))}): requests cannot name them. Serve that "
                           f"model under this id (--model {model}=CHECKPOINT, or POST /models) to translate as them",
                           extra={"model": model})


def create_app(translator: Union[SpeakerTranslator, Mapping[str, SpeakerTranslator]],
               store: Optional[SpeakerStore] = None, token: Optional[str] = None, limits: Limits = Limits(),
               beam: int = 5, generate: Optional[Dict] = None, batching: BatchOptions = BatchOptions(),
               skip_broken_speakers: bool = False, default_model: Optional[str] = None,
               overrides: Optional[Dict] = None, data: Optional[Dict[str, str]] = None) -> FastAPI:
    """The service of ``translator`` (a loaded :class:`SpeakerTranslator`, served as the model ``default``; or several,
    by model id, in order: the first, or ``default_model``, is the default one; their speakers now are the trained
    ones) and ``store`` (default: one in memory, gone with the process). Without ``token`` the write endpoints
    answer 403. ``beam`` (the default of a request) and ``generate`` (fairseq generation options) apply to every
    translation; ``batching`` says how concurrent translations share beam searches, and the requests' timeout (a body
    must arrive within it too). ``skip_broken_speakers``: start without the stored speakers that cannot be read or
    used (logged), instead of refusing the store. ``overrides`` are the options a checkpoint loaded later (``POST
    /models``, a reload) is loaded with (:meth:`SpeakerTranslator.from_pretrained`'s); ``data``: the data directory of
    each model (default: the one its translator was loaded with). The app closes the store when it shuts down."""
    translators = {DEFAULT_MODEL: translator} if isinstance(translator, SpeakerTranslator) else dict(translator)
    if not translators:
        raise ValueError("create_app needs a model")
    store = store if store is not None else SpeakerStore(":memory:")
    metrics = Metrics()
    loaded_with = dict(overrides or {})

    def make(loaded: SpeakerTranslator, model: str, refit: bool) -> SpeakerService:
        return SpeakerService(loaded, store, limits, beam=beam, generate=generate, batching=batching,
                              on_batch=metrics.batch, skip_broken_speakers=skip_broken_speakers, model=model,
                              refit=refit)

    def load(checkpoint: str, data_dir: str) -> SpeakerTranslator:
        return SpeakerTranslator.from_pretrained(checkpoint, data=data_dir, **loaded_with)

    models = ServedModels(translators, default_model or next(iter(translators)), make, load, data,
                          on_change=lambda: setattr(app.state, "service", models.get()))
    for model in models.ids:
        metrics.loaded(model, "loaded")
    _warn_of_unserved_speakers(store, models.ids)
    service = models.get()

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        # uvicorn's graceful shutdown (SIGTERM, SIGINT) ends here, once the requests under way are answered
        await run_in_threadpool(models.close, batching.request_timeout)
        store.close()
        logger.info(f"closed the speaker store {store.path}")

    app = FastAPI(title="fairseq-speaker", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Personalized translation: each sentence is translated as its speaker; speakers are "
                  "onboarded from a few sentence pairs. Write endpoints need `Authorization: Bearer <token>`.")
    #: the models by id; ``service``: the default model's (what a program embedding one model uses)
    app.state.models, app.state.service, app.state.token, app.state.metrics = models, service, token, metrics
    app.state.translate_directly = True
    routers = {prefix: (_reads(), _writes()) for prefix in ("", "/v1")}
    translate = next(route for route in routers[""][0].routes if route.path == "/translate")
    app.add_middleware(TranslateDirectly, route=translate)  # inside Observed: limits and metrics apply
    app.add_middleware(HeadAsGet)
    app.add_middleware(Observed, metrics=app.state.metrics, max_body_bytes=limits.max_body_bytes,
                       body_timeout=batching.request_timeout)
    add_error_handlers(app)
    for prefix, (reads, writes) in routers.items():
        app.include_router(reads, prefix=prefix, include_in_schema=not prefix)
        app.include_router(writes, prefix=prefix, include_in_schema=not prefix)
    service_routes.add_pages(app)
    return app


def freeze_loaded_objects() -> None:
    """Take the objects alive now (once the model is loaded: torch's, fairseq's and the model's, some 300,000) out
    of the cyclic garbage collector's sight (:func:`gc.freeze`). Every request leaves a few objects to the oldest
    generation, which is then collected whole again and again, each time stopping the service (its event loop and
    its beam searches alike) for longer than a beam search: docs/serving.md has the figures. Frozen objects are
    never freed; they are those a served model keeps to the end anyway."""
    gc.collect()
    gc.freeze()


@command(named_errors=False)
def main(argv: Optional[Sequence[str]] = None) -> None:
    args, overrides, limits = parse_args(argv)
    store = None
    try:
        token = read_token(args)
        check_listening(args.host, args.port)  # before the models load: uvicorn said so after, and exited 3
        import_user_dir(args.user_dir)
        for model, (_, data) in args.specs.items():
            where = "" if model == DEFAULT_MODEL and args.checkpoint is not None else f" (of --model {model})"
            shards = one_folder_problem(data)
            if shards:
                raise UserError(f"data directory {shards}{where}")
            if not os.path.isdir(data):
                raise UserError(f"data directory not found: {data}{where} (the one the model was trained on, with its "
                                f"dict.*.txt)")
        configure_logging(args.log_format)  # every logger, uvicorn's too (log_config=None below), in one format
        logging.getLogger("fairseq").setLevel(logging.WARNING)  # its per-batch lines, on every request
        warnings.filterwarnings("ignore", message=".*'pin_memory' argument is set as true")  # torch's, on a CPU
        from fairseq_speaker.runtime import start_threads

        start_threads(args.threads, stream=LogLines(logger))  # one line as the service starts: threads: N (why)

        store = open_store(args.store or ":memory:")  # first: a database it cannot reach says so at once
        translators = {}
        for model, (checkpoint, data) in args.specs.items():
            start = time.perf_counter()
            translators[model] = SpeakerTranslator.from_pretrained(checkpoint, data=data, **overrides)
            logger.info(f"model {model!r}: {checkpoint} loaded in {time.perf_counter() - start:.1f} s",
                        extra={"model": model})
        app = create_app(translators, store, token, limits, beam=args.beam, batching=args.batching,
                         skip_broken_speakers=args.skip_broken_speakers, default_model=args.default_model,
                         overrides=overrides, data={model: data for model, (_, data) in args.specs.items()})
    except UserError as e:
        if store is not None:
            store.close()
        fail(str(e), "fairseq-speaker-serve")
    import uvicorn

    for service in app.state.models.services:
        logger.info(f"{service.translator.checkpoint}: {len(service.trained)} trained and {len(service.onboarded)} "
                    f"onboarded speakers" + ("" if list(args.specs) == [DEFAULT_MODEL] else
                                             f" (model {service.model!r})"), extra={"model": service.model})
    logger.info(f"default model {app.state.models.default!r}; writes {'enabled' if token else 'disabled (no token)'}; "
                f"store {store.path if args.store else '(none: in memory)'}")  # (a URL's password hidden)
    freeze_loaded_objects()
    try:  # uvicorn stops on SIGTERM or SIGINT after the requests under way (the store is closed at its shutdown)
        protocol = bounded_http_protocol(args.header_timeout)  # slow clients' headers bounded: connections.py
        uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="info", log_config=None,
                                      access_log=args.access_log, http=protocol or "auto")).run()
    finally:
        store.close()


if __name__ == "__main__":
    main()
