"""The service's errors: one JSON shape (``{"error": {"code": ..., "message": ...}}``), one log line, never a traceback.

:func:`add_error_handlers` installs the handlers that answer so every refusal of a request (a :class:`ServiceError`,
a body FastAPI could not validate, an HTTP error of routing, a client gone) and every unexpected failure (a 500);
each is logged and counted by the metrics, by its endpoint (:func:`endpoint_of`) and by the model the request went
to (:func:`note_model`).
"""

import logging
from typing import Dict, Optional, Tuple

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from fairseq_speaker.data.speaker_labels import label_problem
from fairseq_speaker.service.service_errors import ServiceError

logger = logging.getLogger("fairseq_speaker.service")


def endpoint_of(scope) -> str:
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


def note_model(scope, model: Optional[str]) -> None:
    """Note that the request went to ``model`` (one the service serves), for its metrics and log lines."""
    if model is not None:
        scope.setdefault("state", {})[_MODEL_KEY] = model


def model_of(scope) -> str:
    """The model the request went to, or "" (none, or an id the service does not serve)."""
    return str((scope.get("state") or {}).get(_MODEL_KEY, ""))


def _error(request: Request, status: int, code: str, message: str,
           headers: Optional[Dict[str, str]] = None) -> JSONResponse:
    log = logger.warning if status >= 500 else logger.info
    # the path as received (request.url drops a line feed from it), escaped: a name's newline cannot forge a log line
    path = request.scope.get("path", request.url.path).encode("unicode_escape").decode("ascii")
    model = model_of(request.scope)
    fields = {"method": request.method, "path": path, "status": status, "code": code}  # --log-format json's fields
    log(f"{request.method} {path}{f' (model {model})' if model else ''}: {status} {code}: {message}",
        extra=dict(fields, model=model) if model else fields)
    request.app.state.metrics.error(endpoint_of(request.scope), code, model)
    headers = dict(headers or {}, **({"WWW-Authenticate": "Bearer"} if status == 401 else {}))
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers or None)


async def on_service_error(request: Request, exc: ServiceError) -> JSONResponse:
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


async def on_invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    return _error(request, 422, *_validation_message(request, exc))


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}


def check_path_line_ends(request: Request) -> None:
    """Raise :class:`ServiceError` for a path holding a line feed. Starlette's route patterns end in ``$``, which also
    matches before a last line feed, and ``{name:path}`` stops at one: ``DELETE /speakers/dr-lee%0A`` deleted
    ``dr-lee``, and ``PUT /speakers/a%0Ab`` was told there is no such endpoint. A speaker's path gets the label
    policy's 422 naming the name as written; any other, 404."""
    path = request.scope["path"]
    if "\n" not in path:
        return
    _, found, name = path.partition("/speakers/")
    if found and request.method == "POST":
        name = name.removesuffix("/sentences")
    if found:
        raise ServiceError(422, "invalid_speaker", f"speaker name: {label_problem(name)}")
    _, found, model = path.partition("/models/")
    if found and model:  # an id holds no line end: the endpoint is there, the model is not
        model = model.removesuffix("/reload") if request.method == "POST" else model
        raise ServiceError(404, "unknown_model", f"no model {model!r}: GET /models lists the models served")
    raise ServiceError(404, "not_found", f"no endpoint {path!r}: see /docs")


async def on_http_error(request: Request, exc: HTTPException) -> JSONResponse:
    code = getattr(exc, "code", None) or _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if exc.status_code == 404:
        try:
            check_path_line_ends(request)
        except ServiceError as e:
            return await on_service_error(request, e)
        message = f"no endpoint {request.url.path}: see /docs"
    return _error(request, exc.status_code, code, message, exc.headers)


async def on_client_gone(request: Request, exc: Exception) -> JSONResponse:
    """A client that went away while its body was read (or whose body the protocol refused: uvicorn has answered it
    already): the client's doing, not the service's failure (a 500 would page whoever alerts on them)."""
    return _error(request, 400, "client_disconnected", "the request's body did not arrive whole: the client went away "
                  "or sent a body the protocol refused")


async def on_internal_error(request: Request, exc: Exception) -> JSONResponse:
    # the server's log gets the traceback (uvicorn logs the exception, which Starlette raises again); the client not
    return _error(request, 500, "internal_error", "the service failed on this request; its log says why")


def add_error_handlers(app: FastAPI) -> None:
    """Answer every error of ``app``'s requests with the service's JSON error (any other exception: a 500)."""
    app.add_exception_handler(ServiceError, on_service_error)
    app.add_exception_handler(RequestValidationError, on_invalid_request)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(ClientDisconnect, on_client_gone)
    app.add_exception_handler(Exception, on_internal_error)
