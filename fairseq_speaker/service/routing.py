"""The routes' checks, made before an endpoint reads its body: the query parameters a route takes
(:class:`CheckedRoute`), and the token of a write (:class:`WriteRoute`, :func:`authorize`); the routers of read and
write endpoints built on them (:func:`read_router`, :func:`write_router`)."""

import hmac
import json
from typing import List, Optional

from fastapi import APIRouter, Depends, Request, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer

from fairseq_speaker.service import schema
from fairseq_speaker.service.http_errors import check_path_line_ends
from fairseq_speaker.service.served_models import ServedModels
from fairseq_speaker.service.service_errors import ServiceError

HOW_TO_ENABLE_WRITES = ("start fairseq-speaker-serve with --token-file FILE (or --token-env VARIABLE) and --store "
                        "FILE, and send the token as 'Authorization: Bearer <token>'")


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


class CheckedRoute(APIRoute):
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

    def check_no_body(self, request: Request) -> None:
        """Raise :class:`ServiceError` (422) for a body sent to a route that reads none (``DELETE /models/{id}`` with
        ``{"x": 1}`` answered 200: fields a request does not define are refused, docs/serving.md)."""
        if self.body_names or self.dependant.body_params:
            return
        length = request.headers.get("content-length")
        if (length is not None and length.strip() not in ("", "0")) or "transfer-encoding" in request.headers:
            where = self.path.replace(":path}", "}")
            raise ServiceError(422, "invalid_request", f"{request.method} {where} takes no body: send the request "
                               f"without one")

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            check_path_line_ends(request)  # the route may have matched the path without its last line feed
            self.check_query(request)
            self.check_no_body(request)
            return await handler(request)

        return checked


class WriteRoute(CheckedRoute):
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


_READ_ERRORS = {status: {"model": schema.Error} for status in (404, 413, 422, 503, 504)}
_WRITE_ERRORS = {status: {"model": schema.Error} for status in (401, 403, 404, 409, 413, 422, 503, 504)}

_bearer = HTTPBearer(auto_error=False)  # the check is WriteRoute's; this shows the scheme at /docs


def served_models_of(request: Request) -> ServedModels:
    """The models the app serves (a dependency of the endpoints that use them)."""
    return request.app.state.models


def read_router() -> APIRouter:
    """A router for read endpoints (:class:`CheckedRoute`), with their errors described at ``/docs``."""
    return APIRouter(route_class=CheckedRoute, responses=_READ_ERRORS)


def write_router() -> APIRouter:
    """A router for write endpoints (:class:`WriteRoute`: the token first), with their errors described at ``/docs``."""
    return APIRouter(route_class=WriteRoute, dependencies=[Depends(_bearer)], responses=_WRITE_ERRORS)
