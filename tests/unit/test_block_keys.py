"""Captured blocks found by key on the fakes: a prompt opening with a block's exact tokens
reuses its cells with no routing, in-process and through the gateway, the answer the one a
fresh prefill gives; the routing path unchanged; only live blocks, never another namespace's;
a damaged block or a crafted catalog row refused with a log line, no block ever deleted."""

from __future__ import annotations

import logging
import shutil

import pytest
from fastapi.testclient import TestClient

from skillgraft import AnswerOptions
from skillgraft.core.blocks import tokens_sha256, tokens_to_bytes
from skillgraft.core.chat_layout import chat_tokens
from skillgraft.errors import BlockIntegrityError, StoreError
from skillgraft.gateway.app import create_app
from skillgraft.gateway.keys import ApiKeys, Principal
from skillgraft.gateway.service import Gateway
from skillgraft.kv.prefixes import PrefixCache
from skillgraft.memory import SkillMemory
from skillgraft.memory.namespaces import namespace_scope
from skillgraft.store.block_states import BlockStates, row_problem
from skillgraft.store.block_store import BlockStore
from skillgraft.store.catalog import SqliteCatalog
from skillgraft.testing import FakeEmbedder, FakeEngine, FakePool

from .conftest import GIT_MANUAL, SOURDOUGH_MANUAL

OPTIONS = AnswerOptions(max_tokens=6)
QUESTION = "how do I squash my last two commits?"
KEYS = ApiKeys({"key-of-team-a-0001": Principal("team-a"), "key-of-team-b-0002": Principal("team-b")})


def memory_at(home, **options) -> SkillMemory:
    return SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder(), **options)


def deposited(home, text: str = GIT_MANUAL, namespace=None, **options):
    """A block of ``text`` captured in ``home`` (the memory closed: a later one holds no cells)."""
    with memory_at(home, namespace=namespace) as memory:
        return memory.add_manual("git-squash" if text == GIT_MANUAL else "sourdough", text, examples=["squash"],
                                 **options)


def chat(system: str = GIT_MANUAL, question: str = QUESTION):
    return [("system", system), ("user", question)]


def fresh(tmp_path, messages):
    """The chat prefilled whole: no block, no derived state, nothing held."""
    with memory_at(tmp_path / "fresh", derived_bytes=0) as memory:
        return memory.answer(messages, OPTIONS, route=False)


def tokens_of(answer) -> list[int]:
    return [step.token for step in answer.end.steps]


def test_a_prompt_opening_with_a_blocks_tokens_reuses_its_cells_with_no_routing(tmp_path):
    block = deposited(tmp_path / "home")
    with memory_at(tmp_path / "home") as memory:
        answer = memory.answer(chat(), OPTIONS, route=False)
        assert answer.note.decision == "abstain" and answer.note.block_id is None  # nothing was routed
        assert (answer.note.reused_from, answer.note.cache_n) == ("derived", block.n_tokens)
        assert len(memory.states.cache.store) == 0 and memory.engine.calls["restore"] == 1  # the block's own cells
        assert memory.engine.context.reused_cells == block.n_tokens
    plain = fresh(tmp_path, chat())
    assert plain.note.reused_from == "" and tokens_of(answer) == tokens_of(plain) and answer.text == plain.text


def test_a_prompt_sharing_the_start_of_a_block_gets_its_cells_cut_to_what_they_share(tmp_path):
    block = deposited(tmp_path / "home")
    other = chat(GIT_MANUAL[:120] + " Then tell a joke about rebasing.")
    with memory_at(tmp_path / "home") as memory:
        answer = memory.answer(other, OPTIONS, route=False)
        assert answer.note.reused_from == "derived" and 64 <= answer.note.cache_n < block.n_tokens
    assert tokens_of(answer) == tokens_of(fresh(tmp_path, other))


def test_the_routing_path_is_unchanged(tmp_path, monkeypatch):
    """A routed graft restores its block as before; it never looks for blocks by key."""
    block = deposited(tmp_path / "home")
    with memory_at(tmp_path / "home") as memory:
        looked, lookup = [], PrefixCache.lookup

        def spied(self, prompt, beyond=0, *, blocks=True):
            looked.append(blocks)
            return lookup(self, prompt, beyond, blocks=blocks)

        monkeypatch.setattr(PrefixCache, "lookup", spied)
        graft = memory.answer([("user", QUESTION)], OPTIONS, block="git-squash")
        assert (graft.note.decision, graft.note.block_id, graft.note.reused_from) == ("graft", block.id, "block")
        assert looked == [False]
    with memory_at(tmp_path / "without", derived_bytes=0) as plain:
        plain.add_manual("git-squash", GIT_MANUAL, examples=["squash"])
        plain.engine.reset()
        before = plain.answer([("user", QUESTION)], OPTIONS, block="git-squash")
    assert tokens_of(graft) == tokens_of(before) and graft.note.cache_n == before.note.cache_n


def prompt_of(memory, system: str = GIT_MANUAL) -> list[int]:
    return chat_tokens(memory.engine, chat(system))


def test_blocks_are_found_from_every_scope_of_the_memory_holding_them_and_no_other(tmp_path):
    """A base block is found by key from every namespace and salt (each can route to it); a
    namespace's own block only from that namespace's scopes."""
    home = tmp_path / "home"
    base_block = deposited(home)
    own_block = deposited(home, SOURDOUGH_MANUAL, namespace="team-a")
    for namespace in ("default", "team-a", "team-b"):
        with memory_at(home, namespace=namespace) as memory:
            for salt in ("", "a client's own salt"):
                prefixes = memory.states.cache.scoped(namespace_scope(namespace, salt))
                found = prefixes.lookup(prompt_of(memory))
                assert found is not None and found.sha256 == base_block.sha256
                bread = prefixes.lookup(prompt_of(memory, SOURDOUGH_MANUAL))
                if namespace == "team-a":
                    assert bread is not None and bread.sha256 == own_block.sha256
                else:
                    assert bread is None


def test_a_derived_state_behind_a_block_found_by_key_stays_in_its_scope(tmp_path):
    """Two prompts opening with the block part ways after it: the state kept there is the
    scope's own, never found from another scope; the block itself is found from both."""
    deposited(tmp_path / "home")
    agent = GIT_MANUAL + " " + " ".join(f"Rule {i}: answer in one short line." for i in range(12))
    with memory_at(tmp_path / "home") as memory:
        for question in ("first question here?", "second question there?"):
            memory.answer(chat(agent, question), OPTIONS, route=False)
        assert memory.states.flush() == 1
        ((_, tokens, scope),) = memory.states.cache.store.entries()
        assert scope == "" and len(tokens) > len(prompt_of(memory)) - 20
        third = memory.states.cache.lookup(chat_tokens(memory.engine, chat(agent, "a third one?")))
        assert third is not None and third.n_tokens == len(tokens)
        other = memory.states.cache.scoped(namespace_scope("default", "salt"))
        found = other.lookup(chat_tokens(memory.engine, chat(agent, "a third one?")))
        assert found is not None and found.n_tokens < len(tokens)  # the block, cut: not the scope's state


def test_expired_quarantined_and_other_runtimes_blocks_are_not_found(tmp_path, monkeypatch):
    home = tmp_path / "home"
    block = deposited(home)
    with memory_at(home) as memory:
        prompt = prompt_of(memory)
        assert memory.states.cache.lookup(prompt) is not None
        memory.expiry.set("git-squash", "2h")
        assert memory.states.cache.lookup(prompt) is not None
        later = __import__("time").time() + 3 * 3600
        monkeypatch.setattr("skillgraft.store.block_states.time.time", lambda: later)
        assert memory.states.cache.lookup(prompt) is None  # its expiry passed: no catalog change needed
        monkeypatch.undo()
        memory.expiry.set("git-squash", None)
        assert memory.states.cache.lookup(prompt) is not None
        memory.store.mark_quarantined(block)
        assert memory.states.cache.lookup(prompt) is None
    other = BlockStates([BlockStore(home)], "another-runtime")
    assert other.entries() == []


def test_a_swapped_block_file_is_quarantined_by_its_store_and_the_prompt_prefilled(tmp_path, caplog):
    home = tmp_path / "home"
    block = deposited(home)
    bread = deposited(home, SOURDOUGH_MANUAL)
    path = home / "blocks" / block.file_name
    shutil.copyfile(home / "blocks" / bread.file_name, path)  # another block's bytes under its name
    with memory_at(home) as memory, caplog.at_level(logging.WARNING, logger="skillgraft"):
        answer = memory.answer(chat(), OPTIONS, route=False)
        assert answer.note.reused_from == "" and tokens_of(answer) == tokens_of(fresh(tmp_path, chat()))
        assert memory.blocks.get("git-squash").status == "quarantined" and list((home / "quarantine").iterdir())
        assert "quarantined" in caplog.text and "not found by key" in caplog.text
        assert memory.states.cache.lookup(prompt_of(memory)) is None  # listed no more
        assert memory.states.cache.lookup(prompt_of(memory, SOURDOUGH_MANUAL)).sha256 == bread.sha256


def test_refusing_a_blocks_state_never_deletes_the_block(tmp_path, caplog):
    home = tmp_path / "home"
    block = deposited(home)
    with memory_at(home) as memory, caplog.at_level(logging.WARNING, logger="skillgraft"):
        prefixes, prompt = memory.states.cache, prompt_of(memory)
        state = prefixes.lookup(prompt)
        prefixes.refuse(state, BlockIntegrityError("not restorable here"))
        assert "kept, not found by key" in caplog.text
        assert prefixes.lookup(prompt) is None and (home / "blocks" / block.file_name).is_file()
        assert memory.blocks.get("git-squash").status == "ok"
        memory.store.set_block_expiry(block, None)  # a catalog change: found again
        assert prefixes.lookup(prompt).sha256 == block.sha256
        memory.states.cache.store.clear()  # the derived states' eviction never touches a block
        assert prefixes.lookup(prompt).sha256 == block.sha256 and memory.states.cache.store.entries() == []


def test_blocks_are_listed_once_per_catalog_change_and_read_only_when_found(tmp_path, monkeypatch):
    home = tmp_path / "home"
    deposited(home)
    with memory_at(home) as memory:
        rows, loads = [], []
        state_rows, load_state = BlockStore.state_rows, BlockStore.load_state
        monkeypatch.setattr(BlockStore, "state_rows", lambda self, fp: rows.append(fp) or state_rows(self, fp))
        monkeypatch.setattr(BlockStore, "load_state", lambda self, block: loads.append(block.id) or load_state(self, block))
        for question in ("one?", "two?", "three?"):
            memory.states.cache.lookup(chat_tokens(memory.engine, chat("You are a terse shop assistant. " * 5, question)))
        assert len(rows) == 1 and loads == []  # no block begins these prompts: no file opened
        memory.states.cache.lookup(prompt_of(memory))
        assert len(loads) == 1 and len(rows) == 1
        deposited(home, SOURDOUGH_MANUAL)  # another writer: the catalog changed
        assert memory.states.cache.lookup(prompt_of(memory, SOURDOUGH_MANUAL)) is not None and len(rows) == 2


def test_a_crafted_catalog_row_is_left_out_with_a_log_line(tmp_path, caplog):
    home = tmp_path / "home"
    block = deposited(home)
    good = {"id": block.id, "sha256": block.sha256, "tokens": tokens_to_bytes(block.tokens),
            "tokens_sha256": block.tokens_sha256, "n_tokens": block.n_tokens}
    assert row_problem(good) is None
    for change in ({"tokens": good["tokens"][:-1]}, {"tokens": tokens_to_bytes([*block.tokens[:-1], 7])},
                   {"n_tokens": 3}, {"id": "0" * 16}, {"sha256": "x"}, {"tokens": "text"},
                   {"tokens": tokens_to_bytes([-1]), "tokens_sha256": tokens_sha256([-1]), "n_tokens": 1}):
        assert row_problem({**good, **change}) is not None
    store = BlockStore(home)
    with store.catalog.write() as conn:  # token ids that are not what its digest says
        conn.execute("UPDATE blocks SET tokens = ? WHERE id = ?", (tokens_to_bytes([*block.tokens[:-1], 7]), block.id))
    with memory_at(home) as memory, caplog.at_level(logging.WARNING, logger="skillgraft"):
        answer = memory.answer(chat(), OPTIONS, route=False)
        assert answer.note.reused_from == "" and "left out of the key index" in caplog.text
        assert tokens_of(answer) == tokens_of(fresh(tmp_path, chat()))


def test_a_catalog_that_cannot_be_read_keeps_the_blocks_listed_before(tmp_path, monkeypatch, caplog):
    home = tmp_path / "home"
    block = deposited(home)
    with memory_at(home) as memory, caplog.at_level(logging.WARNING, logger="skillgraft"):
        prompt = prompt_of(memory)
        assert memory.states.cache.lookup(prompt).sha256 == block.sha256

        def down(self):
            raise StoreError("the catalog is down")

        monkeypatch.setattr(BlockStore, "catalog_version", down)
        assert memory.states.cache.lookup(prompt).sha256 == block.sha256
        assert "cannot be listed" in caplog.text


@pytest.fixture
def gateway_of(tmp_path):
    made = []

    def make(home) -> TestClient:
        gateway = Gateway(home, FakePool(FakeEngine()), embedder=FakeEmbedder())
        made.append(gateway)
        return TestClient(create_app(gateway, keys=KEYS), base_url="http://127.0.0.1")

    yield make
    for gateway in made:
        gateway.close()


def ask(http, key: str, system: str) -> dict:
    body = {"model": "fake-chatml", "max_tokens": 4, "skillgraft": {"route": False},
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": QUESTION}]}
    response = http.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text
    return response.json()


def test_through_the_gateway_a_block_is_found_by_key_in_its_namespaces_only(tmp_path, gateway_of):
    home = tmp_path / "home"
    base_block = deposited(home)
    own_block = deposited(home, SOURDOUGH_MANUAL, namespace="team-a")
    with gateway_of(home) as http:
        for key in ("key-of-team-a-0001", "key-of-team-b-0002"):
            note = ask(http, key, GIT_MANUAL)["skillgraft"]
            assert (note["reused_from"], note["cache_n"]) == ("derived", base_block.n_tokens)
        mine = ask(http, "key-of-team-a-0001", SOURDOUGH_MANUAL)
        assert (mine["skillgraft"]["reused_from"], mine["skillgraft"]["cache_n"]) == ("derived", own_block.n_tokens)
        theirs = ask(http, "key-of-team-b-0002", SOURDOUGH_MANUAL)
        assert theirs["skillgraft"]["reused_from"] == "" and theirs["skillgraft"]["cache_n"] == 0
        assert theirs["choices"][0]["message"] == mine["choices"][0]["message"]  # the same answer, prefilled


def test_a_shared_stores_blocks_are_found_by_key_on_every_host(tmp_path):
    """Two homes over one catalog and one folder of blocks: a block captured on one host is found
    by key on the other, read through that host's cache."""
    def host(name: str) -> SkillMemory:
        return memory_at(tmp_path / name, catalog=SqliteCatalog(tmp_path / "shared.db"),
                         blocks=f"file://{tmp_path / 'bucket'}")

    with host("a") as a:
        assert a.store.shared
        block = a.add_manual("git-squash", GIT_MANUAL, examples=["squash"])
    with host("b") as b:
        answer = b.answer(chat(), OPTIONS, route=False)
        assert (answer.note.reused_from, answer.note.cache_n) == ("derived", block.n_tokens)
        assert (tmp_path / "b" / "cache" / block.file_name).is_file()
    assert tokens_of(answer) == tokens_of(fresh(tmp_path, chat()))
