"""Slot files are input: every malformed one raises SlotFileError, never a crash or a wrong block."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skillgraft.errors import InputError, SlotFileError
from skillgraft.server.slot_files import (
    SLOT_FILE_MAGIC,
    STATE_MAGIC,
    parse_slot_file,
    slot_file_from_block,
)

PAYLOAD = struct.pack("<Ii", STATE_MAGIC, 0) + bytes(range(200))
TOKENS = (1, 42, 7, 9)


def header(n, magic=SLOT_FILE_MAGIC, version=3):
    return struct.pack("<III", magic, version, n)


def packed_file(tokens, state=PAYLOAD[8:], media=0, version=1, count=None):
    words = [-1, version, len(tokens) if count is None else count, *tokens, media]
    return header(len(words)) + struct.pack(f"<{len(words)}i", *words) + state


def test_block_to_slot_file_and_back_is_the_identity():
    parsed = parse_slot_file(slot_file_from_block(TOKENS, PAYLOAD))
    assert parsed.tokens == TOKENS and parsed.to_payload() == PAYLOAD and not parsed.packed


def test_the_servers_packed_token_record_is_read():
    parsed = parse_slot_file(packed_file(TOKENS))
    assert parsed.packed and parsed.tokens == TOKENS and parsed.to_payload() == PAYLOAD


@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=64), st.binary(min_size=1, max_size=256))
@settings(max_examples=60, deadline=None)
def test_round_trip_for_any_tokens_and_state(tokens, state):
    payload = struct.pack("<Ii", STATE_MAGIC, 0) + state
    parsed = parse_slot_file(slot_file_from_block(tokens, payload))
    assert list(parsed.tokens) == tokens and parsed.to_payload() == payload


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "shorter than its header"),
        (b"\x00" * 11, "shorter than its header"),
        (header(1, magic=0x12345678) + b"\x01\x00\x00\x00" + b"s", "magic"),
        (header(1, version=4) + b"\x01\x00\x00\x00" + b"s", "version 4"),
        (header(2**32 - 1) + b"\x00" * 16, "claims"),
        (header(5) + b"\x00" * 8, "no state"),
        (header(2) + struct.pack("<2i", 1, 2), "no state"),
        (header(2) + struct.pack("<2i", 1, -5) + b"s", "token -5"),
        (packed_file(TOKENS, version=2), "record version 2"),
        (packed_file(TOKENS, count=99), "says 99 tokens"),
        (packed_file(TOKENS, count=-3), "says -3 tokens"),
        (packed_file(TOKENS, media=1), "media"),
        (header(3) + struct.pack("<3i", -1, 1, 0) + b"s", "too short"),
    ],
)
def test_malformed_slot_files_are_refused_with_a_reason(data, message):
    with pytest.raises(SlotFileError, match=message):
        parse_slot_file(data)


@pytest.mark.parametrize(
    "tokens, payload, message",
    [
        ((), PAYLOAD, "at least one token"),
        ((1, -1), PAYLOAD, "token -1"),
        ((1, 2**31), PAYLOAD, "int32"),
        ((1, "2"), PAYLOAD, "'2'"),
        ((True,), PAYLOAD, "True"),
        (TOKENS, PAYLOAD[:8], "holds no state"),
        (TOKENS, b"\x00" * 8 + PAYLOAD[8:], "state magic"),
        (TOKENS, struct.pack("<Ii", STATE_MAGIC, -2) + b"s", "sequence -2"),
    ],
)
def test_bad_blocks_never_become_slot_files(tokens, payload, message):
    with pytest.raises(SlotFileError, match=message):
        slot_file_from_block(tokens, payload)


def test_slot_file_error_is_an_input_error():
    assert issubclass(SlotFileError, InputError)


@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=16), st.binary(min_size=1, max_size=256),
       st.integers(2, 8))
@settings(max_examples=80, deadline=None)
def test_any_state_spread_to_several_streams_comes_back_or_is_refused(tokens, state, n_stream):
    """A block's state spread for a server of ``n_stream`` slot streams is refused with a reason,
    or read back as one stream that spreads and comes back the same: never a crash."""
    payload = struct.pack("<Ii", STATE_MAGIC, 0) + state
    try:
        data = slot_file_from_block(tokens, payload, n_stream)
    except SlotFileError:
        return
    parsed = parse_slot_file(data).one_stream()
    again = parse_slot_file(slot_file_from_block(tokens, parsed.to_payload(), n_stream)).one_stream()
    assert list(parsed.tokens) == tokens and again.to_payload() == parsed.to_payload()
    assert len(parsed.to_payload()) == len(payload)  # only sequence ids may change (to 0), never the size
