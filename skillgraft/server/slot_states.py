"""Blocks in and out of llama-server slots: capture (prefill, then save the slot), restore
(check the state, write its slot file, restore it), save and erase, and the slot files.

:class:`SlotStates` is the half of :class:`~skillgraft.server.engine.LlamaServerEngine` that
calls ``/slots/{id}``; the engine provides ``_request``, ``complete``, ``tokenize``,
``_check_slot``, ``_require_serving``, ``restart`` and its lifecycle fields. :class:`SlotFiles`
keeps the slot files of verified states in the server's ``--slot-save-path``, written once and
bounded in bytes (least recently used out first). A block's fingerprint, size and SHA-256 are
checked before its slot file is written; after a failed restore the server is restarted
before it serves again (a failed restore can leave corrupted KV behind, llama.cpp #27068).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Optional, Sequence, Union

from ..core.states import KVState, capture_tokens, check_state, sha256_hex, write_in_chunks
from ..kv.context import KEEPER, AnswerContext
from ..errors import ServerError, SlotReuseError
from .records import Restore
from .slot import SlotBackend
from .slot_files import SlotFile, parse_slot_file, slot_file_from_block

__all__ = ["SLOT_FILE_SUFFIX", "SlotFiles", "SlotStates"]

logger = logging.getLogger("skillgraft.server")

SLOT_FILE_SUFFIX = ".slot"


class SlotFiles:
    """Slot files of verified states in ``folder``, at most ``max_bytes`` of them kept.

    ``lock`` is held from writing a file until the server has read it, so no other thread
    evicts it meanwhile.
    """

    def __init__(self, folder: Path, max_bytes: int, *, in_memory: bool = False) -> None:
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.in_memory = in_memory  # the folder is in a memory file system (see skillgraft.server.scratch)
        self.lock = threading.Lock()
        self._sizes: OrderedDict[str, int] = OrderedDict()
        self.n_stream = 1  # the server's KV streams (one a slot, unless they share one): learnt from its saves

    def write(self, state: KVState) -> tuple[str, float]:
        """The file name of ``state``'s slot file, written unless kept already, and the seconds it took."""
        name = state.sha256 + SLOT_FILE_SUFFIX
        path = self.folder / name
        started = time.perf_counter()
        if name in self._sizes and path.is_file():
            self._sizes.move_to_end(name)
            return name, 0.0
        data = slot_file_from_block(state.tokens, state.payload, self.n_stream)
        staged = self.folder / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(staged, "wb") as handle:
            write_in_chunks(handle, data)
        os.replace(staged, path)
        self._sizes[name] = len(data)
        while sum(self._sizes.values()) > self.max_bytes and len(self._sizes) > 1:
            old, _ = self._sizes.popitem(last=False)
            (self.folder / old).unlink(missing_ok=True)
        return name, time.perf_counter() - started

    def stage(self, state: KVState) -> bool:
        """Write ``state``'s slot file ahead of its restore when the folder is in memory (a copy in
        memory, off the answer's path; on a disk it would compete with the answer for the cores);
        whether it was written."""
        if not self.in_memory:
            return False
        with self.lock:
            return self.write(state)[1] > 0

    def forget(self, sha256: str) -> None:
        """Remove the slot file of a state, if kept."""
        name = sha256 + SLOT_FILE_SUFFIX
        with self.lock:
            self._sizes.pop(name, None)
            (self.folder / name).unlink(missing_ok=True)


class SlotStates:
    """Capture, restore, save and erase through ``/slots/{id}``; mixed into the engine."""

    # -- state layout ----------------------------------------------------------------------

    def _measure_state_layout(self) -> tuple[int, int]:
        """Header and per-token bytes of a slot state, from captures of 1 and 2 tokens."""
        probe = self.tokenize("a b", add_bos=False)[:1] or [0]
        sizes = [len(self._capture_tokens(probe * n, slot=0)[1]) for n in (1, 2)]
        per_token = sizes[1] - sizes[0]
        return sizes[0] - per_token, per_token

    def state_size(self, n_tokens: int) -> Optional[int]:
        """The exact payload size of ``n_tokens`` tokens, or None for sliding-window models."""
        if self.sliding_window:
            return None
        return self._state_header + n_tokens * self._state_per_token

    # -- what each slot holds ----------------------------------------------------------------

    def _slots_held(self) -> dict[int, tuple[list[int], int, bool]]:
        held = self.__dict__.get("_held")
        if held is None:
            held = self._held = {}
        return held

    def held_tokens(self, slot: int, *, maybe: bool = False) -> Optional[list[int]]:
        """The tokens slot ``slot`` surely holds at their own positions (None: unknown); with
        ``maybe``, those it may hold at most (the tokens it generated last, of which the server
        keeps all but perhaps the last; None when an answer was cut short and it may hold more)."""
        entry = self._slots_held().get(slot)
        if entry is None:
            return None
        if maybe:
            return None if entry[2] else list(entry[0])
        return entry[0][: entry[1]]

    def note_held(self, slot: int, tokens: Sequence[int], surely: Optional[int] = None, *, open_end: bool = False) -> None:
        """Record what slot ``slot`` holds: ``tokens``, the first ``surely`` of them for certain
        (``open_end``: and perhaps more after them)."""
        tokens = [int(t) for t in tokens]
        self._slots_held()[slot] = (tokens, len(tokens) if surely is None else surely, open_end)

    def claim(self, slot: int, scope: Optional[str]) -> None:
        """Slot ``slot`` answers next in reuse scope ``scope``
        (:func:`~skillgraft.kv.prefixes.reuse_scope`): cells another scope left there are never
        continued (what it holds is unknown from now on, so the next prompt is evaluated afresh),
        else their length and the first token's latency would tell that scope's prompt."""
        scopes = self.__dict__.setdefault("_held_scopes", {})
        if scopes.get(slot) != scope:
            self._slots_held().pop(slot, None)
            scopes[slot] = scope

    def held_scope(self, slot: int) -> Optional[str]:
        """The scope whose cells slot ``slot`` holds (None: none known)."""
        return self.__dict__.get("_held_scopes", {}).get(slot)

    def forget_held(self, slot: Optional[int] = None) -> None:
        """What ``slot`` (every slot: None) holds is unknown from now on (every slot: a new
        process, whose slots hold nothing, so no capture is pending either)."""
        if slot is None:
            self._slots_held().clear()
            for context in list(self._slot_contexts.values()):
                context.forget()
        else:
            self._slots_held().pop(slot, None)

    # -- each slot's answer context (:class:`~skillgraft.kv.context.AnswerContext`) -------------

    def context(self, slot: int) -> AnswerContext:
        """Slot ``slot``'s answer context: its reuse decisions and the derived states pending on it."""
        context = self._slot_contexts.get(slot)
        if context is None:
            context = self._slot_contexts.setdefault(slot, AnswerContext(SlotBackend(self, self._check_slot(slot))))
        return context

    def pending_slots(self) -> list[int]:
        """The slots with derived states pending."""
        return sorted(slot for slot, context in list(self._slot_contexts.items()) if len(context.pending))

    def settle_derived(self) -> int:
        """Keep now the derived states pending on every slot (their cells stay); how many were kept."""
        kept = sum(self.context(slot).settle() for slot in self.pending_slots())
        KEEPER.drain()  # and those being kept off the answers' path
        return kept

    def cells_going(self, slot: int, keeps: Optional[int] = 0) -> None:
        """Slot ``slot`` keeps only its first ``keeps`` cells next: its context saves the derived
        states pending on the others first."""
        context = self._slot_contexts.get(slot)
        if context is not None:
            context.before_drop(keeps)

    # -- save and erase --------------------------------------------------------------------

    def save_slot(self, slot: int = 0) -> tuple[tuple[int, ...], bytes]:
        """Save a slot through the server and read it back as ``(tokens, block payload)``."""
        parsed = self.save_slot_file(slot)
        return parsed.tokens, parsed.to_payload()

    def save_slot_file(self, slot: int = 0) -> SlotFile:
        """Save a slot through the server and read it back, parsed (its state a view of the
        bytes read: cut it, or copy it with ``to_payload``)."""
        self._check_slot(slot)
        name = f"save-{os.getpid()}-{time.monotonic_ns()}{SLOT_FILE_SUFFIX}"
        path = self.slot_dir / name
        try:
            self._request("POST", f"/slots/{slot}", params={"action": "save"}, json={"filename": name})
            parsed = parse_slot_file(path.read_bytes())
            self.slot_files.n_stream = parsed.n_stream
            if parsed.n_stream > 1:  # a block keeps the slot's own stream
                parsed = parsed.one_stream()
        except OSError as exc:
            raise ServerError(f"the server saved slot {slot} but {path} cannot be read: {exc}") from None
        finally:
            path.unlink(missing_ok=True)
        return parsed

    def erase_slot(self, slot: int = 0) -> None:
        self.cells_going(self._check_slot(slot), 0)
        self._request("POST", f"/slots/{self._check_slot(slot)}", params={"action": "erase"})
        self.note_held(slot, [])

    def stage_slot_file(self, state: KVState) -> None:
        """Write the slot file of ``state`` (just kept from a slot's cells) ahead of its restore,
        when the slot files are in memory; a failure only costs the write at restore time."""
        try:
            self.check_payload(state, verify_hash=False)
            self.slot_files.stage(state)
        except Exception as exc:
            logger.debug("the slot file of a kept state was not staged: %s", exc)

    def forget_slot_file(self, sha256: str) -> None:
        """Remove a cached slot file (tests use this to reach the write path again)."""
        self.slot_files.forget(sha256)

    # -- capture and restore ---------------------------------------------------------------

    def _capture_tokens(self, tokens: list[int], slot: int) -> tuple[tuple[int, ...], bytes]:
        self.claim(slot, None)  # a capture's cells are continued by no request
        self.erase_slot(slot)
        completion = self.complete(tokens, slot=slot)
        if completion.cache_n != 0 or completion.prompt_n != len(tokens):
            raise SlotReuseError("capture", slot, completion.cache_n, 0, completion.prompt_n, len(tokens))
        self.note_held(slot, tokens)
        saved_tokens, payload = self.save_slot(slot)
        if list(saved_tokens) != tokens:
            raise ServerError(
                f"slot {slot} saved {len(saved_tokens)} tokens, not the {len(tokens)} just prefilled"
            )
        return saved_tokens, payload

    def capture(self, source: Union[str, Sequence[int]], *, slot: int = 0) -> KVState:
        """Prefill ``source`` (text or token ids) in a slot, save it and convert it to a state."""
        self._require_serving()
        self._check_slot(slot)
        tokens = capture_tokens(self, source)
        started = time.perf_counter()
        saved_tokens, payload = self._capture_tokens(tokens, slot)
        elapsed = time.perf_counter() - started
        return KVState(saved_tokens, payload, sha256_hex(payload), self.fingerprint, elapsed)

    def check_payload(self, state: KVState, block_id: str = "", *, verify_hash: bool = True) -> None:
        """Raise unless ``state`` may be handed to this server (fingerprint, size, SHA-256)."""
        check_state(
            state, self.fingerprint, self.settings.n_ctx, self.state_size(state.n_tokens), block_id, verify_hash=verify_hash
        )

    def restore(self, state: KVState, block_id: str = "", *, slot: int = 0, verify_hash: bool = True) -> Restore:
        """Check ``state``, write its slot file and restore it into ``slot``.

        A refused or short restore marks the server for a restart (started servers are
        restarted at once) and raises :class:`ServerError`.
        """
        self._require_serving()
        self._check_slot(slot)
        self.check_payload(state, block_id, verify_hash=verify_hash)
        self.cells_going(slot, 0)  # the slot's cells are about to be replaced
        generation = self.restarts
        try:
            with self.slot_files.lock:  # the file must not be evicted before the server reads it
                name, write_s = self.slot_files.write(state)
                body = self._request("POST", f"/slots/{slot}", params={"action": "restore"}, json={"filename": name})
            n_restored = int(body.get("n_restored", -1))
            if n_restored != state.n_tokens:
                raise ServerError(f"slot {slot} restored {n_restored} tokens of {state.n_tokens}")
        except ServerError as exc:
            self.forget_slot_file(state.sha256)
            self._after_failed_restore(generation)
            raise ServerError(f"restore of {block_id or 'a block'} into slot {slot} failed: {exc}") from None
        self.note_held(slot, state.tokens)
        timings = body.get("timings", {})
        return Restore(
            slot=slot, n_restored=n_restored, n_bytes=int(body.get("n_read", 0)),
            restore_ms=float(timings.get("restore_ms", 0.0)), write_s=write_s,
        )

    def _after_failed_restore(self, generation: int) -> None:
        with self._lifecycle:
            if self.restarts != generation:
                return  # restarted since the restore was sent: the new process holds no bad KV
            self._needs_restart = True
            if self._process is not None:
                logger.warning("restarting llama-server after a failed restore")
                self.restart()
