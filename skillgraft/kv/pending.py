"""Derived states kept when their cells are about to go, not while an answer waits.

A derived prefix state (:mod:`.prefix_cache`) is asked for at the end of an answer, but the
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

from ..core.states import KVState, sha256_hex
from .reuse import MIN_DERIVED_TOKENS

logger = logging.getLogger("skillgraft.kv")

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
    """The captures pending on one context's cells (a field of its
    :class:`~skillgraft.kv.context.AnswerContext`). Thread-safe: a gateway's supervisor settles
    them while the context is idle."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[PendingCapture] = []

    def add(self, capture: PendingCapture) -> None:
        """Note ``capture``, unless one pending serves it as well: the same prefix, a longer one
        (a state is cut to what a prompt shares with it), or one fewer than
        :data:`~.reuse.MIN_DERIVED_TOKENS` tokens shorter (two questions sharing a first word),
        as for the states already kept."""
        size = len(capture.prefix)
        with self._lock:
            for other in self._pending:
                shorter = min(size, len(other.prefix))
                if other.prefix[:shorter] == capture.prefix[:shorter] and size < len(other.prefix) + MIN_DERIVED_TOKENS:
                    return
            self._pending.append(capture)

    def due(self, keeps: Optional[int] = None) -> list[PendingCapture]:
        """Take the captures that would not survive the context's next use, which keeps only its
        first ``keeps`` cells (None: take them all)."""
        with self._lock:
            due = [p for p in self._pending if keeps is None or len(p.prefix) > keeps]
            self._pending = [p for p in self._pending if p not in due]
            return due

    def clear(self) -> None:
        """Drop what is pending: its cells are gone."""
        with self._lock:
            self._pending.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)


def keep_due(due: list[PendingCapture], save: Callable[[list[tuple[int, ...]]], list[Optional[bytes]]],
             fingerprint) -> int:
    """Save the cells of every capture ``due`` at once (``save(prefixes)`` gives each prefix's
    payload; None when the context no longer holds it, as after another use of it: dropped) and
    keep them; a failure only loses those states, with a log line. Returns how many were kept."""
    if not due:
        return 0
    started = time.perf_counter()
    try:
        payloads = save([capture.prefix for capture in due])
    except Exception as exc:  # a derived state is only a shortcut: nothing else depends on it
        logger.warning("%d derived prefix states were not kept: %s", len(due), exc)
        return 0
    seconds = (time.perf_counter() - started) / len(due)
    kept = 0
    for capture, payload in zip(due, payloads):
        if payload is None:
            logger.debug("a pending prefix state of %d tokens is no longer held: dropped", len(capture.prefix))
            continue
        try:
            capture.keep(payload, fingerprint, seconds)
            kept += 1
        except Exception as exc:
            logger.warning("a derived prefix state of %d tokens was not kept: %s", len(capture.prefix), exc)
    return kept
