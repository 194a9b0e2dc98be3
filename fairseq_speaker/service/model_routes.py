"""The model endpoints: ``GET /models``, ``GET /models/{id}`` (:func:`add_reads`); ``POST /models`` (load one),
``POST /models/{id}/reload``, ``DELETE /models/{id}`` (:func:`add_writes`), done by
:class:`~fairseq_speaker.service.served_models.ServedModels`."""

from typing import Callable, Optional

from fastapi import APIRouter, Depends, Request

from fairseq_speaker.service import schema
from fairseq_speaker.service.http_errors import note_model
from fairseq_speaker.service.metrics import Metrics
from fairseq_speaker.service.routing import served_models_of
from fairseq_speaker.service.served_models import ServedModels
from fairseq_speaker.service.service_errors import ServiceError


def add_reads(router: APIRouter) -> None:
    """Add the model endpoints that read to ``router``."""

    @router.get("/models", response_model=schema.ModelList, response_model_exclude_none=True,
                summary="The models served: id, checkpoint, its digest, when it was loaded, its speakers")
    async def models(served: ServedModels = Depends(served_models_of)):
        return served.describe_all()

    @router.get("/models/{model_id}", response_model=schema.ModelInfo, response_model_exclude_none=True,
                summary="One model")
    async def model(model_id: str, request: Request, served: ServedModels = Depends(served_models_of)):
        note_model(request.scope, served.known(model_id))
        return served.describe(model_id)


def add_writes(router: APIRouter) -> None:
    """Add the model endpoints that write to ``router``."""

    # loads read a checkpoint: in a thread of the pool (a def, not an async def), beside the translations
    @router.post("/models", response_model=schema.ModelInfo, response_model_exclude_none=True, status_code=201,
                 summary="Load a checkpoint as a new model, without a restart")
    def add_model(body: schema.ModelAdd, request: Request, served: ServedModels = Depends(served_models_of)):
        return _loaded(request, body.id, lambda: served.add(body.id, body.checkpoint, body.data))

    @router.post("/models/{model_id}/reload", response_model=schema.ModelInfo, response_model_exclude_none=True,
                 summary="Load a model's checkpoint again, or another one, and swap it in; requests admitted before "
                 "finish on the old one")
    def reload_model(model_id: str, request: Request, body: Optional[schema.ModelLoad] = None,
                     served: ServedModels = Depends(served_models_of)):
        note_model(request.scope, served.known(model_id))
        body = body or schema.ModelLoad()
        return _loaded(request, model_id, lambda: served.reload(model_id, body.checkpoint, body.data))

    @router.delete("/models/{model_id}", response_model=schema.ModelRemoved,
                   summary="Stop serving a model (not the default); its stored speakers are kept")
    def remove_model(model_id: str, request: Request, served: ServedModels = Depends(served_models_of)):
        note_model(request.scope, served.known(model_id))
        return served.remove(model_id)


def _loaded(request: Request, model: str, load: Callable[[], schema.ModelInfo]) -> schema.ModelInfo:
    """The answer of a load of ``model``, counted by the metrics (loaded or failed; a failed load of an id the
    service does not serve is counted without it: such labels would be as many as the ids clients make up)."""
    metrics: Metrics = request.app.state.metrics
    try:
        info = load()
    except ServiceError as e:
        if e.code in ("load_failed", "load_refused", "store_unavailable", "timeout"):
            metrics.loaded(model if request.app.state.models.known(model) else "", "failed")
        raise
    metrics.loaded(model, "loaded")
    note_model(request.scope, model)
    return info
