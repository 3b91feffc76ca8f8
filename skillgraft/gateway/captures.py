"""Captures a client asked for, made in the background: a manual deposited with
``"capture": true`` is stored as text first (the request returns then), and its KV state is
made by a warm (:class:`~skillgraft.skills.warm.WarmJob`) that takes a slot of the
gateway's gate, then its memory lock, one part at a time (:class:`SlotThenLock`: the order a chat
takes them in, which records its answer under that lock while it holds its slot), so chats go in
between; the warms of ``/v1/skillgraft/warms`` take their turns the same way. A capture
stops at its deadline, when asked, or when the gateway closes; :meth:`BackgroundCaptures.status`
tells how far it got.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from contextlib import suppress
from dataclasses import asdict, dataclass
from typing import Optional

from ..core.blocks import Block
from ..errors import SkillgraftError

__all__ = ["CAPTURE_DEADLINE_S", "BackgroundCaptures", "CaptureStatus", "SlotThenLock"]

CAPTURE_DEADLINE_S = 600.0
KEPT_STATUSES = 256  # the captures told about after they end, the oldest forgotten first
GATE_MARGIN_S = 5.0  # beyond the gate's own timeout, for an event loop that stopped


@dataclass(frozen=True)
class CaptureStatus:
    """Where the background capture of block ``block_id`` (skill ``name``) stands: ``state``
    ``running``, ``done`` (its state is kept, or was kept already), ``left_out`` (it does not fit
    beside a reply, or its state could not be kept: ``reason``), ``stopped`` (at its deadline or
    when the gateway closed) or ``failed`` (``reason``); ``parts_done`` of ``parts``."""

    block_id: str
    name: str
    state: str
    parts_done: int
    parts: int
    deadline_s: float
    reason: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


class SlotThenLock:
    """The hold of one part of a warm (a thread's): a slot of the gateway's gate, taken on its
    event loop, then the memory's lock; both let go after the part."""

    def __init__(self, slots, loop: asyncio.AbstractEventLoop, lock) -> None:
        self.slots, self.loop, self.lock = slots, loop, lock

    def __enter__(self) -> "SlotThenLock":
        taken = asyncio.run_coroutine_threadsafe(self.slots.acquire(), self.loop)
        try:
            taken.result(self.slots.timeout_s + GATE_MARGIN_S)
        except BaseException:
            taken.cancel()
            raise
        self.lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()
        self.loop.call_soon_threadsafe(self.slots.release)


class _Capture:
    def __init__(self, block: Block, job, deadline_s: float) -> None:
        self.block, self.job, self.deadline_s = block, job, deadline_s
        self.timer = threading.Timer(deadline_s, job.stop)
        self.timer.daemon = True
        self.timer.start()


class BackgroundCaptures:
    """The background captures of one gateway's memory (``memory``, used under ``lock``)."""

    def __init__(self, memory, lock, deadline_s: float = CAPTURE_DEADLINE_S) -> None:
        self.memory, self.lock, self.deadline_s = memory, lock, deadline_s
        self._captures: "OrderedDict[str, _Capture]" = OrderedDict()
        self._guard = threading.Lock()
        self._closed = False

    def start(self, block: Block, turn) -> CaptureStatus:
        """Make ``block``'s state (a manual stored as text) in the background, at the start of
        the chat as its first use there makes it, each part inside ``turn`` (a context manager:
        the gateway's :class:`SlotThenLock`); a capture of it still running is kept."""
        with self._guard:
            if self._closed:
                return CaptureStatus(block.id, block.name, "stopped", 0, 0, self.deadline_s, "the gateway is closing")
            running = self._captures.get(block.id)
            if running is None or not running.job.running:
                try:
                    with self.lock:  # the names are checked in the caller's call
                        job = self.memory.skills.warm_in_background([block.name], lock=turn)
                except SkillgraftError as exc:  # derived states off: the text is stored, nothing to make
                    return CaptureStatus(block.id, block.name, "failed", 0, 0, self.deadline_s, str(exc))
                self._captures[block.id] = _Capture(block, job, self.deadline_s)
                self._captures.move_to_end(block.id)
                self._forget_ended()
        return self.status(block.id)

    def status(self, block_id: str) -> Optional[CaptureStatus]:
        """Where the capture of ``block_id`` stands (None: none was asked for, or it was forgotten)."""
        capture = self._captures.get(block_id)
        return None if capture is None else _status(capture)

    def close(self) -> None:
        """Stop every capture after the part at hand and wait for them."""
        with self._guard:
            self._closed = True
            captures = list(self._captures.values())
        for capture in captures:
            capture.timer.cancel()
            capture.job.stop()
        for capture in captures:
            with suppress(Exception):  # a warm's own failure is told in its status
                capture.job.wait()

    def _forget_ended(self) -> None:
        while len(self._captures) > KEPT_STATUSES:
            oldest = next((key for key, c in self._captures.items() if not c.job.running), None)
            if oldest is None:
                return
            self._captures.pop(oldest).timer.cancel()


def _status(capture: _Capture) -> CaptureStatus:
    job, block = capture.job, capture.block
    done, total = job.progress
    state = job.state  # once: the job may end meanwhile
    fields = dict(block_id=block.id, name=block.name, parts_done=done, parts=total, deadline_s=capture.deadline_s)
    if state == "running":
        return CaptureStatus(state=state, **fields)
    if state == "failed":
        return CaptureStatus(state=state, reason=str(job.error), **fields)
    capture.timer.cancel()
    report = job.report
    if state == "stopped":
        return CaptureStatus(state=state, reason=f"stopped before {report.left} of {total} parts", **fields)
    if report.left_out:
        return CaptureStatus(state="left_out", reason=report.left_out[0].get("reason", ""), **fields)
    return CaptureStatus(state=state, **fields)
