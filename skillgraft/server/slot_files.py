"""Block payloads ⇄ llama-server slot files, both directions validated strictly.

A block payload is what ``llama_state_seq_get_data`` returns: an 8-byte preamble (the
state magic ``0xaf143cd8`` and the sequence id) followed by the sequence state. A slot file
is what ``llama_state_seq_save_file`` writes and ``POST /slots/{id}?action=restore`` reads::

    u32 magic 0x67677371 ('ggsq') | u32 version 3 | u32 n | n int32 words | sequence state

The ``n`` words are either a plain token list or, as llama-server writes them, a packed
token record: ``-1`` marker, record version 1, token count, tokens, media count 0. So a
block becomes a slot file as ``header + tokens + payload[8:]`` and a slot file becomes a
block by the reverse. A server whose slots keep their own KV streams writes one stream a slot
(all empty but the saved slot's); a block keeps the one holding cells (:meth:`SlotFile.one_stream`),
and its slot file spreads it again (``n_stream``). Files read back from a server are input: every
count and marker is checked, and anything unexpected raises :class:`SlotFileError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Sequence

from ..engine.state_cut import STATE_MAGIC, one_stream, spread_streams  # STATE_MAGIC: llama_state_seq_get_data's preamble
from ..errors import SlotFileError

SLOT_FILE_MAGIC = 0x67677371  # 'ggsq', LLAMA_STATE_SEQ_MAGIC
SLOT_FILE_VERSION = 3  # LLAMA_STATE_SEQ_VERSION
PACKED_MARKER = -1  # LLAMA_TOKEN_NULL: the token words hold a packed record
PACKED_VERSION = 1  # SERVER_TOKENS_STATE_VERSION
_HEADER = struct.Struct("<III")
_PREAMBLE = struct.Struct("<Ii")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1



@dataclass(frozen=True)
class SlotFile:
    """A parsed slot file: the tokens it carries and the sequence state after them (a view of
    the file's bytes, not a copy: a saved slot's state is tens of megabytes)."""

    tokens: tuple[int, ...]
    state: memoryview
    packed: bool

    @property
    def n_stream(self) -> int:
        """How many KV streams the server that wrote it keeps (its state's first word)."""
        if len(self.state) < 4:
            raise SlotFileError(f"a slot file's state of {len(self.state)} bytes holds no stream count")
        return struct.unpack_from("<I", self.state)[0]

    def one_stream(self) -> "SlotFile":
        """This file as a one-slot server writes it: the stream of a server's several that holds
        the cells (its cells naming sequence 0), as a block keeps it."""
        return replace(self, state=memoryview(one_stream(self.state)))

    def to_payload(self, seq_id: int = 0) -> bytes:
        """The block payload these bytes stand for (preamble for ``seq_id`` + state)."""
        return b"".join((_PREAMBLE.pack(STATE_MAGIC, seq_id), self.state))


def _check_tokens(tokens: Sequence[int]) -> list[int]:
    checked = []
    for token in tokens:
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token <= _INT32_MAX:
            raise SlotFileError(f"token {token!r} is not a non-negative int32 token id")
        checked.append(token)
    if not checked:
        raise SlotFileError("a slot file needs at least one token")
    return checked


def payload_state(payload: bytes) -> bytes:
    """The sequence state of a block payload, after checking its preamble."""
    if len(payload) <= _PREAMBLE.size:
        raise SlotFileError(f"a block payload of {len(payload)} bytes holds no state")
    magic, seq_id = _PREAMBLE.unpack_from(payload)
    if magic != STATE_MAGIC:
        raise SlotFileError(f"block payload starts with {magic:#010x}, not the state magic {STATE_MAGIC:#010x}")
    if seq_id < 0:
        raise SlotFileError(f"block payload names sequence {seq_id}")
    return payload[_PREAMBLE.size :]


def slot_file_from_block(tokens: Sequence[int], payload: bytes, n_stream: int = 1) -> bytes:
    """The slot file for a block: header, its tokens as a plain list, then its state, spread to
    the ``n_stream`` KV streams of the server that reads it (one a slot, unless they share one)."""
    checked = _check_tokens(tokens)
    payload_state(payload[: _PREAMBLE.size + 1])  # its preamble checked; the state is not copied for it
    words = struct.pack(f"<{len(checked)}i", *checked)
    header = _HEADER.pack(SLOT_FILE_MAGIC, SLOT_FILE_VERSION, len(checked))
    state = spread_streams(memoryview(payload)[_PREAMBLE.size:], n_stream)
    return b"".join((header, words, state))  # one copy of tens of megabytes


def _unpack_token_words(words: tuple[int, ...]) -> tuple[tuple[int, ...], bool]:
    if not words or words[0] != PACKED_MARKER:
        return words, False
    # [-1, version, count, tokens..., media count]
    if len(words) < 4:
        raise SlotFileError(f"packed token record of {len(words)} words is too short")
    if words[1] != PACKED_VERSION:
        raise SlotFileError(f"packed token record version {words[1]}, expected {PACKED_VERSION}")
    count = words[2]
    if count < 0 or 3 + count + 1 != len(words):
        raise SlotFileError(f"packed token record says {count} tokens but holds {len(words)} words")
    if words[3 + count] != 0:
        raise SlotFileError(f"packed token record carries {words[3 + count]} media chunks; blocks hold text only")
    return words[3 : 3 + count], True


def parse_slot_file(data: bytes, *, max_tokens: int = 1 << 20) -> SlotFile:
    """Parse a slot file, refusing a wrong magic, version, count, token or empty state."""
    if len(data) < _HEADER.size:
        raise SlotFileError(f"slot file of {len(data)} bytes is shorter than its header")
    magic, version, n_words = _HEADER.unpack_from(data)
    if magic != SLOT_FILE_MAGIC:
        raise SlotFileError(f"slot file magic {magic:#010x}, expected {SLOT_FILE_MAGIC:#010x}")
    if version != SLOT_FILE_VERSION:
        raise SlotFileError(f"slot file version {version}, expected {SLOT_FILE_VERSION}")
    if n_words > max_tokens + 4:
        raise SlotFileError(f"slot file claims {n_words} token words, more than {max_tokens + 4}")
    state_at = _HEADER.size + 4 * n_words
    if state_at >= len(data):
        raise SlotFileError(f"slot file of {len(data)} bytes has {n_words} token words and no state after them")
    words = struct.unpack_from(f"<{n_words}i", data, _HEADER.size)
    tokens, packed = _unpack_token_words(words)
    _check_tokens(tokens)
    return SlotFile(tokens=tuple(tokens), state=memoryview(data)[state_at:], packed=packed)

