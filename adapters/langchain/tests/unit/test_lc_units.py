"""Message rendering and stop sequences: pure functions, no model."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_skillgraft.chat_models import ChatSkillGraft
from langchain_skillgraft.messages import to_chat, user_texts
from skillgraft.core.stops import StopCutter


def test_roles_and_tool_messages():
    chat = to_chat(
        [
            SystemMessage("Be brief."),
            HumanMessage([{"type": "text", "text": "Add 2 and 3."}]),
            AIMessage("", tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "c1"}]),
            ToolMessage("5", tool_call_id="c1"),  # named by its call
            ChatMessage(role="developer", content="Use digits."),
        ]
    )
    assert chat == [
        ("system", "Be brief."),
        ("user", "Add 2 and 3."),
        ("assistant", '{"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}'),
        ("tool", "Tool add returned: 5"),
        ("system", "Use digits."),
    ]


def test_empty_chat_and_media_are_refused():
    with pytest.raises(ValueError, match="at least one"):
        to_chat([])
    with pytest.raises(ValueError, match="'audio'"):
        to_chat([HumanMessage([{"type": "audio", "base64": "AAAA", "mime_type": "audio/wav"}])])


def test_user_texts():
    assert user_texts([HumanMessage(" first "), AIMessage("x"), ChatMessage(role="user", content="second ")]) == ["first", "second"]
    assert user_texts([SystemMessage("only system")]) == []


def feed_all(cutter, pieces):
    out = "".join(cutter.feed(p) for p in pieces)
    return out + ("" if cutter.stopped else cutter.flush())


def test_stop_split_across_pieces():
    cutter = StopCutter(["END"])
    assert cutter.feed("abc E") == "abc "  # "E" may begin the stop: held back
    assert cutter.feed("N") == ""
    assert cutter.feed("Dtail") == "" and cutter.stopped
    assert cutter.feed("more") == ""


def test_earliest_stop_wins_and_false_starts_are_released():
    assert feed_all(StopCutter(["zz", "b"]), ["a", "z", "b", "zz"]) == "az"
    assert feed_all(StopCutter(["END"]), ["EN", "x", "E"]) == "ENxE"
    assert feed_all(StopCutter([]), ["a", "b"]) == "ab"
    assert feed_all(StopCutter(["", "q"]), ["abc"]) == "abc"


def test_call_options_are_checked_and_one_stop_text_is_one_stop_sequence():
    chat = ChatSkillGraft.model_construct(model="m", home="h", block_id=None, max_tokens=8, temperature=0.0, seed=0, stop=None)
    assert chat._options("there", {}).stop == ["there"]
    assert chat._options(["a", "bc"], {}).stop == ["a", "bc"]
    for stop in ([5], ["a", None]):
        with pytest.raises(ValueError, match="stop"):
            chat._options(stop, {})
    for bad in ({"temperature": float("nan")}, {"temperature": -1}, {"seed": -5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            chat._options(None, bad)


def test_an_xfail_that_passes_fails_the_run(pytestconfig):
    """The standard suites' xfails are strict under both configs (the adapter's and the project's)."""
    assert pytestconfig.getini("xfail_strict") is True
