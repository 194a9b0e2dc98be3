"""Request bodies, judged before they are parsed and parsed as FastAPI would: bytes that are not UTF-8, arrays and
objects nested too deep, a key given twice (:func:`body_problem`); a body sent compressed (:func:`encoding_problem`);
a ``/translate`` request read from its JSON (:func:`translate_request`)."""

import json
import re
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from fairseq_speaker.service import schema

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
    digits = sys.get_int_max_str_digits()
    if digits and len(body) > digits and re.search(rb"\d{%d}" % (digits + 1), _JSON_STRING.sub(b'""', body)):
        # Python's JSON parser refuses to read such an integer (a ValueError, not a JSON error: an HTTP 500)
        return 422, "invalid_json", (f"the body holds a number of more than {digits} digits, which no field of the "
                                     f"service's requests takes: send the numbers the API describes")
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


def json_body(scope) -> bool:
    """Whether the request says its body is JSON (``application/json``, with parameters or not)."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.split(b";")[0].strip().lower() == b"application/json"
    return False


def translate_request(data: bytes) -> schema.TranslateRequest:
    """The ``/translate`` request of the body ``data``, or the :class:`RequestValidationError` FastAPI would raise for
    it (``json.loads``, then the model as FastAPI validates a body)."""
    try:
        return schema.TranslateRequest.model_validate(json.loads(data) if data else None, from_attributes=True)
    except json.JSONDecodeError as e:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": e.msg}}]) from None
    except ValidationError as e:
        raise RequestValidationError(e.errors(include_url=False) if data else
                                     [{"type": "missing", "loc": ("body",), "msg": "Field required",
                                       "input": None}]) from None
