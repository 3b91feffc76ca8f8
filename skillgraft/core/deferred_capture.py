"""Derived states kept when their cells are about to go, not while an answer waits.

A derived prefix state (:mod:`.prefix_reuse`) is asked for at the end of an answer, but the
context (a llama-server slot, an in-process context) still holds the prefix's cells after it:
saving them then would only delay the answer (saving, cutting, hashing and writing the state
of a 1.5k-token prefix take 0.15-0.25 s on two cores). So the capture is noted as pending
for that context and made only when it is due:

- before the context's cells are replaced or cut below the prefix (the next prompt that does
  not continue it, a restore, a capture, an erase): the prefix is saved first;
- when the context has been idle a while (the gateway's pool does this for its slots);
- when the memory or the gateway closes.

An agent that keeps sending the same prefix therefore never waits for its state: the slot
goes on holding it, and the state reaches the disk (and other slots, restarts and hosts) when
the slot turns to other work, idles or closes. A process killed outright loses the states
still pending (they are a cache: the next request prefills). Every pending state is checked
against what the context really holds when it is saved.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from .prefix_reuse import MIN_DERIVED_TOKENS
from .states import KVState, sha256_hex

logger = logging.getLogger("skillgraft.core")

# A context idle this long has its pending states saved by the gateway's pool.
IDLE_CAPTURE_S = 1.0


@dataclass(frozen=True)
class PendingCapture:
    """A derived state asked for: the ``prefix`` token ids (the first ``parent`` block's
    cells, if any, then the app's), to be kept in ``prefixes`` (a PrefixCache)."""

    prefix: tuple[int, ...]
    parent: str
    prefixes: object

    def keep(self, payload: bytes, fingerprint, seconds: float) -> None:
        """Keep the saved ``payload`` of the prefix's cells as its derived state."""
        state = KVState(self.prefix, payload, sha256_hex(payload), fingerprint, seconds)
        self.prefixes.keep(state, parent=self.parent or None)


class PendingCaptures:
    """The pending captures of one engine, per context (slot). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, list[PendingCapture]] = {}

    def add(self, slot: int, capture: PendingCapture) -> None:
        """Note ``capture`` for ``slot``, unless one pending serves it as well: the same
        prefix, a longer one (a state is cut to what a prompt shares with it), or one fewer
        than :data:`~.prefix_reuse.MIN_DERIVED_TOKENS` tokens shorter (two questions sharing
        a first word), as for the states already kept."""
        size = len(capture.prefix)
        with self._lock:
            pending = self._pending.setdefault(slot, [])
            for other in pending:
                shorter = min(size, len(other.prefix))
                if other.prefix[:shorter] == capture.prefix[:shorter] and size < len(other.prefix) + MIN_DERIVED_TOKENS:
                    return
            pending.append(capture)

    def due(self, slot: int, keeps: Optional[int] = None) -> list[PendingCapture]:
        """Take the captures of ``slot`` that would not survive its next use, which keeps
        only its first ``keeps`` cells (None: take them all)."""
        with self._lock:
            pending = self._pending.get(slot, [])
            due = [p for p in pending if keeps is None or len(p.prefix) > keeps]
            rest = [p for p in pending if p not in due]
            if rest:
                self._pending[slot] = rest
            else:
                self._pending.pop(slot, None)
            return due

    def slots(self) -> list[int]:
        """The slots with captures pending."""
        with self._lock:
            return sorted(self._pending)

    def clear(self, slot: Optional[int] = None) -> None:
        """Drop what is pending (for ``slot``, or every slot): its cells are gone."""
        with self._lock:
            if slot is None:
                self._pending.clear()
            else:
                self._pending.pop(slot, None)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(p) for p in self._pending.values())


def pending_of(engine) -> PendingCaptures:
    """The pending captures of an engine, per slot (an in-process engine's one context is slot 0)."""
    pending = engine.__dict__.get("_pending_captures")
    if pending is None:
        pending = engine.__dict__["_pending_captures"] = PendingCaptures()
    return pending


def keep_due(due: list[PendingCapture], save: Callable[[PendingCapture], Optional[bytes]], fingerprint) -> int:
    """Save each capture's cells (``save(capture)`` returns its payload; None when the context
    no longer holds its prefix, as after another use of it: dropped) and keep it; a failure
    only loses that state, with a log line. Returns how many were kept."""
    kept = 0
    for capture in due:
        started = time.perf_counter()
        try:
            payload = save(capture)
            if payload is None:
                logger.debug("a pending prefix state of %d tokens is no longer held: dropped", len(capture.prefix))
                continue
            capture.keep(payload, fingerprint, time.perf_counter() - started)
            kept += 1
        except Exception as exc:  # a derived state is only a shortcut: nothing else depends on it
            logger.warning("a derived prefix state of %d tokens was not kept: %s", len(capture.prefix), exc)
    return kept


def settle_context(engine, keeps: Optional[int] = None) -> int:
    """Keep the derived states pending on an in-process ``engine``'s context that its next
    use, which keeps only its first ``keeps`` cells, would lose (None: all); how many were kept.
    The engine calls it before it drops cells (``reset``, ``keep_cells``)."""
    due = pending_of(engine).due(0, keeps)

    def save(capture: PendingCapture) -> Optional[bytes]:
        held = getattr(engine, "held", None)
        if held is None or tuple(held[: len(capture.prefix)]) != capture.prefix:
            return None
        return engine.save_prefix(len(capture.prefix))

    return keep_due(due, save, engine.fingerprint) if due else 0
