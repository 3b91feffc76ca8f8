"""Strict HTTP/1.1 in front of the app: uvicorn's h11 protocol with framing, timeout and
connection checks that an ASGI middleware cannot make (it only sees parsed requests).

- **Framing** (RFC 9112 §6.3): a request with both ``Content-Length`` and
  ``Transfer-Encoding`` is answered 400 and the connection closed, so nothing after it is read
  as another request; so is one that h11 refuses (differing ``Content-Length`` values, a
  malformed length, a transfer coding other than ``chunked``).
- **Read timeouts**: a request's head must arrive within ``header_timeout_s`` of its first byte
  (or of the connection), its body within ``body_timeout_s`` of the head; else 408 and close.
- **Connections**: at most ``max_connections`` open, and ``max_client_connections`` per client
  address (a connection shows no credential before its headers; all of loopback is one
  address, an IPv6 one counts by its ``/64``); one more is answered 503 (or 429) and closed
  before anything is read.

uvicorn takes the protocol class through ``Config(http=...)`` (:func:`protocol_class`).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Optional

import h11
from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import ConfigError
from .clients import address_key


@dataclass(frozen=True)
class HttpLimits:
    """What one connection may take of the gateway before it is cut off."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 256
    max_client_connections: int = 32

    def check(self) -> None:
        for name, value in vars(self).items():
            if not value or value <= 0:
                raise ConfigError(f"{name} must be positive, got {value!r}")
        if self.max_client_connections > self.max_connections:
            raise ConfigError(f"max_client_connections ({self.max_client_connections}) is over max_connections "
                              f"({self.max_connections})")


def raw_error(status: int, reason: str, message: str, code: str) -> bytes:
    """A whole HTTP/1.1 error response that closes the connection (OpenAI's error shape)."""
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n" + ("retry-after: 1\r\n" if status in (429, 503) else "") + "\r\n")
    return head.encode() + body


class AmbiguousFramingError(h11.RemoteProtocolError):
    """A request whose body length could be read two ways."""


def framing_problem(headers) -> Optional[str]:
    """Why a request's headers frame its body ambiguously, or None."""
    names = {name.lower() for name, _ in headers}
    if b"content-length" in names and b"transfer-encoding" in names:
        return "a request with both Content-Length and Transfer-Encoding is refused (RFC 9112 6.3)"
    return None  # h11 refuses differing Content-Length values and any coding but chunked


class StrictConnection(h11.Connection):
    """h11's server connection that refuses ambiguous framing and reports each request's stages."""

    def __init__(self, *args, watcher=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.watcher = watcher
        self.refusal: Optional[str] = None  # why the last request was refused, for the 400

    def next_event(self):
        event = super().next_event()
        if isinstance(event, h11.Request):
            problem = framing_problem(event.headers)
            if problem:
                self.refusal = problem
                raise AmbiguousFramingError(problem, error_status_hint=400)
            if self.watcher is not None:
                self.watcher.head_read(expects_body=self.their_state is h11.SEND_BODY)
        elif isinstance(event, h11.EndOfMessage) and self.watcher is not None:
            self.watcher.body_read()
        return event


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the checks above. ``limits`` and the per-client counts are
    set on the subclass that :func:`protocol_class` makes for one server."""

    limits: HttpLimits = HttpLimits()
    open_by_client: dict[str, int] = {}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        size = self.config.h11_max_incomplete_event_size or DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
        self.conn = StrictConnection(h11.SERVER, size, watcher=self)
        self.read_timer: Optional[asyncio.TimerHandle] = None
        self.reading_request = False
        self.counted: Optional[str] = None

    # Connections
    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        client = address_key(self.client[0] if self.client else "")  # no credential yet: the address, folded
        refusal = None
        if len(self.connections) > self.limits.max_connections:
            refusal = raw_error(503, "Service Unavailable", f"over {self.limits.max_connections} connections are open",
                                "too_many_connections")
        elif self.open_by_client.get(client, 0) >= self.limits.max_client_connections:
            refusal = raw_error(429, "Too Many Requests", f"over {self.limits.max_client_connections} connections "
                                f"from this client ({client[len('addr:'):]}) are open", "too_many_connections")
        if refusal is not None:
            transport.write(refusal)
            transport.close()
            return
        self.counted = client
        self.open_by_client[client] = self.open_by_client.get(client, 0) + 1
        self._start_timer(self.limits.header_timeout_s, "its headers")
        self.reading_request = True

    def connection_lost(self, exc) -> None:
        self._stop_timer()
        if self.counted is not None:
            left = self.open_by_client.get(self.counted, 1) - 1
            if left > 0:
                self.open_by_client[self.counted] = left
            else:
                self.open_by_client.pop(self.counted, None)
            self.counted = None
        super().connection_lost(exc)

    # Read timeouts
    def data_received(self, data: bytes) -> None:
        if not self.reading_request and (self.cycle is None or self.cycle.response_complete):
            self.reading_request = True  # the first bytes of the next request on this connection
            self._start_timer(self.limits.header_timeout_s, "its headers")
        super().data_received(data)

    def head_read(self, expects_body: bool) -> None:
        self._stop_timer()
        if expects_body:
            self._start_timer(self.limits.body_timeout_s, "its body")
        else:
            self.reading_request = False

    def body_read(self) -> None:
        self._stop_timer()
        self.reading_request = False

    def _start_timer(self, seconds: float, what: str) -> None:
        self._stop_timer()
        self.read_timer = self.loop.call_later(seconds, self._timed_out, seconds, what)

    def _stop_timer(self) -> None:
        if self.read_timer is not None:
            self.read_timer.cancel()
            self.read_timer = None

    def _timed_out(self, seconds: float, what: str) -> None:
        self.read_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is None or not self.cycle.response_started:
            self.transport.write(raw_error(408, "Request Timeout", f"the request did not send {what} within {seconds:g} s",
                                           "request_timeout"))
        self.transport.close()

    # Framing
    def send_400_response(self, msg: str) -> None:
        """Refuse a request h11 (or :class:`StrictConnection`) could not frame, and close."""
        self._stop_timer()
        message = self.conn.refusal or "the request could not be parsed: malformed or ambiguous framing"
        self.transport.write(raw_error(400, "Bad Request", message, "bad_request"))
        self.transport.close()


def protocol_class(limits: HttpLimits) -> type:
    """A :class:`GuardedH11Protocol` for one server, with its own limits and counts."""
    limits.check()
    return type("GatewayH11Protocol", (GuardedH11Protocol,), {"limits": limits, "open_by_client": {}})
