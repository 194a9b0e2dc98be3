"""``POST /translate``: the route FastAPI declares and describes (:func:`add_reads`), and the middleware that answers
its JSON requests with the same code without FastAPI's machinery (:class:`TranslateDirectly`)."""

import asyncio
import time

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from fairseq_speaker.errors import UserError
from fairseq_speaker.service import schema
from fairseq_speaker.service.bodies import json_body, translate_request
from fairseq_speaker.service.http_errors import (note_model, on_client_gone, on_http_error, on_invalid_request,
                                                 on_service_error)
from fairseq_speaker.service.routing import CheckedRoute
from fairseq_speaker.service.served_models import ServedModels
from fairseq_speaker.service.service_errors import Retired, ServiceError, timed_out


async def _within(awaitable, deadline: float, timeout: float, what: str):
    """``awaitable``'s result, or a 504 once ``deadline`` (of ``time.monotonic``) has passed."""
    try:
        return await asyncio.wait_for(awaitable, max(deadline - time.monotonic(), 0.0))
    except asyncio.TimeoutError:
        raise timed_out(what, timeout) from None


async def _translation(app: FastAPI, body: schema.TranslateRequest, scope) -> Response:
    """The answer to a valid /translate request, by the model it names. Waits without holding a thread: the sentences
    are translated with other requests' (see batcher.py). A request admitted before its model is reloaded is
    translated by the model it was admitted to."""
    models: ServedModels = app.state.models
    note_model(scope, models.known(body.model))
    service = models.get(body.model)
    timeout = service.batching.request_timeout
    deadline = time.monotonic() + timeout
    for attempt in range(2):
        prepared = service.prepare_translation(body, wait=False)  # at once, unless it would wait
        if prepared is None:
            prepared = await _within(run_in_threadpool(service.prepare_translation, body), deadline, timeout,
                                     "reading the speaker store")
        try:
            future = service.submit(prepared)
            break
        except Retired:  # reloaded between its admission and its queue: the new model takes it
            if attempt:
                raise
            service = models.get(body.model)
    try:
        results = await _within(asyncio.wrap_future(future), deadline, timeout, "the translation")
    except UserError as e:
        raise ServiceError(422, "invalid_request", str(e)) from None
    answer = service.answer(prepared, results)
    app.state.metrics.translated(len(answer.translations), service.model)
    # the answer as its model built and checked it (FastAPI would check it against the model again)
    return Response(answer.model_dump_json(exclude_none=True), media_type="application/json")


def add_reads(router: APIRouter) -> None:
    """Add ``POST /translate`` to ``router``."""

    @router.post("/translate", response_model=schema.TranslateResponse, response_model_exclude_none=True,
                 summary="Translate each sentence as its speaker, by the model the request names")
    async def translate(body: schema.TranslateRequest, request: Request):
        # JSON bodies are answered by TranslateDirectly, with the same code; this route describes the endpoint
        return await _translation(request.app, body, request.scope)


class TranslateDirectly:
    """ASGI middleware: answers ``POST /translate`` (and ``/v1/translate``) with a JSON body itself, as the route
    FastAPI declares for it does (the same code: :func:`_translation`; the same refusals, through the same
    handlers), without FastAPI's routing, exception middleware, dependency solving and response handling. Under
    load every one-sentence request would pay for those, in the interpreter that runs the beam searches
    (docs/serving.md: what it is worth). Other requests, and bodies not sent as ``application/json``, go on to
    FastAPI. ``app.state.translate_directly = False`` turns it off (the tests compare both ways)."""

    PATHS = ("/translate", "/v1/translate")

    def __init__(self, app, route: "CheckedRoute"):
        self.app, self.route = app, route

    async def __call__(self, scope, receive, send):
        if (scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in self.PATHS
                or not scope["app"].state.translate_directly or not json_body(scope)):
            await self.app(scope, receive, send)
            return
        scope["route"] = self.route  # as routing would set it (the metrics name the endpoint by it)
        request = Request(scope, receive)
        try:
            self.route.check_query(request)
            data = await request.body()
            body = translate_request(data)  # refused as FastAPI refuses a body
            response = await _translation(scope["app"], body, scope)
        except ServiceError as e:
            response = await on_service_error(request, e)
        except RequestValidationError as e:
            response = await on_invalid_request(request, e)
        except HTTPException as e:
            response = await on_http_error(request, e)
        except ClientDisconnect as e:
            response = await on_client_gone(request, e)
        await response(scope, receive, send)
