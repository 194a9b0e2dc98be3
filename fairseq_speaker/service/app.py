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
"""

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import hmac
import importlib.resources
import json
import logging
import math
import os
import re
import sys
import time
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from fairseq_speaker import __version__
from fairseq_speaker.data.speaker_dictionary import UNKNOWN_SPEAKER_POLICIES
from fairseq_speaker.errors import UserError, command, fail
from fairseq_speaker.onboarding.translator import SpeakerTranslator
from fairseq_speaker.service import schema
from fairseq_speaker.service.batcher import BatchOptions
from fairseq_speaker.service.connections import bounded_http_protocol
from fairseq_speaker.service.logs import LOG_FORMATS, LogLines, configure_logging
from fairseq_speaker.service.metrics import Metrics
from fairseq_speaker.tasks.speaker_translation import BEAM_STOPS
from fairseq_speaker.service.served_models import MODEL_ID_RULE, ServedModels, case_twin, model_id_problem
from fairseq_speaker.service.speaker_service import Limits, Retired, ServiceError, SpeakerService, timed_out
from fairseq_speaker.service.store import DEFAULT_MODEL, SpeakerStore, StoreError, durable_location
from fairseq_speaker.service.stores import open_store
from fairseq_speaker.user_dir import add_user_dir_argument, import_user_dir

logger = logging.getLogger("fairseq_speaker.service")

#: the shortest token accepted: a guessable one would make the write endpoints public
MIN_TOKEN_CHARS = 16
HOW_TO_ENABLE_WRITES = ("start fairseq-speaker-serve with --token-file FILE (or --token-env VARIABLE) and --store "
                        "FILE, and send the token as 'Authorization: Bearer <token>'")


# -- errors: one JSON shape, one log line, never a traceback -------------------------------------------


def _endpoint(scope) -> str:
    """The route's path template without the /v1 prefix (a bounded set of metric labels), or "unmatched"."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if not path:
        return "unmatched"
    path = path.replace(":path}", "}")
    return path[len("/v1"):] if path.startswith("/v1/") else path


#: the key of the request's scope state under which an endpoint notes the model a request went to (its metrics' and
#: log lines' ``model``)
_MODEL_KEY = "fairseq_speaker_model"


def _note_model(scope, model: Optional[str]) -> None:
    """Note that the request went to ``model`` (one the service serves), for its metrics and log lines."""
    if model is not None:
        scope.setdefault("state", {})[_MODEL_KEY] = model


def _model_of(scope) -> str:
    """The model the request went to, or "" (none, or an id the service does not serve)."""
    return str((scope.get("state") or {}).get(_MODEL_KEY, ""))


def _error(request: Request, status: int, code: str, message: str,
           headers: Optional[Dict[str, str]] = None) -> JSONResponse:
    log = logger.warning if status >= 500 else logger.info
    path = request.url.path.encode("unicode_escape").decode("ascii")  # a name's newline cannot forge a log line
    model = _model_of(request.scope)
    fields = {"method": request.method, "path": path, "status": status, "code": code}  # --log-format json's fields
    log(f"{request.method} {path}{f' (model {model})' if model else ''}: {status} {code}: {message}",
        extra=dict(fields, model=model) if model else fields)
    request.app.state.metrics.error(_endpoint(request.scope), code, model)
    headers = dict(headers or {}, **({"WWW-Authenticate": "Bearer"} if status == 401 else {}))
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers or None)


async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
    return _error(request, exc.status, exc.code, exc.message, exc.headers)


def _validation_message(request: Request, exc: RequestValidationError) -> Tuple[str, str]:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        e = next(e for e in errors if e.get("type") == "json_invalid")
        return "invalid_json", f"the body is not valid JSON ({e.get('ctx', {}).get('error', 'decode error')} at " \
                               f"character {e['loc'][-1]})"
    parts = []
    for e in errors[:5]:
        where = ".".join(str(x) for x in e.get("loc", ()) if x != "body") or "body"
        parts.append(f"{where}: {str(e.get('msg', '')).replace('Value error, ', '')}")
    message = "; ".join(parts) + (f" (and {len(errors) - 5} more)" if len(errors) > 5 else "")
    content_type = request.headers.get("content-type", "")
    if "json" not in content_type:
        message += f" (the body was sent as {content_type or 'no content type'}: send JSON with " \
                   f"'Content-Type: application/json')"
    return "invalid_request", message


async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    return _error(request, 422, *_validation_message(request, exc))


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}


class BodyRefused(HTTPException):
    """A request body refused as it is read (:class:`_Observed`): too large, too slow, not UTF-8, nested too deep."""

    def __init__(self, status: int, code: str, message: str, headers: Optional[Dict[str, str]] = None):
        super().__init__(status, message, headers)
        self.code = code


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    code = getattr(exc, "code", None) or _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if exc.status_code == 404:
        message = f"no endpoint {request.url.path}: see /docs"
    return _error(request, exc.status_code, code, message, exc.headers)


async def _client_gone(request: Request, exc: Exception) -> JSONResponse:
    """A client that went away while its body was read (or whose body the protocol refused: uvicorn has answered it
    already): the client's doing, not the service's failure (a 500 would page whoever alerts on them)."""
    return _error(request, 400, "client_disconnected", "the request's body did not arrive whole: the client went away "
                  "or sent a body the protocol refused")


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    # the server's log gets the traceback (uvicorn logs the exception, which Starlette raises again); the client not
    return _error(request, 500, "internal_error", "the service failed on this request; its log says why")


# -- authorization ---------------------------------------------------------------------------------------


def authorize(token: Optional[str], header: Optional[str]) -> None:
    """Let a write through, or raise: 403 when no token is configured, 401 for a missing or wrong one."""
    if token is None:
        raise ServiceError(403, "writes_disabled", f"writes are disabled on this service: {HOW_TO_ENABLE_WRITES}")
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise ServiceError(401, "unauthorized", "this endpoint needs the service's token: send "
                           "'Authorization: Bearer <token>'")
    if not hmac.compare_digest(given.strip().encode("utf-8"), token.encode("utf-8")):
        raise ServiceError(401, "unauthorized", "wrong token")


def _query_names(dependant) -> List[str]:
    """The query parameters a route declares (its own and its dependencies'), by the names a request gives them."""
    names = [field.alias for field in dependant.query_params]
    for sub in dependant.dependencies:
        names.extend(_query_names(sub))
    return list(dict.fromkeys(names))


def _body_names(dependant) -> List[str]:
    """The fields of a route's JSON body (where its body is one model)."""
    names: List[str] = []
    for field in dependant.body_params:
        names.extend(getattr(getattr(field.field_info, "annotation", None), "model_fields", None) or ())
    return names


class _CheckedRoute(APIRoute):
    """A route that refuses (422) a query parameter it does not declare, and one given more than once: a misspelt
    ``?modle=`` was ignored, a ``?model=`` of ``/translate`` too, and the request went to the default model; of
    ``?model=a&model=b`` the last was taken. Checked before the body is read."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.query_names = _query_names(self.dependant)
        self.body_names = _body_names(self.dependant)

    def check_query(self, request: Request) -> None:
        """Raise :class:`ServiceError` (422) for a query parameter of ``request`` this route does not take, or one
        given twice."""
        given = [name for name, _ in request.query_params.multi_items()]
        if not given:
            return
        where = self.path.replace(":path}", "}")
        unknown = [name for name in dict.fromkeys(given) if name not in self.query_names]
        if unknown:
            takes = (f"{where} takes {', '.join(self.query_names)}" if self.query_names else
                     f"{where} takes no query parameters")
            in_body = [name for name in unknown if name in self.body_names]
            if in_body:
                takes += f": give {', '.join(json.dumps(name) for name in in_body)} in the body"
            raise ServiceError(422, "invalid_request", f"unknown query parameter{'s' if len(unknown) > 1 else ''} "
                               f"{', '.join(map(repr, unknown))}: {takes}")
        for name in dict.fromkeys(given):
            count = given.count(name)
            if count > 1:
                values = ", ".join(repr(value) for value in request.query_params.getlist(name))
                raise ServiceError(422, "invalid_request", f"the query parameter {name!r} is given {count} times "
                                   f"({values}): give it once")

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            self.check_query(request)
            return await handler(request)

        return checked


class _WriteRoute(_CheckedRoute):
    """A route whose token is checked before its body is read: a client without the token learns nothing more."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def authorized(request: Request) -> Response:
            given = request.headers.getlist("authorization")
            if len(given) > 1:  # which one counts would be the server's choice, not the client's
                raise ServiceError(400, "invalid_request", f"{len(given)} Authorization headers: send one")
            authorize(request.app.state.token, given[0] if given else None)
            return await handler(request)

        return authorized


# -- the size of a request, the metrics of every request -------------------------------------------------


#: the deepest nesting of arrays and objects a request body may have (the requests' own is 2)
MAX_JSON_DEPTH = 32
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS = re.compile(rb"[\[\]{}]")


def body_problem(body: bytes) -> Optional[Tuple[int, str, str]]:
    """Why a request body cannot be JSON the service reads, before it is parsed, or None: ``(status, code,
    message)``. Bytes that are not UTF-8 (400), and arrays and objects nested deeper than :data:`MAX_JSON_DEPTH`
    (422: Python's parser would recurse once a level, and fail on 100,000 of them)."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as e:
        return 400, "not_utf8", (f"the body is not UTF-8 text (byte 0x{body[e.start]:02x} at position {e.start}): "
                                 f"send JSON encoded in UTF-8")
    if body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH:  # else it cannot nest deeper: no need to look
        depth = 0
        for bracket in _BRACKETS.findall(_JSON_STRING.sub(b'""', body)):
            depth += 1 if bracket in (b"[", b"{") else -1
            if depth > MAX_JSON_DEPTH:
                return 422, "invalid_json", (f"the body nests arrays and objects more than {MAX_JSON_DEPTH} deep: the "
                                             f"service's requests nest 2 deep")
    if b"{" in body:
        try:  # a key given twice: JSON parsers keep the last without a word (the request of another speaker)
            json.loads(body, object_pairs_hook=_keys_once)
        except _RepeatedKey as e:
            return 422, "invalid_json", (f"the key {e.key!r} is given twice in one object of the body: give each key "
                                         f"once")
        except ValueError:
            return None  # not JSON: the endpoint's own parser says so
    return None


def encoding_problem(headers: Mapping[bytes, bytes]) -> Optional[Tuple[int, str, str]]:
    """A body sent compressed (``Content-Encoding`` other than identity, or a ``Transfer-Encoding`` other than
    chunked): 415, where it was read as text (a gzip body was "not UTF-8", a plain one labelled br was taken as it
    was)."""
    encoding = headers.get(b"content-encoding", b"identity").decode("latin-1").strip().lower()
    if encoding not in ("", "identity"):
        return 415, "unsupported_encoding", (f"the body is sent with Content-Encoding {encoding!r}: the service "
                                             f"reads bodies uncompressed; send the JSON as it is")
    # HTTP/1.1's parser undoes chunked alone: a transfer coding before it (gzip, br) reached the body as it was sent
    transfer = headers.get(b"transfer-encoding", b"").decode("latin-1").lower()
    codings = [c.strip() for c in transfer.split(",") if c.strip() and c.strip() not in ("chunked", "identity")]
    if codings:
        return 415, "unsupported_encoding", (f"the body is sent with Transfer-Encoding {transfer.strip()!r}: the "
                                             f"service reads bodies uncompressed (chunked is read); send the JSON as "
                                             f"it is")
    return None


class _RepeatedKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _keys_once(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    """A JSON object as a dict, refusing a key given twice (``json.loads``'s ``object_pairs_hook``)."""
    found: Dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _RepeatedKey(key)
        found[key] = value
    return found


class _Observed:
    """ASGI middleware: reads request bodies under bounds, and records each request's endpoint, status and latency.

    A body is refused as it arrives: over ``max_body_bytes`` (413, before it is read whole), not arrived whole
    within ``body_timeout`` seconds of the request (408, the connection closed: a client that announces more than it
    sends holds nothing longer), not UTF-8 (400), nested too deep (422: :func:`body_problem`). The body is read by the
    endpoint, not here: a write's token is checked before its body is read. A request answered before its body was
    read whole has its connection closed after the answer."""

    def __init__(self, app, metrics: Metrics, max_body_bytes: int, body_timeout: float = 30.0):
        self.app, self.metrics, self.max_body_bytes, self.body_timeout = app, metrics, max_body_bytes, body_timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status, received, chunks, done = time.perf_counter(), [500], [0], [], [False]
        scope.setdefault("state", {})  # one dict, shared by the copies of the scope below: where the model is noted
        deadline = time.monotonic() + self.body_timeout
        too_large = (f"the request body is over {self.max_body_bytes} bytes (set by --max-sentences, --max-chars and "
                     f"--max-pairs)")

        async def limited_receive():
            if done[0]:  # the body was read: what comes now is a disconnect, waited for without a deadline
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0.0))
            except asyncio.TimeoutError:
                raise BodyRefused(408, "request_timeout", f"the request body did not arrive whole within "
                                  f"{self.body_timeout:g} s (fairseq-speaker-serve --request-timeout): send the "
                                  f"whole body, as long as its Content-Length says", {"Connection": "close"}) from None
            if message["type"] == "http.request":
                body = message.get("body", b"")
                received[0] += len(body)
                if received[0] > self.max_body_bytes:
                    raise HTTPException(413, too_large)
                chunks.append(body)
                if not message.get("more_body", False):
                    done[0] = True
                    problem = (encoding_problem(headers) or body_problem(b"".join(chunks))) if received[0] else None
                    chunks.clear()
                    if problem:
                        raise BodyRefused(*problem)
            else:
                done[0] = True
            return message

        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        has_body = (length is not None and length != b"0") or b"transfer-encoding" in headers

        async def observed_send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                if has_body and not done[0]:  # answered before its body was read (401, 413): the connection is closed,
                    # not left to a client that may go on sending the rest slowly
                    message = dict(message, headers=[*message.get("headers", []), (b"connection", b"close")])
            await send(message)

        try:
            if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
                self.metrics.error("unmatched", "too_large")
                await JSONResponse({"error": {"code": "too_large", "message": too_large}}, status_code=413)(
                    scope, receive, observed_send)
                return
            await self.app(scope, limited_receive, observed_send)
        finally:
            self.metrics.observe(_endpoint(scope), scope.get("method", ""), status[0], time.perf_counter() - start,
                                 _model_of(scope))


# -- the endpoints ---------------------------------------------------------------------------------------


#: ``?model=`` of the speaker endpoints
_MODEL_QUERY = Query(None, description="the model whose speakers these are, by its id (GET /models lists them; "
                     "default: the service's default model)")

_T = TypeVar("_T")


def _on_model(request: Request, model: Optional[str], call: Callable[[SpeakerService], _T]) -> _T:
    """``call`` on the service of ``model`` (404 for an id the service does not serve); a call that met the model's
    reload (:class:`Retired`: it waited while the model was swapped) is made again on the new one."""
    models: ServedModels = request.app.state.models
    _note_model(request.scope, models.known(model))
    try:
        return call(models.get(model))
    except Retired:
        return call(models.get(model))


_READ_ERRORS = {status: {"model": schema.Error} for status in (404, 413, 422, 503, 504)}
_WRITE_ERRORS = {status: {"model": schema.Error} for status in (401, 403, 404, 409, 413, 422, 503, 504)}


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
    _note_model(scope, models.known(body.model))
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


def _json_body(scope) -> bool:
    """Whether the request says its body is JSON (``application/json``, with parameters or not)."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.split(b";")[0].strip().lower() == b"application/json"
    return False


class _TranslateDirectly:
    """ASGI middleware: answers ``POST /translate`` (and ``/v1/translate``) with a JSON body itself, as the route
    FastAPI declares for it does (the same code: :func:`_translation`; the same refusals, through the same
    handlers), without FastAPI's routing, exception middleware, dependency solving and response handling. Under
    load every one-sentence request would pay for those, in the interpreter that runs the beam searches
    (docs/serving.md: what it is worth). Other requests, and bodies not sent as ``application/json``, go on to
    FastAPI. ``app.state.translate_directly = False`` turns it off (the tests compare both ways)."""

    PATHS = ("/translate", "/v1/translate")

    def __init__(self, app, route: "_CheckedRoute"):
        self.app, self.route = app, route

    async def __call__(self, scope, receive, send):
        if (scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in self.PATHS
                or not scope["app"].state.translate_directly or not _json_body(scope)):
            await self.app(scope, receive, send)
            return
        scope["route"] = self.route  # as routing would set it (the metrics name the endpoint by it)
        request = Request(scope, receive)
        try:
            self.route.check_query(request)
            data = await request.body()
            try:  # the errors FastAPI would give (json.loads, then the model as FastAPI validates a body)
                body = schema.TranslateRequest.model_validate(json.loads(data) if data else None, from_attributes=True)
            except json.JSONDecodeError as e:
                raise RequestValidationError([{"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode "
                                               "error", "input": {}, "ctx": {"error": e.msg}}]) from None
            except ValidationError as e:
                raise RequestValidationError(e.errors(include_url=False) if data else
                                             [{"type": "missing", "loc": ("body",), "msg": "Field required",
                                               "input": None}]) from None
            response = await _translation(scope["app"], body, scope)
        except ServiceError as e:
            response = await _service_error(request, e)
        except RequestValidationError as e:
            response = await _invalid_request(request, e)
        except HTTPException as e:
            response = await _http_error(request, e)
        except ClientDisconnect as e:
            response = await _client_gone(request, e)
        await response(scope, receive, send)


class _HeadAsGet:
    """ASGI middleware: ``HEAD`` is answered wherever ``GET`` is, with GET's status and headers and no body (RFC 9110,
    9.3.2); where there is no GET, it gets GET's 405. Starlette's own routes add HEAD to GET, FastAPI's API routes do
    not, and listing HEAD on them would put a second operation of each in the OpenAPI description."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        as_get = dict(scope, method="GET")  # a copy: the server reads the request's own method to send no body

        async def headers_only(message):
            if message["type"] == "http.response.body":
                message = dict(message, body=b"")
            await send(message)

        try:
            await self.app(as_get, receive, headers_only)
        finally:
            if "route" in as_get:  # the metrics name the endpoint by the route routing found
                scope["route"] = as_get["route"]


_bearer = HTTPBearer(auto_error=False)  # the check is _WriteRoute's; this shows the scheme at /docs


def _models(request: Request) -> ServedModels:
    return request.app.state.models


def _reads() -> APIRouter:
    router = APIRouter(route_class=_CheckedRoute, responses=_READ_ERRORS)

    @router.post("/translate", response_model=schema.TranslateResponse, response_model_exclude_none=True,
                 summary="Translate each sentence as its speaker, by the model the request names")
    async def translate(body: schema.TranslateRequest, request: Request):
        # JSON bodies are answered by _TranslateDirectly, with the same code; this route describes the endpoint
        return await _translation(request.app, body, request.scope)

    @router.get("/speakers", response_model=schema.SpeakerList, summary="The speakers of a model, trained and "
                "onboarded")
    def speakers(request: Request, model: Optional[str] = _MODEL_QUERY):
        return _on_model(request, model, lambda service: service.speakers())

    @router.get("/speakers/{name:path}", response_model=schema.Speaker, summary="One speaker of a model")
    def speaker(name: str, request: Request, model: Optional[str] = _MODEL_QUERY):
        return _on_model(request, model, lambda service: service.speaker(name))

    @router.get("/models", response_model=schema.ModelList, response_model_exclude_none=True,
                summary="The models served: id, checkpoint, its digest, when it was loaded, its speakers")
    async def models(served: ServedModels = Depends(_models)):
        return served.describe_all()

    @router.get("/models/{model_id}", response_model=schema.ModelInfo, response_model_exclude_none=True,
                summary="One model")
    async def model(model_id: str, request: Request, served: ServedModels = Depends(_models)):
        _note_model(request.scope, served.known(model_id))
        return served.describe(model_id)

    @router.get("/limits", response_model=schema.ServiceLimits,
                summary="What one request may ask (a client, such as the page at /, splits its requests by it)")
    async def limits(served: ServedModels = Depends(_models)):
        return served.get().limits_of_a_request()

    @router.get("/health", response_model=schema.Health,
                summary="200 when the models are loaded and the store answers")
    def health(request: Request, served: ServedModels = Depends(_models)):
        return served.get().health(writes=request.app.state.token is not None, models=served.ids)

    @router.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics of this process")
    def metrics(request: Request, served: ServedModels = Depends(_models)):
        services = served.services
        text = request.app.state.metrics.render({s.model: s.counts() for s in services},
                                                {s.model: s.batcher.queued for s in services})
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    return router


def _writes() -> APIRouter:
    router = APIRouter(route_class=_WriteRoute, dependencies=[Depends(_bearer)], responses=_WRITE_ERRORS)

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

    # loads read a checkpoint: in a thread of the pool (a def, not an async def), beside the translations
    @router.post("/models", response_model=schema.ModelInfo, response_model_exclude_none=True, status_code=201,
                 summary="Load a checkpoint as a new model, without a restart")
    def add_model(body: schema.ModelAdd, request: Request, served: ServedModels = Depends(_models)):
        return _loaded(request, body.id, lambda: served.add(body.id, body.checkpoint, body.data))

    @router.post("/models/{model_id}/reload", response_model=schema.ModelInfo, response_model_exclude_none=True,
                 summary="Load a model's checkpoint again, or another one, and swap it in; requests admitted before "
                 "finish on the old one")
    def reload_model(model_id: str, request: Request, body: Optional[schema.ModelLoad] = None,
                     served: ServedModels = Depends(_models)):
        _note_model(request.scope, served.known(model_id))
        body = body or schema.ModelLoad()
        return _loaded(request, model_id, lambda: served.reload(model_id, body.checkpoint, body.data))

    @router.delete("/models/{model_id}", response_model=schema.ModelRemoved,
                   summary="Stop serving a model (not the default); its stored speakers are kept")
    def remove_model(model_id: str, request: Request, served: ServedModels = Depends(_models)):
        _note_model(request.scope, served.known(model_id))
        return served.remove(model_id)

    return router


def _loaded(request: Request, model: str, load: Callable[[], schema.ModelInfo]) -> schema.ModelInfo:
    """The answer of a load of ``model``, counted by the metrics (loaded or failed)."""
    metrics: Metrics = request.app.state.metrics
    try:
        info = load()
    except ServiceError as e:
        if e.code in ("load_failed", "load_refused", "store_unavailable", "timeout"):
            metrics.loaded(model, "failed")
        raise
    metrics.loaded(model, "loaded")
    _note_model(request.scope, model)
    return info


def _static(name: str) -> bytes:
    return importlib.resources.files(__package__).joinpath("static", name).read_bytes()


#: where the API description pages' scripts and styles are served from (the fastapi-offline package's files)
DOCS_ASSETS = "/docs/static"


def _pages(app: FastAPI) -> None:
    """``/`` (the page to try the service), ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) with their scripts and
    styles, and ``/favicon.ico``: all served by the service itself, nothing from the internet, so that they work where
    the service has none. Starlette routes: each answers HEAD too."""
    page = HTMLResponse(_static("index.html").decode("utf-8"))
    icon = Response(_static("favicon.png"), media_type="image/png", headers={"Cache-Control": "max-age=86400"})
    app.mount(DOCS_ASSETS, StaticFiles(packages=[("fastapi_offline", "static")]), name="docs-static")

    def prefix(request: Request) -> str:  # behind a proxy that serves the service under a path (uvicorn's root_path)
        return request.scope.get("root_path", "").rstrip("/")

    async def swagger_ui(request: Request) -> HTMLResponse:
        root = prefix(request)
        return get_swagger_ui_html(openapi_url=root + app.openapi_url, title=f"{app.title} - API",
                                   swagger_js_url=f"{root}{DOCS_ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{root}{DOCS_ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{root}/favicon.ico", oauth2_redirect_url=None)

    async def redoc(request: Request) -> HTMLResponse:
        root = prefix(request)
        html = get_redoc_html(openapi_url=root + app.openapi_url, title=f"{app.title} - API",
                              redoc_js_url=f"{root}{DOCS_ASSETS}/redoc.standalone.js",
                              redoc_favicon_url=f"{root}/favicon.ico", with_google_fonts=False)
        # ReDoc shows its maker's logo from their CDN (and hides it when it does not load): not fetched at all
        html.headers["Content-Security-Policy"] = "img-src 'self' data:"
        return html

    app.add_route("/", lambda request: page, include_in_schema=False)
    app.add_route("/docs", swagger_ui, include_in_schema=False)
    app.add_route("/redoc", redoc, include_in_schema=False)
    app.add_route("/favicon.ico", lambda request: icon, include_in_schema=False)


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
    app.add_middleware(_TranslateDirectly, route=translate)  # inside _Observed: limits and metrics apply
    app.add_middleware(_HeadAsGet)
    app.add_middleware(_Observed, metrics=app.state.metrics, max_body_bytes=limits.max_body_bytes,
                       body_timeout=batching.request_timeout)
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(ClientDisconnect, _client_gone)
    app.add_exception_handler(Exception, _internal_error)
    for prefix, (reads, writes) in routers.items():
        app.include_router(reads, prefix=prefix, include_in_schema=not prefix)
        app.include_router(writes, prefix=prefix, include_in_schema=not prefix)
    _pages(app)
    return app


# -- the command -----------------------------------------------------------------------------------------


def _encoders(tokenizer: Optional[str], bpe: Optional[str]) -> list:
    """The option dataclasses of the chosen fairseq tokenizer and BPE (``--bpe-codes``, ``--sentencepiece-model``,
    ...): fairseq-interactive's options for them."""
    from fairseq.registry import REGISTRIES

    found = [REGISTRIES[registry]["dataclass_registry"].get(name) if name else None
             for registry, name in (("tokenizer", tokenizer), ("bpe", bpe))]
    return [dataclass for dataclass in found if dataclass is not None]


#: the help of each limit (fields of :class:`Limits`)
_LIMITS_HELP = {
    "max_sentences": "sentences in one /translate request",
    "max_chars": "characters in one sentence (to translate, or of an onboarding pair)",
    "max_pairs": "sentence pairs in one onboarding or update request",
    "max_speaker_pairs": "sentence pairs one onboarded speaker is fitted on in all (an update refits on all of them)",
    "max_beam": "the beam a /translate request may ask for",
}

#: the help of each option of :class:`BatchOptions`
_BATCHING_HELP = {
    "max_batch_sentences": "sentences in one shared beam search at most (a request with more is split over several, "
                           "in order)",
    "max_batch_tokens": "source tokens in one shared beam search at most, padding included, as fairseq's --max-tokens "
                        "counts them (a request with more is split over several, in order; a longer sentence goes "
                        "alone)",
    "max_gap_ms": "milliseconds a batch that is not full waits for the next request, after the latest one and after "
                  "the last batch ended (it goes at once when as many requests have come as the last batch answered)",
    "max_wait_ms": "milliseconds the oldest waiting request waits for others to share its beam search, at most",
    "max_queue": "sentences waiting to be translated at most; a request that would pass it gets 503",
    "request_timeout": "seconds a request may take, waiting and translating, before it gets 504",
}


def build_parser(tokenizer: Optional[str] = None, bpe: Optional[str] = None) -> argparse.ArgumentParser:
    import fairseq.data.encoders  # noqa: F401  (fills the tokenizer and BPE registries)
    from fairseq.dataclass.utils import gen_parser_from_dataclass
    from fairseq.registry import REGISTRIES

    parser = argparse.ArgumentParser(
        prog="fairseq-speaker-serve", conflict_handler="resolve",
        description="Serve a speaker model over HTTP: translate each sentence as its speaker, onboard speakers "
        "(with a token), keep them in a store. Guide: docs/serving.md; API: /docs once running.")
    encoders = parser.add_argument_group("the tokenizer's and BPE's options (fairseq's)")
    for dataclass in _encoders(tokenizer, bpe):  # first: ours below win where names are shared (--source-lang)
        gen_parser_from_dataclass(encoders, dataclass())
    parser.add_argument("checkpoint", metavar="CHECKPOINT", nargs="?",
                        help=f"the model (a fairseq-speaker checkpoint), served as the model '{DEFAULT_MODEL}'")
    parser.add_argument("--data", metavar="DATA_DIR",
                        help="the data directory the model was trained on (its dict.*.txt); required with CHECKPOINT, "
                        "and the data of a --model that names none")
    models = parser.add_argument_group("several models (docs/serving.md, \"Several models\")")
    models.add_argument("--model", action="append", default=[], metavar="ID=CHECKPOINT[:DATA_DIR]", dest="models",
                        help=f"serve CHECKPOINT (with DATA_DIR's dictionaries, default --data) as the model ID; "
                        f"repeat it for several. A request names its model (\"model\" of POST /translate, ?model= of "
                        f"the speaker endpoints) or goes to the default one. ID: {MODEL_ID_RULE}")
    models.add_argument("--default-model", metavar="ID",
                        help=f"the model a request that names none goes to (default: '{DEFAULT_MODEL}', CHECKPOINT's, "
                        f"if given, else the first --model)")
    net = parser.add_argument_group("network")
    net.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s, this machine "
                     "only)")
    net.add_argument("--port", type=int, default=8000, help="port to listen on (default: %(default)s)")
    net.add_argument("--header-timeout", type=float, default=10.0, metavar="X",
                     help="seconds a client has to send a request's line and headers, from its connection or the "
                     "request's first byte; then 408 and the connection is closed (default: %(default)s; the body must "
                     "arrive within --request-timeout)")
    logs = parser.add_argument_group("the log (standard error)")
    logs.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                      help="text: one line a record for a person; json: one JSON object a line (time, level, logger, "
                      "message and the record's fields) for a log collector (default: %(default)s)")
    logs.add_argument("--access-log", action="store_true",
                      help="log every request (client, method, path, status: uvicorn's access line); off by default, "
                      "as a proxy or load balancer in front usually keeps that log: refusals are logged either way, "
                      "and /metrics counts every request")
    auth = parser.add_argument_group("writes (onboarding, updating, deleting speakers)")
    auth.add_argument("--token-file", metavar="FILE", help="a file holding the token that write requests must send "
                      "as 'Authorization: Bearer <token>'; without a token writes are disabled")
    auth.add_argument("--token-env", metavar="VARIABLE", help="the environment variable holding the token "
                      "(instead of --token-file)")
    auth.add_argument("--store", metavar="FILE|URL", help="where onboarded speakers are kept: an SQLite file "
                      "(speakers.db or sqlite:///speakers.db; created if missing; processes on one machine may share "
                      "it), or a PostgreSQL database (postgresql://USER@HOST[:PORT]/DATABASE, the password best in "
                      "PGPASSWORD or ~/.pgpass; replicas on many machines may share it; pip install "
                      "'fairseq-speaker[postgres]'); required with a token")
    auth.add_argument("--skip-broken-speakers", action="store_true",
                      help="start even when some stored speakers cannot be read (a damaged store) or used, serving "
                      "without them and logging their names; without it such a store is refused at start-up, saying "
                      "how to recover")
    model = parser.add_argument_group("translation")
    model.add_argument("--beam", type=int, default=5, help="beam size (default: %(default)s)")
    model.add_argument("--beam-stop", choices=BEAM_STOPS,
                       help="when the beam search ends a sentence (fairseq-generate's --beam-stop; default: the "
                       "checkpoint's, fairseq's rule): 'unbeaten' searches on while a live hypothesis beats the ended")
    model.add_argument("--max-len-a", type=float, help="fairseq's: at most a*source length + b target tokens")
    model.add_argument("--max-len-b", type=int, help="fairseq's (default: the checkpoint's)")
    model.add_argument("--unknown-speaker", choices=UNKNOWN_SPEAKER_POLICIES,
                       help="what a speaker the model does not know gets (default: the checkpoint's, mean): the mean "
                       "speaker, no speaker, or a 404")
    model.add_argument("--source-lang", help="if fairseq cannot infer the language pair from DATA_DIR")
    model.add_argument("--target-lang")
    model.add_argument("--tokenizer", choices=sorted(REGISTRIES["tokenizer"]["registry"]),
                       help="tokenize raw input as the training data was (fairseq's, e.g. moses; default: the "
                       "checkpoint's preprocessing, if its data recorded one)")
    model.add_argument("--bpe", choices=sorted(REGISTRIES["bpe"]["registry"]),
                       help="apply the training data's BPE (fairseq's, e.g. subword_nmt with --bpe-codes; default: "
                       "the checkpoint's)")
    model.add_argument("--preprocessing", choices=["auto", "none"],
                       help="auto (default): apply the preprocessing kept in the checkpoint to raw input and undo it "
                       "on the translations, where --tokenizer/--bpe are not given; none: the requests' sentences "
                       "are already in the model's tokens (docs/sated.md)")
    model.add_argument("--threads", type=int, help="torch threads (default: the cores this process may use, or "
                       "OMP_NUM_THREADS if set)")
    add_user_dir_argument(model)
    limits = parser.add_argument_group("limits of one request")
    for field in dataclasses.fields(Limits):
        limits.add_argument("--" + field.name.replace("_", "-"), type=int, default=field.default, metavar="N",
                            help=_LIMITS_HELP[field.name] + " (default: %(default)s)")
    batching = parser.add_argument_group("batching of concurrent translations, queue, timeout")
    for field in dataclasses.fields(BatchOptions):
        kind = float if field.type in (float, "float") else int
        default = "none" if field.default is None else "%(default)s"
        batching.add_argument("--" + field.name.replace("_", "-"), type=kind, default=field.default,
                              metavar="N" if kind is int else "X",
                              help=f"{_BATCHING_HELP[field.name]} (default: {default})")
    return parser


def model_specs(args: argparse.Namespace) -> Dict[str, Tuple[str, str]]:
    """The models the command serves, by id, in order: ``(checkpoint, data directory)``; raises :class:`UserError`
    naming the option that is wrong and how to write it."""
    specs: Dict[str, Tuple[str, str]] = {}
    if args.checkpoint is not None:
        if args.data is None:
            raise UserError("the following arguments are required with CHECKPOINT: --data DATA_DIR (the data directory "
                            "the model was trained on)")
        specs[DEFAULT_MODEL] = (args.checkpoint, args.data)
    for spec in args.models:
        model, equals, rest = spec.partition("=")
        checkpoint, _, data = rest.partition(":")  # as fairseq's --path, a checkpoint's path holds no ':'
        form = "write --model ID=CHECKPOINT or --model ID=CHECKPOINT:DATA_DIR"
        if not equals:
            raise UserError(f"--model {spec}: no '=': {form}")
        if not model:
            raise UserError(f"--model {spec}: no model id: {form}")
        problem = model_id_problem(model)
        if problem:
            raise UserError(f"--model {spec}: {problem}")
        if not checkpoint:
            raise UserError(f"--model {spec}: no checkpoint: {form}")
        if not data and args.data is None:
            raise UserError(f"--model {spec}: no data directory: {form}, or give --data DATA_DIR for the models that "
                            f"name none")
        if model in specs:
            also = " (the model of CHECKPOINT)" if model == DEFAULT_MODEL and args.checkpoint is not None else ""
            raise UserError(f"--model {spec}: the model id {model!r} is given twice{also}: give each model an id of "
                            f"its own")
        twin = case_twin(model, specs)
        if twin is not None:
            raise UserError(f"--model {spec}: the model ids {twin!r} and {model!r} differ only by case: give each "
                            f"model an id that differs from the others in more than case")
        specs[model] = (checkpoint, data or args.data)
    if not specs:
        raise UserError("give the model to serve: CHECKPOINT --data DATA_DIR, or --model ID=CHECKPOINT[:DATA_DIR] "
                        "(repeated for several)")
    if args.default_model is not None and args.default_model not in specs:
        raise UserError(f"--default-model {args.default_model}: no such model: the models are "
                        f"{', '.join(map(repr, specs))}")
    return specs


def check_listening(host: str, port: int) -> None:
    """Refuse (:class:`UserError`) an address the service could not listen on: a port in use, a host that is no
    address of this machine or that does not resolve. Bound and let go at once, as uvicorn binds it (SO_REUSEADDR)."""
    import socket

    fix = "give a free port (--port) or an address of this machine (--host; 127.0.0.1 or 0.0.0.0)"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as e:  # socket.gaierror included
        raise UserError(f"--host {host} --port {port}: cannot listen there ({e.strerror or e}): {fix}") from None


#: the shortest --request-timeout the service starts with (seconds)
MIN_REQUEST_TIMEOUT = 0.1


def parse_args(argv: Optional[Sequence[str]] = None) -> Tuple[argparse.Namespace, Dict, Limits]:
    """The options, the fairseq overrides for :meth:`SpeakerTranslator.from_pretrained`, and the limits; ``args.specs``
    are the models to serve (:func:`model_specs`)."""
    argv = list(argv) if argv is not None else sys.argv[1:]
    first, _ = build_parser().parse_known_args(argv)
    parser = build_parser(first.tokenizer, first.bpe)
    args = parser.parse_args(argv)
    try:
        args.specs = model_specs(args)
    except UserError as e:
        parser.error(str(e))
    if not 1 <= args.port <= 65535:
        parser.error(f"--port must be between 1 and 65535, got {args.port}")
    if not (args.header_timeout > 0 and math.isfinite(args.header_timeout)):
        parser.error(f"--header-timeout must be a positive number of seconds, got {args.header_timeout}")
    for option in ("beam", "threads"):
        value = getattr(args, option)
        if value is not None and value < 1:
            parser.error(f"--{option} must be at least 1, got {value}")
    # every request would be refused (422) for the search's lengths: a translation of at most 0 words, or NaN
    if args.max_len_a is not None and not (math.isfinite(args.max_len_a) and args.max_len_a >= 0):
        parser.error(f"--max-len-a must be a finite number of at least 0, got {args.max_len_a}")
    if args.max_len_b is not None and args.max_len_b < (0 if args.max_len_a else 1):
        parser.error(f"--max-len-b must be at least {0 if args.max_len_a else 1} (a translation of at least one word"
                     f"{' for every source' if not args.max_len_a else ''}), got {args.max_len_b}")
    try:
        limits = Limits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)})
        #: how concurrent translations are gathered (:class:`BatchOptions`), for :func:`create_app`
        args.batching = BatchOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(BatchOptions)})
    except ValueError as e:
        parser.error(str(e))
    if args.beam > limits.max_beam:
        parser.error(f"--beam {args.beam} is over --max-beam {limits.max_beam}")
    if args.batching.max_queue < limits.max_sentences:
        parser.error(f"--max-queue ({args.max_queue}) must be at least --max-sentences ({limits.max_sentences}), or "
                     f"the largest request could never be queued")
    if limits.max_speaker_pairs < limits.max_pairs:
        parser.error(f"--max-speaker-pairs ({limits.max_speaker_pairs}) must be at least --max-pairs "
                     f"({limits.max_pairs}), or the largest onboarding could never be kept")
    if args.batching.request_timeout < MIN_REQUEST_TIMEOUT:  # every request with a body got 408, blaming its client
        parser.error(f"--request-timeout must be at least {MIN_REQUEST_TIMEOUT:g} s (the time a request's body has to "
                     f"arrive and its translation to be made), got {args.batching.request_timeout:g}")
    if args.token_file and args.token_env:
        parser.error("give the token with --token-file or with --token-env, not both")
    if (args.token_file or args.token_env) and not args.store:
        parser.error("a token enables onboarding: give --store FILE too, to keep the onboarded speakers")
    if args.store is not None:
        try:  # its form and driver, before the model loads (the database is reached once it has)
            durable_location(args.store, lost="when the service stops, with every speaker onboarded")
        except StoreError as e:
            parser.error(str(e))
    overrides = {"beam": args.beam}
    for key in ("unknown_speaker", "beam_stop", "source_lang", "target_lang", "max_len_a", "max_len_b", "tokenizer", "bpe",
                "preprocessing"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    for dataclass in _encoders(args.tokenizer, args.bpe):
        for field in dataclasses.fields(dataclass):
            value = getattr(args, field.name, None)
            if value == "???":
                parser.error(f"--{field.name.replace('_', '-')} is required with this --tokenizer/--bpe")
            if value is not None and field.name not in overrides:
                overrides[field.name] = value
    return args, overrides, limits


def read_token(args: argparse.Namespace) -> Optional[str]:
    """The token of ``--token-file`` or ``--token-env`` (None: writes disabled); a user error when unusable."""
    if args.token_file:
        where = f"--token-file {args.token_file}"
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"{where}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    elif args.token_env:
        where = f"--token-env {args.token_env}"
        token = os.environ.get(args.token_env, "").strip()
    else:
        return None
    if not token:
        raise UserError(f"{where}: the token is empty" + (" (is the variable set?)" if args.token_env else ""))
    if not all(33 <= ord(c) < 127 for c in token):
        raise UserError(f"{where}: the token must be printable ASCII without spaces (it travels in an HTTP header)")
    if len(token) < MIN_TOKEN_CHARS:
        raise UserError(f"{where}: the token has {len(token)} characters; use at least {MIN_TOKEN_CHARS}, e.g. from "
                        f"python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    return token


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
            if not os.path.isdir(data):
                where = "" if model == DEFAULT_MODEL and args.checkpoint is not None else f" (of --model {model})"
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
