"""Cut a sequence state to its first cells: a derived prefix state from a saved context.

A context (a llama-server slot, the in-process context) that holds a prompt and its answer
is saved whole; the state of the prompt's first ``n`` tokens is those same cells, byte for
byte, so it is cut out of the saved state instead of being evaluated again (which would recompute the last cell alone, in a batch
of one, and give other bits on some CPUs). The layout is llama.cpp's sequence state (after the
8-byte preamble of a block payload), one part per KV cache (two for sliding-window models)::

    u32 n_stream (1) | u32 cells | cells × (i32 pos, u32 n_seq, n_seq × i32 seq)
    | u32 v_trans | u32 n_layer | n_layer × (i32 type, u64 row bytes, cells × row)          keys
    | v_trans 0: as the keys; 1: n_layer × (i32 type, u32 element bytes, u32 rows, rows × cells × element)

A server of several slots, each with its own KV stream, writes ``n_stream`` streams a part, all
empty but the saved slot's; :func:`one_stream` and :func:`spread_streams` convert between that
and the one-stream layout every payload is kept in.

Every count is checked against the bytes at hand; anything unexpected raises
:class:`~skillgraft.errors.SlotFileError` (the state is then not kept, never guessed at).
"""

from __future__ import annotations

import struct

from ..core.states import KVState, sha256_hex
from ..errors import SlotFileError

PREAMBLE = struct.Struct("<Ii")  # the state magic 0xaf143cd8 and the sequence id
STATE_MAGIC = 0xAF143CD8

__all__ = ["STATE_MAGIC", "cut_payload", "cut_sequence_state", "cut_state", "one_stream", "spread_streams"]

MAX_LAYERS = 4096


class _Reader:
    """Reads a state without copying it: what it takes are views of ``data``."""

    def __init__(self, data) -> None:
        self.data, self.at = memoryview(data), 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.at + n > len(self.data):
            raise SlotFileError(f"the state ends after {len(self.data)} bytes, {n} more were needed at {self.at}")
        chunk = self.data[self.at: self.at + n]
        self.at += n
        return chunk

    def word(self, fmt: str = "<I") -> int:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]


def _cut_cache(reader: _Reader, keep: int) -> list:
    """One KV cache's part of the state, cut to its first ``keep`` cells, as the pieces to join."""
    if reader.word() != 1:
        raise SlotFileError("only a state of one KV stream can be cut")
    cells = reader.word()
    if not 0 < keep <= cells:
        raise SlotFileError(f"cannot keep {keep} of {cells} cells")
    out = [struct.pack("<II", 1, keep)]
    for index in range(cells):
        pos, n_seq = reader.word("<i"), reader.word()
        seqs = reader.take(4 * n_seq)
        if index < keep:
            if pos != index:
                raise SlotFileError(f"cell {index} is at position {pos}: not a prefix at its own positions")
            out += (struct.pack("<iI", pos, n_seq), seqs)
    v_trans, n_layer = reader.word(), reader.word()
    if v_trans not in (0, 1) or not 0 < n_layer <= MAX_LAYERS:
        raise SlotFileError(f"unexpected state layout (v_trans {v_trans}, {n_layer} layers)")
    out.append(struct.pack("<II", v_trans, n_layer))
    for _ in range(n_layer):  # keys, one row a cell
        kind, row = reader.word("<i"), reader.word("<Q")
        data = reader.take(row * cells)
        out += (struct.pack("<iQ", kind, row), data[: row * keep])
    for _ in range(n_layer):
        if not v_trans:
            kind, row = reader.word("<i"), reader.word("<Q")
            data = reader.take(row * cells)
            out += (struct.pack("<iQ", kind, row), data[: row * keep])
            continue
        kind, element, rows = reader.word("<i"), reader.word(), reader.word()
        data = reader.take(element * rows * cells)
        stride = element * cells
        out.append(struct.pack("<iII", kind, element, rows))
        out.extend(data[j * stride: j * stride + element * keep] for j in range(rows))
    return out


def _skip_data(reader: _Reader, cells: int) -> None:
    """Read past a stream's keys and values (after its cells' metadata) without copying them."""
    v_trans, n_layer = reader.word(), reader.word()
    if v_trans not in (0, 1) or not 0 < n_layer <= MAX_LAYERS:
        raise SlotFileError(f"unexpected state layout (v_trans {v_trans}, {n_layer} layers)")
    for _ in range(n_layer):
        reader.word("<i")
        reader.take(reader.word("<Q") * cells)
    for _ in range(n_layer):
        reader.word("<i")
        if v_trans:
            element, rows = reader.word(), reader.word()
            reader.take(element * rows * cells)
        else:
            reader.take(reader.word("<Q") * cells)


def _stream_end(reader: _Reader) -> int:
    """Read past one stream (from its cell count) without copying it; how many cells it held."""
    cells = reader.word()
    for _ in range(cells):
        reader.word("<i")
        reader.take(4 * reader.word())
    if cells:
        _skip_data(reader, cells)
    return cells


def _stream_as_sequence_zero(reader: _Reader) -> list:
    """One stream (from its cell count) as the pieces of the same stream whose cells name
    sequence 0 (a restore reads its target's own); [] when it holds no cells."""
    cells = reader.word()
    if not cells:
        return []
    meta = [struct.pack("<I", cells)]
    for _ in range(cells):
        pos, n_seq = reader.word("<i"), reader.word()
        reader.take(4 * n_seq)
        meta.append(struct.pack(f"<iI{n_seq}i", pos, n_seq, *[0] * n_seq))
    start = reader.at
    _skip_data(reader, cells)
    return [b"".join(meta), reader.data[start:reader.at]]


def one_stream(state):
    """A sequence state (no preamble) of ``n_stream`` streams a KV cache part, at most one
    holding cells (a slot of a server whose slots keep their own streams), in the layout of one
    stream, its cells naming sequence 0, as a one-slot server's (so a state's bytes do not
    depend on the slot it was saved from). A state of one stream is returned as it is; one
    with cells in two streams is refused."""
    if len(state) >= 4 and struct.unpack_from("<I", state)[0] == 1:  # every part as the first
        return state
    reader, parts = _Reader(state), []
    while reader.at < len(reader.data):
        n_stream = reader.word()
        if not 0 < n_stream <= MAX_LAYERS:
            raise SlotFileError(f"a state part of {n_stream} KV streams")
        held = [pieces for pieces in (_stream_as_sequence_zero(reader) for _ in range(n_stream)) if pieces]
        if len(held) > 1:
            raise SlotFileError(f"a sequence's cells in {len(held)} KV streams")
        parts += [struct.pack("<I", 1), *(held[0] if held else [struct.pack("<I", 0)])]
    return b"".join(parts)


def spread_streams(state, n_stream: int):
    """A one-stream sequence state (no preamble) as ``n_stream`` streams a part: the empty ones
    first, then the one holding cells, which a restore puts in its slot's own stream."""
    if n_stream == 1:
        return state
    reader, parts = _Reader(state), []
    while reader.at < len(reader.data):
        if reader.word() != 1:
            raise SlotFileError("only a state of one KV stream can be spread")
        start = reader.at
        _stream_end(reader)
        parts += [struct.pack(f"<{n_stream}I", n_stream, *[0] * (n_stream - 1)), reader.data[start:reader.at]]
    return b"".join(parts)


def cut_payload(payload: bytes, keep: int) -> bytes:
    """A block payload (``llama_state_seq_get_data``'s bytes) cut to its first ``keep`` cells."""
    if len(payload) <= PREAMBLE.size or PREAMBLE.unpack_from(payload)[0] != STATE_MAGIC:
        raise SlotFileError("not a sequence state payload")
    return cut_sequence_state(memoryview(payload)[PREAMBLE.size:], keep, PREAMBLE.unpack_from(payload)[1])


def cut_sequence_state(state, keep: int, seq_id: int = 0) -> bytes:
    """The block payload of ``state`` (a sequence state without its preamble, as a slot file
    holds it: bytes or a view of them) cut to its first ``keep`` cells, in one copy."""
    reader = _Reader(state)
    parts: list = [PREAMBLE.pack(STATE_MAGIC, seq_id)]
    while reader.at < len(reader.data):
        parts += _cut_cache(reader, keep)
    return b"".join(parts)  # the one copy


def cut_state(state: KVState, keep: int) -> KVState:
    """``state`` cut to its first ``keep`` tokens and cells."""
    payload = cut_payload(state.payload, keep)
    return KVState(tuple(state.tokens[:keep]), payload, sha256_hex(payload), state.fingerprint)
