"""The gateway's HTTP protocol (skillgraft.web.http_guard) in a real uvicorn server on
loopback, in front of a small echo app behind the gateway's header checks: framing, read
timeouts and connection limits over raw sockets, without a model. The same attacks against the
whole gateway are in tests/test_gateway_hardening.py."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from tests.required import need

uvicorn = need("uvicorn", "skillgraft[serve]")

from skillgraft.deposit_policy import DepositPolicy  # noqa: E402
from skillgraft.gateway.access import guard  # noqa: E402
from skillgraft.web.http_guard import HttpLimits, protocol_class  # noqa: E402


async def _echo(scope, receive, send):
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps({"path": scope["path"], "length": len(body)}).encode()})


@pytest.fixture(scope="module")
def port():
    app = guard(_echo, api_key="k", allowed_hosts=None, deposits=DepositPolicy(allowed=True, key="d"))
    limits = HttpLimits(header_timeout_s=1.0, body_timeout_s=1.5, max_connections=6, max_client_connections=4)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", http=protocol_class(limits)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield server.servers[0].sockets[0].getsockname()[1]
    server.should_exit = True
    thread.join(10)


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    return sock


def _exchange(port: int, data: bytes) -> tuple[bytes, float]:
    """What the server sends until it closes, and how long that took."""
    with _connect(port) as sock:
        sock.sendall(data)
        started, received = time.monotonic(), b""
        while chunk := sock.recv(65536):
            received += chunk
        return received, time.monotonic() - started


SMUGGLED = b"DELETE /v1/skills/vault HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer d\r\nContent-Length: 0\r\n\r\n"


@pytest.mark.parametrize("framing", [b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
                                     b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
                                     b"Content-Length: 4\r\nContent-Length: 5\r\n",
                                     b"Transfer-Encoding: gzip, chunked\r\n"])
def test_ambiguous_framing_is_a_400_that_closes_the_connection(port, framing):
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n" + framing + b"\r\n"
    body = b"2\r\n{}\r\n0\r\n\r\n" if b"chunked" in framing else b"{}{}"
    received, _ = _exchange(port, request + body + SMUGGLED)
    assert received.startswith(b"HTTP/1.1 400 ") and received.count(b"HTTP/1.1") == 1, received
    assert b'"code": "bad_request"' in received
    assert (b"Content-Length and Transfer-Encoding" in received) == (b"Content-Length: 4" in framing and b"chunked" in framing)


@pytest.mark.parametrize("data, limit", [
    (b"", 1.0),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n", 1.0),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Length: 100\r\n\r\n{", 1.5),
])
def test_slow_headers_and_bodies_get_408(port, data, limit):
    received, seconds = _exchange(port, data)
    assert received.startswith(b"HTTP/1.1 408 ") and b"request_timeout" in received, received
    assert limit - 0.2 < seconds < limit + 2


def test_a_keyless_request_is_refused_before_its_body(port):
    received, seconds = _exchange(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4000000\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 401 ") and b"connection: close" in received.lower() and seconds < 0.9


def test_keep_alive_and_pipelining_still_work(port):
    with _connect(port) as sock:
        sock.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n"
                     b"GET /b HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nConnection: close\r\n\r\n")
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    assert received.count(b"HTTP/1.1 200 OK") == 2 and b'"/a"' in received and b'"/b"' in received


def test_connections_are_limited_per_client_and_in_all(port, monkeypatch):
    held = [_connect(port) for _ in range(4)]
    try:
        received, _ = _exchange(port, b"")
        assert received.startswith(b"HTTP/1.1 429 ") and b"too_many_connections" in received, received
        with _connect(port, "127.0.0.2") as fresh:  # another loopback address is the same host: no fresh budget
            received = fresh.recv(65536)
        assert received.startswith(b"HTTP/1.1 429 ") and b"too_many_connections" in received, received
        from skillgraft.web import http_guard

        monkeypatch.setattr(http_guard, "address_key", lambda address: address)  # as if they were other hosts
        held += [_connect(port, "127.0.0.2"), _connect(port, "127.0.0.2")]
        with _connect(port, "127.0.0.3") as seventh:
            received = seventh.recv(65536)
        assert received.startswith(b"HTTP/1.1 503 ") and b"too_many_connections" in received, received
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    received, _ = _exchange(port, b"GET /ok HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nConnection: close\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 200 ")
