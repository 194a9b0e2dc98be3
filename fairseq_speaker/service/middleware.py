"""The service's ASGI middleware: the bounds on a request's body and the metrics of every request
(:class:`Observed`), and ``HEAD`` answered as ``GET`` (:class:`HeadAsGet`). ``POST /translate``'s own is
:class:`~fairseq_speaker.service.translate_routes.TranslateDirectly`."""

import asyncio
import time
from typing import Dict, Optional

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from fairseq_speaker.service.bodies import body_problem, encoding_problem
from fairseq_speaker.service.http_errors import endpoint_of, model_of
from fairseq_speaker.service.metrics import Metrics


class BodyRefused(HTTPException):
    """A request body refused as it is read (:class:`Observed`): too large, too slow, not UTF-8, nested too deep."""

    def __init__(self, status: int, code: str, message: str, headers: Optional[Dict[str, str]] = None):
        super().__init__(status, message, headers)
        self.code = code


class Observed:
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
            self.metrics.observe(endpoint_of(scope), scope.get("method", ""), status[0], time.perf_counter() - start,
                                 model_of(scope))


class HeadAsGet:
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
