"""The speaker endpoints: ``GET /speakers``, ``GET /speakers/{name}`` (:func:`add_reads`); ``PUT /speakers/{name}``
(onboard), ``POST /speakers/{name}/sentences`` (refit), ``DELETE /speakers/{name}`` (:func:`add_writes`). Each is
done by the :class:`SpeakerService` of the model ``?model=`` names."""

from typing import Callable, Optional, TypeVar

from fastapi import APIRouter, Query, Request, Response

from fairseq_speaker.service import schema
from fairseq_speaker.service.http_errors import note_model
from fairseq_speaker.service.served_models import ServedModels
from fairseq_speaker.service.service_errors import Retired
from fairseq_speaker.service.speaker_service import SpeakerService

#: ``?model=`` of the speaker endpoints
_MODEL_QUERY = Query(None, description="the model whose speakers these are, by its id (GET /models lists them; "
                     "default: the service's default model)")

_T = TypeVar("_T")


def _on_model(request: Request, model: Optional[str], call: Callable[[SpeakerService], _T]) -> _T:
    """``call`` on the service of ``model`` (404 for an id the service does not serve); a call that met the model's
    reload (:class:`Retired`: it waited while the model was swapped) is made again on the new one."""
    models: ServedModels = request.app.state.models
    note_model(request.scope, models.known(model))
    try:
        return call(models.get(model))
    except Retired:
        return call(models.get(model))


def add_reads(router: APIRouter) -> None:
    """Add the speaker endpoints that read to ``router``."""

    @router.get("/speakers", response_model=schema.SpeakerList, summary="The speakers of a model, trained and "
                "onboarded")
    def speakers(request: Request, model: Optional[str] = _MODEL_QUERY):
        return _on_model(request, model, lambda service: service.speakers())

    @router.get("/speakers/{name:path}", response_model=schema.Speaker, summary="One speaker of a model")
    def speaker(name: str, request: Request, model: Optional[str] = _MODEL_QUERY):
        return _on_model(request, model, lambda service: service.speaker(name))


def add_writes(router: APIRouter) -> None:
    """Add the speaker endpoints that write to ``router``."""

    @router.put("/speakers/{name:path}", response_model=schema.OnboardResponse, status_code=201,
                summary="Onboard a speaker of a model from sentence pairs (201 new, 200 replaced)")
    def onboard(name: str, body: schema.OnboardRequest, response: Response, request: Request,
                model: Optional[str] = _MODEL_QUERY):
        answer, created = _on_model(request, model, lambda service: service.onboard(name, body))
        response.status_code = 201 if created else 200
        return answer

    @router.post("/speakers/{name:path}/sentences", response_model=schema.OnboardResponse,
                 summary="Refit an onboarded speaker on its sentences and these")
    def add_sentences(name: str, body: schema.SentencePairs, request: Request, model: Optional[str] = _MODEL_QUERY):
        return _on_model(request, model, lambda service: service.add_sentences(name, body))

    @router.delete("/speakers/{name:path}", response_model=schema.Deleted, summary="Delete an onboarded speaker")
    def delete(name: str, request: Request, model: Optional[str] = _MODEL_QUERY):
        return _on_model(request, model, lambda service: service.delete(name))
