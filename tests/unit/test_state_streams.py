"""A state saved from a server whose slots keep their own KV streams, kept as one stream and
spread again (``engine.state_cut.one_stream`` / ``spread_streams``), on states built by hand."""

from __future__ import annotations

import struct

import pytest

from skillgraft.engine.state_cut import cut_sequence_state, one_stream, spread_streams
from skillgraft.errors import SlotFileError


def stream(cells: int, seq: int = 0, fill: int = 7) -> bytes:
    """One stream of ``cells`` cells (two layers, keys of 4-byte rows, values transposed)."""
    if not cells:
        return struct.pack("<I", 0)
    meta = b"".join(struct.pack("<iIi", pos, 1, seq) for pos in range(cells))
    keys = b"".join(struct.pack("<iQ", 1, 4) + bytes([fill + layer]) * (4 * cells) for layer in range(2))
    values = b"".join(struct.pack("<iII", 1, 2, 3) + bytes([fill + 9 + layer]) * (2 * 3 * cells) for layer in range(2))
    return struct.pack("<I", cells) + meta + struct.pack("<II", 1, 2) + keys + values


def part(*streams: bytes) -> bytes:
    return struct.pack("<I", len(streams)) + b"".join(streams)


@pytest.mark.parametrize("slot", [0, 1, 2])
def test_a_slot_of_three_streams_is_kept_as_the_one_stream_a_one_slot_server_writes(slot):
    saved = part(*[stream(5, seq=slot) if s == slot else stream(0) for s in range(3)])
    assert one_stream(saved) == part(stream(5))


def test_each_part_of_a_sliding_window_state_is_made_one_stream():
    saved = part(stream(0), stream(4, seq=1)) + part(stream(0), stream(2, seq=1, fill=40))
    assert one_stream(saved) == part(stream(4)) + part(stream(2, fill=40))


def test_a_one_stream_state_is_returned_as_it_is():
    state = part(stream(3, seq=0))
    assert one_stream(state) is state


def test_spread_and_kept_again_is_the_same_bytes_and_cuts_as_before():
    state = part(stream(6)) + part(stream(6, fill=50))
    spread = spread_streams(state, 4)
    assert struct.unpack_from("<4I", spread) == (4, 0, 0, 0)
    assert one_stream(spread) == state
    assert spread_streams(state, 1) is state
    assert cut_sequence_state(one_stream(spread), 2) == cut_sequence_state(state, 2)


def test_an_empty_state_spreads_to_empty_streams():
    assert spread_streams(part(stream(0)), 3) == part(stream(0), stream(0), stream(0))
    assert one_stream(part(stream(0), stream(0))) == part(stream(0))


@pytest.mark.parametrize("bad, says", [
    (part(stream(2, seq=0), stream(2, seq=1)), "2 KV streams"),
    (struct.pack("<I", 0) + stream(1), "0 KV streams"),
    (struct.pack("<I", 1 << 30), "KV streams"),
    (part(stream(0), stream(3, seq=1))[:-5], "the state ends"),
    (part(stream(0), struct.pack("<I", 1 << 31)), "the state ends"),
])
def test_a_hostile_state_is_refused_with_a_clear_error(bad, says):
    with pytest.raises(SlotFileError, match=says):
        one_stream(bad)


def test_only_a_one_stream_state_is_spread():
    with pytest.raises(SlotFileError, match="one KV stream"):
        spread_streams(part(stream(0), stream(2)), 2)
