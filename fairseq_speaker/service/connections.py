"""Slow and malformed clients: bounds on what one connection may hold before its request reaches the service.

uvicorn closes a connection that stays idle between requests (``timeout_keep_alive``), but not one that has begun
a request and sends its headers slowly, or never: a client that connects and sends one byte a minute holds a
connection (a socket, a file descriptor, a parser's buffers) for ever, and its headers may grow without a bound.
:func:`bounded_http_protocol` is uvicorn's HTTP protocol (httptools) with two more bounds:

- the request line and headers must arrive within ``header_timeout`` seconds of the connection or of the request's
  first byte: otherwise ``408`` and the connection is closed;
- they may take ``max_header_bytes`` at most: otherwise ``431`` and the connection is closed;
- bytes that are not HTTP/1.1 (two Content-Lengths, a TLS hello, a lower-case method) get the service's JSON error,
  ``400 malformed_request``, where uvicorn answered plain text.

The body has its own deadline, the request's (``--request-timeout``): the service's ASGI middleware reads it
(:class:`fairseq_speaker.service.middleware.Observed`). Where httptools is not installed uvicorn's h11 protocol is
used as it is (it bounds the size of headers, not their time).
"""

import json
from typing import Optional

#: the default bound on the request line and headers of one request
MAX_HEADER_BYTES = 65536
#: the message of a request that HTTP/1.1's parser refuses (before the service sees it)
MALFORMED = ("the request is not HTTP/1.1 that this service can read: an upper-case method, a path of ASCII (other "
             "bytes percent-encoded), one Content-Length or chunked Transfer-Encoding, not both; TLS and HTTP/2 are "
             "not served on this port")


def _error_response(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message}}).encode("utf-8")
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n\r\n").encode("ascii") + body


def bounded_http_protocol(header_timeout: float, max_header_bytes: int = MAX_HEADER_BYTES) -> Optional[type]:
    """uvicorn's httptools protocol with a deadline and a size bound on each request's headers (see the module), or
    None where httptools is not installed (uvicorn's default protocol is then used)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return None

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._header_timer = None
            self._header_bytes: Optional[int] = 0  # None: not within a request's headers
            self._arm()  # a client that connects and sends nothing is closed too

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _refuse(self, response: bytes, what: str) -> None:
            self._disarm()
            if self.transport.is_closing():
                return
            self.logger.info(f"{self.client[0] if self.client else 'a client'}: {what}: connection closed")
            self.transport.write(response)
            self.transport.close()

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self._header_bytes is not None:
                self._refuse(_error_response(408, "Request Timeout", "request_timeout",
                                             f"the request line and headers did not arrive within {header_timeout:g} "
                                             f"s (fairseq-speaker-serve --header-timeout)"),
                             f"headers not received within {header_timeout:g} s")

        def data_received(self, data: bytes) -> None:
            if self._header_bytes is not None:
                self._header_bytes += len(data)
            super().data_received(data)
            if self._header_bytes is not None and self._header_bytes > max_header_bytes:
                self._refuse(_error_response(431, "Request Header Fields Too Large", "headers_too_large",
                                             f"the request line and headers are over {max_header_bytes} bytes"),
                             f"headers over {max_header_bytes} bytes")

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._header_bytes is None:  # a later request on the connection: its headers get their own time
                self._header_bytes = 0
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            self._header_bytes = None
            super().on_headers_complete()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def send_400_response(self, msg: str) -> None:  # uvicorn's answer to bytes its parser refuses: plain text
            self._refuse(_error_response(400, "Bad Request", "malformed_request", MALFORMED), "not valid HTTP/1.1")

    return BoundedHttpToolsProtocol
