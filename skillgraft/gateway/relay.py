"""How a chat's events leave the gateway: streamed as server-sent events, or gathered for one
JSON answer; either way a client that goes away gives its slot back at once.

The gateway's events come from a generator that holds a slot lease while it runs.
:class:`EventPump` pulls it one event at a time in worker threads (a gathered answer all in one)
and closes it (which
returns the lease and closes the stream to llama-server, so the server stops) the moment the
answer is done, fails, or its client disconnects: when an event is being pulled then, closing
waits for that one event (a token), never for the rest of the answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import AsyncIterator, Callable, Iterator, Optional

import anyio
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from ..core.answer import AnswerEnd, AnswerNote

logger = logging.getLogger("skillgraft.gateway")

END = object()


class ClientGone(Exception):
    """The client disconnected before its answer was whole."""


class EventPump:
    """``events`` pulled in worker threads; :meth:`close` closes them, then calls ``release``
    (the slot gate), once."""

    def __init__(self, events: Iterator[object], release: Callable[[], None] = lambda: None) -> None:
        self.events, self.release = events, release
        self._lock = threading.Lock()  # one pull or the close at a time: a generator runs in one thread
        self._closed = False
        self._released = False

    def _pull(self) -> object:
        with self._lock:
            return END if self._closed else next(self.events, END)

    def _close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self.events.close()

    async def next(self) -> object:
        """The next event, or :data:`END`."""
        return await run_in_threadpool(self._pull)

    async def close(self) -> None:
        if self._released:
            return
        self._released = True
        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(self._close)
            finally:
                self.release()

    def _pull_all(self) -> list[object]:
        events: list[object] = []
        while (event := self._pull()) is not END:
            events.append(event)
        return events

    async def gather(self, departure: "Departure") -> list[object]:
        """Every event, pulled in one worker thread (one hop an answer, not one a token), unless
        the client disconnects first (``departure`` watches for it): then :class:`ClientGone`,
        and closing the pump stops the pull at its next event."""
        return await departure.race(run_in_threadpool(self._pull_all))


class Departure:
    """Watches for a request's client to disconnect (``receive`` is the request's: once its
    body is read, it waits for the disconnect) while the request waits: for a slot, for an
    event. :meth:`stop` it before a response that listens itself (a stream)."""

    def __init__(self, receive) -> None:
        self.task = asyncio.ensure_future(_disconnect(receive))

    async def race(self, awaitable):
        """What ``awaitable`` gives, or :class:`ClientGone` (it is then cancelled) if the
        client leaves first."""
        work = asyncio.ensure_future(awaitable)
        try:
            await asyncio.wait({work, self.task}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            work.cancel()
            raise
        if work.done():
            return work.result()
        work.cancel()
        work.add_done_callback(_ignore)
        raise ClientGone()

    def stop(self) -> None:
        self.task.cancel()


async def _disconnect(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _ignore(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict:
    """OpenAI's ``usage`` of an answer: ``cached_tokens`` are the prompt's cells reused, not evaluated."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens, "prompt_tokens_details": {"cached_tokens": cached_tokens}}


class SseWriter:
    """Server-sent events in OpenAI's ``chat.completion.chunk`` shape, for ``n`` choices sent
    one after the other (each begins with its note)."""

    def __init__(self, completion_id: str, model_id: str, include_usage: bool, n: int = 1) -> None:
        self.completion_id, self.model_id, self.include_usage, self.n = completion_id, model_id, include_usage, n
        self.created = int(time.time())
        self.note: Optional[AnswerNote] = None
        self.index = -1
        self.prompt_tokens = self.completion_tokens = self.cached_tokens = 0

    def _chunk(self, choices: list, **extra) -> str:
        body = {
            "id": self.completion_id, "object": "chat.completion.chunk", "created": self.created, "model": self.model_id,
            "choices": choices, "skillgraft": self.note.as_dict() if self.note else None, **extra,
        }
        return f"data: {json.dumps(body)}\n\n"

    def _choice(self, delta: dict, finish_reason: Optional[str] = None) -> list:
        return [{"index": self.index, "delta": delta, "finish_reason": finish_reason}]

    def event(self, event: object) -> str:
        if isinstance(event, AnswerNote):
            self.note = event
            self.index += 1
            if self.index == 0:  # the prompt is counted once, as its first choice made it
                self.cached_tokens = event.cache_n
            return self._chunk(self._choice({"role": "assistant", "content": ""}))
        if isinstance(event, AnswerEnd):
            text = ""
            if event.tool_calls:
                calls = [{"index": i, **call.as_openai()} for i, call in enumerate(event.tool_calls)]
                text += self._chunk(self._choice({"tool_calls": calls}))
            text += self._chunk(self._choice({}, event.finish_reason))
            self.prompt_tokens = event.prompt_tokens
            self.completion_tokens += event.completion_tokens
            if self.index + 1 < self.n:
                return text
            if self.include_usage:
                text += self._chunk([], usage=usage(self.prompt_tokens, self.completion_tokens, self.cached_tokens))
            return text + "data: [DONE]\n\n"
        return self._chunk(self._choice({"content": event}))


class ClosingStream(StreamingResponse):
    """A streaming response that closes its pump even when its body was never iterated."""

    def __init__(self, content, pump: EventPump, **options) -> None:
        super().__init__(content, **options)
        self._pump = pump

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._pump.close()


async def relay(pump: EventPump, first: object, sse: SseWriter, failed: Callable[[BaseException], dict]) -> AsyncIterator[str]:
    """Relay the pump's events as SSE. However the stream ends — done, failed, or the client
    gone (the response cancels this) — the pump is closed. An error after the first event is
    sent as an ``error`` event (``failed`` makes its body; the ``openai`` client raises it)."""
    try:
        yield sse.event(first)
        while True:
            event = await pump.next()
            if event is END:
                return
            yield sse.event(event)
    except Exception as exc:
        yield f"data: {json.dumps(failed(exc))}\n\n"
    finally:
        await pump.close()
