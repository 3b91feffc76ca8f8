"""AnswerContext: one context's cells answering one request at a time.

Restoring only records the block's state; ``prefill`` then makes the prompt — the block's
kept cells and the tokens after them, or the tokens alone — and reuses the longest beginning
of it already at hand (:func:`~skillgraft.kv.prefixes.choose_reuse`): what the cells hold from
their last answer, a prefix state found by key (a derived one, or a captured block the prompt
opens with), or the restored block. Only the rest is evaluated. With a
:class:`~skillgraft.kv.prefixes.PrefixCache`, a prefix two prompts shared is kept as a
derived state, never evaluated again: once the answer is made it is noted as pending
(:class:`PendingCaptures`, a field of the context) and saved when the backend is about to
drop its cells (:meth:`AnswerContext.before_drop`), when the context idles (a gateway's pool) or
when its owner closes (:meth:`AnswerContext.settle`) — not while an answer waits.

This is the one place reuse and capture are decided; the cells are a
:class:`~skillgraft.kv.backend.KVBackend`: an in-process context or a llama-server slot.

**Pending captures.** A derived prefix state (:class:`~.prefixes.PrefixCache`) is asked for at the end of an answer, but the
context (a llama-server slot, an in-process context) still holds the prefix's cells after it:
saving them then would only delay the answer (saving, cutting, hashing and writing the state
of a 1.5k-token prefix take 0.15-0.25 s on two cores). So the capture is noted as pending
for that context and made only when it is due:

- before the context's cells are replaced or cut below the prefix (the next prompt that does
  not continue it, a restore, a capture, an erase): the cells are saved first, and the state
  is cut, hashed and written by :data:`KEEPER`, a thread of the lowest priority, while that
  prompt is evaluated (a later prompt that could use it waits for it);
- when the context has been idle a while (the gateway's pool does this for its slots);
- when the memory or the gateway closes.

An agent that keeps sending the same prefix therefore never waits for its state: the slot
goes on holding it, and the state reaches the disk (and other slots, restarts and hosts) when
the slot turns to other work, idles or closes. A process killed outright loses the states
still pending (a cache). Every pending state is checked against what the context holds.

The in-process engine and the fake mix in :class:`LocalContext` (their one context over a
:class:`LocalBackend`); a llama-server slot's backend is :class:`~skillgraft.server.slot.SlotBackend`.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from contextlib import nullcontext
from functools import partial
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

from ..core.deadline import Deadline
from ..core.sampling import SamplingOptions
from ..core.states import KVState, TokenStep, require_fits, sha256_hex
from ..errors import BlockIntegrityError, InputError
from .backend import EngineCells, KVBackend, Payload
from .prefix_keys import common_prefix
from .prefixes import MIN_DERIVED_TOKENS, PrefixCache, Reuse, choose_reuse

__all__ = ["IDLE_CAPTURE_S", "KEEPER", "AnswerContext", "LocalBackend", "LocalContext", "PendingCapture",
           "PendingCaptures", "StateKeeper"]

logger = logging.getLogger("skillgraft.kv")

# A context idle this long has its pending states saved by the gateway's pool.
IDLE_CAPTURE_S = 1.0
# The nice value of the thread keeping states (the lowest priority).
KEEPER_NICE = 19


@dataclass(frozen=True)
class PendingCapture:
    """A derived state asked for: the ``prefix`` token ids (the first ``parent`` block's
    cells, if any, then the app's), to be kept in ``prefixes`` (a PrefixCache). ``on_switch``:
    a prompt the cells answered, kept only if another app's prompt takes them (the next use
    keeps fewer than :data:`~.prefixes.MIN_DERIVED_TOKENS` of them), as llama-server's host
    cache keeps the prompt a slot leaves; dropped once its own app's next prompt parts from it."""

    prefix: tuple[int, ...]
    parent: str
    prefixes: object
    on_switch: bool = False

    def keep(self, payload: bytes, fingerprint, seconds: float) -> KVState:
        """Keep the saved ``payload`` of the prefix's cells as its derived state (returned)."""
        state = KVState(self.prefix, payload, sha256_hex(payload), fingerprint, seconds)
        self.prefixes.keep(state, parent=self.parent or None)
        return state


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
        :data:`~.prefixes.MIN_DERIVED_TOKENS` tokens shorter (two questions sharing a first word),
        as for the states already kept."""
        size = len(capture.prefix)
        with self._lock:
            if capture.on_switch:  # the prompt a conversation left before: this one extends it
                self._pending = [p for p in self._pending if not (p.on_switch and capture.prefix[:len(p.prefix)] == p.prefix)]
            for other in self._pending:
                if other.on_switch != capture.on_switch:  # one kept on a switch only serves no other
                    continue
                shorter = min(size, len(other.prefix))
                if other.prefix[:shorter] == capture.prefix[:shorter] and size < len(other.prefix) + MIN_DERIVED_TOKENS:
                    return
            self._pending.append(capture)

    def due(self, keeps: Optional[int] = None) -> list[PendingCapture]:
        """Take the captures that would not survive the context's next use, which keeps only its
        first ``keeps`` cells (None: take them all but those kept on a switch only, which stay);
        one kept on a switch only is due when another app's prompt takes the cells, and
        dropped when a prompt of its own app parts from it."""
        def gone(p: PendingCapture) -> bool:
            return keeps is not None and len(p.prefix) > keeps

        with self._lock:
            due = [p for p in self._pending
                   if ((gone(p) and keeps < MIN_DERIVED_TOKENS) if p.on_switch else (keeps is None or gone(p)))]
            self._pending = [p for p in self._pending if p not in due and not (p.on_switch and gone(p))]
            return due

    def clear(self) -> None:
        """Drop what is pending: its cells are gone."""
        with self._lock:
            self._pending.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)


class StateKeeper:
    """Keeps saved prefix states off the answer's path: one worker thread of the lowest
    priority cuts, hashes and writes them. At most ``max_waiting`` wait (each holds a save in
    memory); past that the caller keeps its state itself. A prompt waits only for the prefixes
    that could serve it better than the cells at hand (:meth:`may_give`)."""

    def __init__(self, max_waiting: int = 2) -> None:
        self._jobs: queue.Queue = queue.Queue(maxsize=max_waiting)
        self._lock = threading.Lock()
        self._worker: Optional[threading.Thread] = None
        self._waiting: list[tuple[int, ...]] = []

    def submit(self, job: Callable[[], bool], prefix: tuple[int, ...] = ()) -> bool:
        """Run ``job`` (keeping the state of ``prefix``) on the worker; False when too many wait
        (run it yourself)."""
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="skillgraft-state-keeper", daemon=True)
                self._worker.start()
            try:
                self._jobs.put_nowait((job, prefix))
            except queue.Full:
                return False
            self._waiting.append(prefix)
            return True

    def may_give(self, prompt: Sequence[int], beyond: int) -> bool:
        """Whether a state still being kept shares more than ``beyond`` tokens with ``prompt``."""
        with self._lock:
            waiting = list(self._waiting)
        return any(common_prefix(prefix, prompt) > beyond for prefix in waiting)

    def drain(self) -> None:
        """Return once every state handed over is kept (or failed, with a log line)."""
        self._jobs.join()

    def _work(self) -> None:
        _lower_priority()
        while True:
            job, prefix = self._jobs.get()
            try:
                job()
            finally:
                with self._lock:
                    self._waiting.remove(prefix)
                self._jobs.task_done()


def _lower_priority() -> None:
    """The calling thread at the lowest CPU priority (Linux: its own nice): it yields to prefills."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), KEEPER_NICE)
    except (AttributeError, OSError) as exc:  # another system, or not allowed: only slower prefills
        logger.debug("the state keeper's priority was not lowered: %s", exc)


KEEPER = StateKeeper()  # a process killed outright loses what still waits: a cache, as pending states


def _keep_one(capture: PendingCapture, payload: Payload, fingerprint, seconds: float,
              on_kept: Optional[Callable[[KVState], None]]) -> bool:
    try:
        state = capture.keep(payload() if callable(payload) else payload, fingerprint, seconds)
        if on_kept is not None:
            on_kept(state)
        return True
    except Exception as exc:  # a derived state is only a shortcut: nothing else depends on it
        logger.warning("a derived prefix state of %d tokens was not kept: %s", len(capture.prefix), exc)
        return False


def keep_due(due: list[PendingCapture], save: Callable[[list[tuple[int, ...]]], list[Optional[Payload]]],
             fingerprint, *, later: bool = False, on_kept: Optional[Callable[[KVState], None]] = None) -> int:
    """Save the cells of every capture ``due`` at once (``save(prefixes)`` gives each prefix's
    payload, or the call that makes it, run by whoever keeps it; None when the context no longer
    holds it, as after another use of it: dropped) and
    keep them — ``later``: by :data:`KEEPER`, so the caller only waits for the cells to be
    saved; each state kept goes to ``on_kept`` (the backend's stage); a failure only loses those
    states, with a log line. Returns how many were kept (or handed over)."""
    if not due:
        return 0
    started = time.perf_counter()
    try:
        payloads = save([capture.prefix for capture in due])
    except Exception as exc:
        logger.warning("%d derived prefix states were not kept: %s", len(due), exc)
        return 0
    seconds = (time.perf_counter() - started) / len(due)
    kept = 0
    for capture, payload in zip(due, payloads):
        if payload is None:
            logger.debug("a pending prefix state of %d tokens is no longer held: dropped", len(capture.prefix))
            continue
        job = partial(_keep_one, capture, payload, fingerprint, seconds, on_kept)
        kept += 1 if later and KEEPER.submit(job, capture.prefix) else job()
    return kept


class AnswerContext:
    """An :class:`~skillgraft.protocols.AnswerSlot` over one backend's cells (one answer at a
    time: its owner serialises them). ``reused_cells`` and ``reused_from`` (``slot``,
    ``derived``, ``block`` or ``""``) say what the last prompt kept; ``pending`` holds the
    derived states asked for and not yet saved."""

    def __init__(self, backend: KVBackend) -> None:
        self.backend = backend
        self.pending = PendingCaptures()
        self.prefixes: Optional[PrefixCache] = None
        self.deadline: Optional[Deadline] = None
        self.reused_cells = 0
        self.reused_from = ""
        self._restored: Optional[tuple[KVState, str, int]] = None
        self._planned: Optional[tuple[list[int], Reuse, str]] = None

    def answering(self, prefixes: Optional[PrefixCache] = None, deadline: Optional[Deadline] = None) -> "AnswerContext":
        """This context, ready for one answer with the derived states of ``prefixes`` (its
        backend's stream read no later than ``deadline``)."""
        self.prefixes, self.deadline = prefixes, deadline
        self._restored = self._planned = None
        self.reused_cells, self.reused_from = 0, ""
        return self

    # -- the answer ------------------------------------------------------------------------

    def restore(self, state: KVState, block_id: str, *, keep: int) -> None:
        if not 0 < keep <= state.n_tokens:
            raise InputError(f"keep must be within 1..{state.n_tokens}, got {keep}")
        self.backend.check(state, block_id)
        self._restored = (state, block_id, keep)

    def prefill(self, tokens: Sequence[int], *, mark: int = 0, block_id: str = "") -> None:
        """Make the prompt (after a restored block's kept cells, if any). ``mark``: its first
        ``mark`` tokens are a text block's (``block_id``) prefix state, kept for its next use
        when no state that long is at hand."""
        if not tokens:
            raise InputError("nothing to prefill")
        restored, self._restored = self._restored, None
        block_id = restored[1] if restored else block_id
        prompt = [*restored[0].tokens[: restored[2]], *tokens] if restored else [int(t) for t in tokens]
        after = restored[2] if restored else 0  # the block's cells in front of the app's prompt
        require_fits(self.backend, len(prompt) + 1, "the prompt plus one answer token")
        prefixes = self.prefixes
        held = self._held_for(prompt)  # a state giving no more than the cells at hand is neither awaited nor read
        if prefixes is not None and KEEPER.may_give(prompt, held):
            KEEPER.drain()  # the states handed over while the last prompt was evaluated are found
        block = (restored[0], restored[2]) if restored else None
        # a restored block gives its own cells: another block's are never longer
        derived = prefixes.lookup(prompt, beyond=held, blocks=block is None) if prefixes else None
        reuse = self._choose(prompt, block, derived, mark, after)
        try:
            self.backend.evaluate(prompt, reuse, block_id)
        except BlockIntegrityError as exc:  # a derived state's file, read only now, is not what was kept
            if reuse.source != "derived" or prefixes is None:
                raise
            prefixes.refuse(reuse.state, exc)
            reuse = self._choose(prompt, block, None, mark, after)
            self.backend.evaluate(prompt, reuse, block_id)
        if prefixes is not None:
            prefixes.remember(prompt, after)
        self._planned = (prompt, reuse, block_id)
        self.reused_cells, self.reused_from = reuse.cells, reuse.source

    def _held_for(self, prompt: list[int]) -> int:
        """How many leading tokens of ``prompt`` the backend's cells surely hold."""
        surely, _ = self.backend.held_cells(prompt)
        return common_prefix(surely, prompt) if surely else 0

    def _choose(self, prompt: list[int], block: Optional[tuple[KVState, int]], derived: Optional[KVState],
                mark: int, after: int) -> Reuse:
        """What ``prompt`` reuses of what the cells hold now, ``derived`` and ``block``, and where
        a derived state of it is asked for."""
        prefixes, capture_at = self.prefixes, 0
        if prefixes is not None:
            at_hand = derived.n_tokens if derived is not None else 0
            capture_at = mark if mark >= at_hand + MIN_DERIVED_TOKENS else prefixes.capture_point(prompt, after)
        surely, at_most = self.backend.held_cells(prompt)
        return choose_reuse(prompt, held=surely, held_at_most=at_most, block=block, derived=derived,
                            capture_at=capture_at)

    def generate(self, options: SamplingOptions) -> Iterator[TokenStep]:
        planned, self._planned = self._planned, None
        if planned is None:
            raise InputError("nothing was prefilled")
        return self._steps(options, *planned)

    def _steps(self, options: SamplingOptions, prompt: list[int], reuse: Reuse, block_id: str) -> Iterator[TokenStep]:
        def reused(cells: int) -> None:
            self.reused_cells, self.reused_from = cells, (reuse.source or "slot") if cells else ""

        try:
            yield from self.backend.generate(options, prompt, self.deadline, reused)
        finally:
            if self.prefixes is not None:
                if reuse.capture_at:
                    self.pending.add(PendingCapture(tuple(prompt[: reuse.capture_at]), block_id, self.prefixes))
                if len(prompt) - max(reuse.cells if reuse.source != "slot" else 0, reuse.capture_at) >= MIN_DERIVED_TOKENS:
                    self.pending.add(PendingCapture(tuple(prompt), block_id, self.prefixes, on_switch=True))

    # -- derived states pending on the cells ------------------------------------------------

    def before_drop(self, keeps: Optional[int] = 0) -> int:
        """The backend is about to keep only its first ``keeps`` cells: save the cells of the
        pending derived states that would not survive it (kept by :data:`KEEPER`); how many."""
        due = [capture for capture in self.pending.due(keeps) if not capture.on_switch  # not if a state nearly as long is kept
               or capture.prefixes.kept_length(capture.prefix) + MIN_DERIVED_TOKENS <= len(capture.prefix)]
        return keep_due(due, self.backend.save_prefixes, self.backend.fingerprint, later=True, on_kept=self.backend.kept)

    def settle(self) -> int:
        """Keep every pending derived state now (the cells stay), and wait for those handed
        to :data:`KEEPER`; how many were kept here."""
        kept = keep_due(self.pending.due(None), self.backend.save_prefixes, self.backend.fingerprint,
                        on_kept=self.backend.kept)
        KEEPER.drain()
        return kept

    def forget(self) -> None:
        """The cells are gone unseen (a restarted server): drop what is pending on them."""
        self.pending.clear()


class LocalBackend(EngineCells):
    """The cells of an in-process ``engine`` (:class:`~skillgraft.engine.llama.Engine` or the fake)."""

    def held_cells(self, prompt: Sequence[int]) -> tuple[Optional[Sequence[int]], None]:
        return self.engine.held, None  # an in-process context keeps any number of its cells

    def evaluate(self, prompt: list[int], reuse: Reuse, block_id: str) -> None:
        engine = self.engine
        if reuse.source == "block":  # the graft, as without reuse
            engine.graft(reuse.state, prompt[reuse.cells:], block_id, keep=reuse.cells, verify_hash=False)
            return
        if not reuse.source:
            engine.prefill(prompt)
            return
        if reuse.state is not None:
            engine.restore(reuse.state, verify_hash=False)
        if engine.n_past != reuse.cells:
            engine.keep_cells(reuse.cells)
        engine.append(prompt[reuse.cells:])

    def generate(self, options: SamplingOptions, prompt: list[int], deadline: Optional[Deadline],
                 reused: Callable[[int], None]) -> Iterator[TokenStep]:
        return self.engine.generate(options)  # the cells reused are those evaluate kept

    def save_prefixes(self, prefixes: Sequence[tuple[int, ...]]) -> list[Optional[Payload]]:
        held = self.engine.held
        return [self.engine.save_prefix(len(prefix))
                if held is not None and tuple(held[: len(prefix)]) == prefix else None for prefix in prefixes]


class LocalContext:
    """Mixed into an in-process engine: its one answer context (made on first use), and the
    notice the engine gives it before it drops cells (``_cells_going``)."""

    _context: Optional[AnswerContext] = None

    @property
    def context(self) -> AnswerContext:
        if self._context is None:
            self._context = AnswerContext(LocalBackend(self))
        return self._context

    def answer_slot(self, prefixes: Optional[PrefixCache] = None):
        """This context, held for one answer, continuing what it holds and the derived states
        of ``prefixes`` (:class:`~skillgraft.kv.context.AnswerContext`)."""
        return nullcontext(self.context.answering(prefixes))

    def settle_derived(self) -> int:
        """Keep now the derived states pending on the context (the cells stay)."""
        if self._context is None:
            KEEPER.drain()
            return 0
        return self._context.settle()

    def _cells_going(self, keeps: int) -> None:
        """The engine keeps only its first ``keeps`` cells next: the context saves what is
        pending on the others first."""
        if self._context is not None:
            self._context.before_drop(keeps)
