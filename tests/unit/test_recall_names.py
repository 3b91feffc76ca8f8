"""A Recall reads by the names its JSON gives (the CLI's ``route --json``) and the HTTP note
gives the same facts (``block_name``, ``routed`` ...); the old names keep working."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from skillgraft.cli.main import cli
from skillgraft.core.answer import AnswerNote
from skillgraft.gateway.app import create_app
from skillgraft.gateway.service import Gateway
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakePool

from .conftest import ANSWER, GIT_MANUAL, GIT_QUERY, OUT_OF_DOMAIN, QUESTION

# The note's fields that tell the recall (the rest tell the answer: its decision, cache, gate).
RECALL_FIELDS = ("routed", "block_id", "block_name", "score", "threshold", "reason", "near_miss", "conversation",
                 "skills")


def stock(memory: SkillMemory) -> None:
    memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
    memory.add_solution(QUESTION, ANSWER, verifier="exact", expected=ANSWER)


def as_json(value):
    """An attribute as its JSON shows it (a skill place as its dict, a score rounded)."""
    if isinstance(value, tuple):
        return [place.as_dict() for place in value]
    return round(value, 6) if isinstance(value, float) else value


@pytest.mark.parametrize("query, decision", [(GIT_QUERY, "graft"), (QUESTION, "exact"), (OUT_OF_DOMAIN, "abstain")])
def test_every_key_of_a_recalls_json_is_an_attribute_of_the_same_name(fake_memory, query, decision):
    stock(fake_memory)
    recall = fake_memory.recall(query)
    assert recall.decision == recall.routed == decision
    for key, shown in recall.as_dict().items():
        if key == "candidates":
            assert [{"block_id": b, "score": round(float(s), 6)} for b, s in recall.candidates] == shown
        else:
            assert as_json(getattr(recall, key)) == shown, key
    assert recall.block_name == (recall.block.name if recall.block else None)


def test_a_recall_reads_by_the_names_the_http_note_gives_it(fake_memory, fake_engine, fake_embedder):
    stock(fake_memory)
    assert set(RECALL_FIELDS) <= set(AnswerNote.__dataclass_fields__)
    gateway = Gateway(fake_memory.store.home, FakePool(fake_engine), embedder=fake_embedder)
    try:
        with TestClient(create_app(gateway), base_url="http://127.0.0.1") as http:
            reply = http.post("/v1/chat/completions", json={"model": "fake-chatml", "max_tokens": 4,
                                                           "messages": [{"role": "user", "content": GIT_QUERY}]})
    finally:
        gateway.close()
    note = reply.json()["skillgraft"]
    recall = fake_memory.recall(GIT_QUERY)
    for key in RECALL_FIELDS:
        assert hasattr(recall, key), key
        if key != "skills":  # a recall of one question holds none; the chat's answer places its block
            assert as_json(getattr(recall, key)) == note[key], key


def test_the_cli_json_and_the_recall_agree_name_for_name(runner, home, fake_cli):
    with SkillMemory.open(home) as memory:
        stock(memory)
        recall = memory.route(GIT_QUERY)
    shown = runner.invoke(cli, ["route", GIT_QUERY, "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    for key in ("decision", "block_id", "block_name", "score", "threshold", "reason", "near_miss", "runner_up"):
        assert as_json(getattr(recall, key)) == data[key], key
    assert data["block_name"] == recall.block_name == "git-squash"


def test_the_old_names_keep_working(fake_memory):
    stock(fake_memory)
    recall = fake_memory.recall(GIT_QUERY)
    assert recall.block.name == recall.block_name and recall.block.id == recall.block_id
    assert recall.decision == "graft"
    nothing = fake_memory.recall(OUT_OF_DOMAIN)
    assert nothing.block is None and nothing.block_name is None and nothing.block_id is None
