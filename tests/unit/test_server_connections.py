"""A request to llama-server whose kept-alive connection was dropped before any of its response
arrived is sent once more, on a new connection; once any of the response has arrived, never
(:mod:`skillgraft.server.connection`). Against a small HTTP server on loopback that answers,
drops or half-answers each request as told: no model, no llama-server."""

from __future__ import annotations

import json
import socket
import struct
import threading
from contextlib import contextmanager
from typing import Iterator, Optional

import httpx
import pytest

from skillgraft.errors import ServerError
from skillgraft.server.completions import ServerCompletions
from skillgraft.server.connection import response_to

CHUNKS = [{"content": "Hi", "tokens": [7], "stop": False}, {"content": "", "tokens": [], "stop": True, "stop_type": "eos"}]
STREAM = b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in CHUNKS)


class ScriptedServer:
    """HTTP/1.1 on 127.0.0.1 with kept-alive connections; the n-th request it reads (on any
    connection) gets ``script[n]``: ``answer`` (a whole SSE stream; the connection is kept),
    ``close`` (closed without a byte), ``reset`` (reset without a byte), ``partial`` (the status
    line, headers and the first event, then closed) or ``garbled`` (a line that is no status
    line, then closed). ``seen`` holds (connection number, request body) per request read."""

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)
        self.seen: list[tuple[int, bytes]] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        number = 0
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:  # closed: the test is over
                return
            thread = threading.Thread(target=self._serve, args=(connection, number), daemon=True)
            thread.start()
            self._threads.append(thread)
            number += 1

    @staticmethod
    def _read_request(connection: socket.socket, pending: bytes) -> tuple[Optional[bytes], bytes]:
        """(the body of the next request, what was read past it); (None, b"") once the client closed."""
        while b"\r\n\r\n" not in pending:
            data = connection.recv(65536)
            if not data:
                return None, b""
            pending += data
        head, rest = pending.split(b"\r\n\r\n", 1)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(rest) < length:
            data = connection.recv(65536)
            if not data:
                return None, b""
            rest += data
        return rest[:length], rest[length:]

    def _serve(self, connection: socket.socket, number: int) -> None:
        pending = b""
        with connection:
            while True:
                body, pending = self._read_request(connection, pending)
                if body is None:
                    return
                self.seen.append((number, body))
                action = self.script.pop(0) if self.script else "answer"
                if action == "answer":
                    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                       b"Content-Length: %d\r\n\r\n" % len(STREAM) + STREAM)
                    continue
                if action == "reset":  # SO_LINGER 0: the close sends a reset, not an end of stream
                    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                elif action == "partial":
                    first = STREAM.split(b"\n\n")[0] + b"\n\n"
                    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                       b"Content-Length: %d\r\n\r\n" % len(STREAM) + first)
                elif action == "garbled":
                    connection.sendall(b"NOT AN HTTP STATUS LINE\r\n\r\n")
                return  # closed

    def close(self) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone may not)
        self._listener.close()
        self._accepting.join(5)
        for thread in self._threads:
            thread.join(5)


class Attached(ServerCompletions):
    """The ``/completion`` calls of the engine over a plain client (what the slots hold is no
    matter here)."""

    def __init__(self, url: str) -> None:
        self.url, self.completions = url, 0
        self._client = httpx.Client(base_url=url, timeout=10, trust_env=False)

    def forget_held(self, slot=None) -> None:
        pass


@contextmanager
def scripted(script: list[str]) -> Iterator[tuple[ScriptedServer, Attached]]:
    server = ScriptedServer(script)
    engine = Attached(server.url)
    try:
        yield server, engine
    finally:
        engine._client.close()
        server.close()


def streamed(engine: Attached, prompt: int) -> list[tuple[str, tuple[int, ...], object]]:
    request = {"prompt": [prompt], "n_predict": 1, "stream": True}
    return [(chunk.text, tuple(step.token for step in chunk.steps), chunk.stopped_by)
            for chunk in engine.stream_request(request, None)]


WHOLE = [("Hi", (7,), None), ("", (), "eos")]


@pytest.mark.parametrize("drop", ["close", "reset"])
def test_a_stream_whose_kept_alive_connection_was_dropped_before_an_answer_is_sent_once_more_on_a_new_one(drop):
    with scripted(["answer", drop]) as (server, engine):
        assert streamed(engine, 1) == WHOLE  # its connection is kept alive ...
        assert streamed(engine, 2) == WHOLE  # ... and dropped under the next request: sent again, answered
        # the dropped request went out on the kept connection (0), once more on a new one (1)
        assert [(number, json.loads(body)["prompt"]) for number, body in server.seen] == [(0, [1]), (0, [2]), (1, [2])]
        assert engine.completions == 2


def test_a_request_dropped_twice_fails_after_one_retry():
    with scripted(["answer", "close", "close"]) as (server, engine):
        streamed(engine, 1)
        with pytest.raises(ServerError, match="Server disconnected"):
            streamed(engine, 2)
        assert len(server.seen) == 3  # the request, once more, and no third time


@pytest.mark.parametrize("answer", ["partial", "garbled"])
def test_a_stream_is_never_sent_again_once_any_of_its_response_arrived(answer):
    with scripted(["answer", answer]) as (server, engine):
        streamed(engine, 1)
        chunks = engine.stream_request({"prompt": [2], "stream": True}, None)
        if answer == "partial":  # the first event arrived and was handed on: the rest fails, not resent
            assert next(chunks).text == "Hi"
        with pytest.raises(ServerError, match="streaming from"):
            list(chunks)
        assert [json.loads(body)["prompt"] for _, body in server.seen] == [[1], [2]]


def test_a_plain_request_reads_its_body_once_and_never_resends_a_cut_body():
    """The plain path's rule is the same function: a body cut short after the headers fails."""
    with scripted(["answer", "close", "answer", "partial"]) as (server, _), \
            httpx.Client(base_url=server.url, trust_env=False) as client:
        for _ in range(2):  # the second is dropped on the kept connection and sent once more, on its own
            with response_to(client, "POST", "/completion", json={"prompt": [1]}) as response:
                assert response.read() == STREAM
        with pytest.raises(httpx.HTTPError):
            with response_to(client, "POST", "/completion", json={"prompt": [3]}) as response:
                response.read()
        assert [number for number, _ in server.seen] == [0, 0, 1, 2]
