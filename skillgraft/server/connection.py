"""One request to llama-server, and the one rule for sending it again.

llama-server closes a kept-alive connection when it has kept it long enough (its idle timeout,
its keep-alive limit); a request that goes out on it as it closes finds it dropped before any
of its response arrived. Nothing was answered, so :func:`response_to` sends such a request once
more, on a new connection. Once any of the response has arrived it never does: what the server
began to answer is the caller's to read, or to fail on. Every request of
:class:`~skillgraft.server.engine.LlamaServerEngine` goes through :func:`response_to`, plain
or streamed.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator, Optional

import httpcore
import httpx

logger = logging.getLogger("skillgraft.server")

__all__ = ["dropped_before_response", "response_to"]

# The socket errors of a connection the other end dropped (not one it refused: nothing listens then).
DROPPED = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


def dropped_before_response(exc: BaseException) -> bool:
    """Whether ``exc``, raised while a request was sent and its response's status line awaited,
    says the connection was dropped before any response arrived: the server closed it before a
    whole status line and headers (httpcore's own ``RemoteProtocolError``, "Server disconnected
    without sending a response", as http.client's ``RemoteDisconnected``) or reset it
    (``ConnectionResetError``, ``BrokenPipeError``). A response the server began and garbled (h11's protocol errors, as
    http.client's ``BadStatusLine`` for a line it did send), a refused connection or a timeout
    is not such a drop."""
    # httpx raises its error from httpcore's, whose argument is the error it wraps (a socket's,
    # h11's) or its own message.
    inner = exc.__cause__
    origin = inner.args[0] if isinstance(inner, (httpcore.NetworkError, httpcore.ProtocolError)) and inner.args else None
    if isinstance(exc, (httpx.ReadError, httpx.WriteError)):
        return isinstance(origin, DROPPED)
    if isinstance(exc, httpx.RemoteProtocolError):
        return isinstance(inner, httpcore.RemoteProtocolError) and isinstance(origin, str)
    return False


@contextmanager
def response_to(client: httpx.Client, method: str, path: str, **kwargs) -> Iterator[httpx.Response]:
    """The response of ``client`` to one request (``kwargs`` as
    :meth:`httpx.Client.build_request` takes them), its status line and headers read and its
    body left to the caller; closed on exit. A request whose connection was dropped before any
    of its response arrived (:func:`dropped_before_response`) is sent once more, on a new
    connection; an error once the response has begun (reading its body) is never retried.
    Raises :class:`httpx.HTTPError`, or ``RuntimeError`` for a closed client."""
    request = client.build_request(method, path, **kwargs)
    fresh: Optional[httpx.Client] = None
    try:
        response = client.send(request, stream=True)
    except httpx.HTTPError as exc:
        if not dropped_before_response(exc):
            raise
        logger.debug("%s %s: the server dropped the connection before answering (%r); sent once more on a new "
                     "connection", method, path, exc)
        # A client that keeps no connection: the request cannot meet another one the server dropped.
        fresh = httpx.Client(trust_env=False, limits=httpx.Limits(max_keepalive_connections=0))
        try:
            response = fresh.send(request, stream=True)
        except BaseException:
            fresh.close()
            raise
    try:
        yield response
    finally:
        response.close()
        if fresh is not None:
            fresh.close()
