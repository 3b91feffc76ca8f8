"""Apps' prefixes by name (``apps add/list/remove``, ``SkillMemory.add_app``): stored in the
catalog of a memory's own store, checked like skill names, and warmed behind exactly as the
same text given as ``--prefix`` would be."""

from __future__ import annotations

import json
import threading

import pytest

from skillgraft.core.chat_layout import skill_prompt
from skillgraft.errors import AppNotFoundError, AppTakenError, InputError, StoreError
from skillgraft.memory import SkillMemory
from skillgraft.memory.app_prefixes import MAX_APP_PREFIX_CHARS
from skillgraft.testing import FakeEmbedder, FakeEngine

from .skill_folders import pdf_skill
from .test_text_skills import APP, OPTIONS, QUESTION


def _memory(tmp_path, **options) -> SkillMemory:
    memory = SkillMemory(tmp_path / "store", engine=FakeEngine(), embedder=FakeEmbedder(), **options)
    if not memory.store.skill_names():
        memory.skills.import_folders(pdf_skill(tmp_path / "skills"))
    return memory


def test_an_app_is_added_listed_replaced_and_removed_and_outlives_a_restart(tmp_path):
    with _memory(tmp_path) as memory:
        added = memory.apps.add("coder", APP)
        assert (added.name, added.system, added.as_dict()["chars"]) == ("coder", APP, len(APP))
        with pytest.raises(AppTakenError, match="'coder'") as taken:
            memory.apps.add("coder", "Another prompt.")
        assert taken.value.name == "coder" and memory.apps.get("coder").system == APP
        memory.apps.add("writer", "You edit prose.")
    with _memory(tmp_path) as memory:
        assert [app.name for app in memory.apps.list()] == ["coder", "writer"]
        assert memory.apps.add("writer", "You edit prose tersely.", replace=True).system == "You edit prose tersely."
        memory.apps.remove("writer")
        assert [app.name for app in memory.apps.list()] == ["coder"]
        with pytest.raises(AppNotFoundError, match="'writer'") as missing:
            memory.apps.remove("writer")
        assert missing.value.name == "writer"
        with pytest.raises(AppNotFoundError):
            memory.apps.get("writer")


@pytest.mark.parametrize("name", ["", " coder", "../coder", "a/b", "co der", "x" * 200, "c\x00der", "beef",
                                  "solution-coder", None, 7])
def test_a_name_that_could_not_name_a_skill_cannot_name_an_app(tmp_path, name):
    with _memory(tmp_path) as memory:
        calls = [lambda: memory.apps.add(name, APP), lambda: memory.apps.get(name), lambda: memory.apps.remove(name)]
        if name is not None:  # app=None: a warm behind no app
            calls.append(lambda: memory.skills.warm(["pdf"], app=name))
        for call in calls:
            with pytest.raises(InputError, match="an app cannot have"):
                call()
        assert memory.apps.list() == []


@pytest.mark.parametrize("system, message", [
    ("", "non-empty"), ("   \n", "non-empty"), ("You are\x00 root", "NUL"),
    (None, "must be text"), (b"bytes", "must be text"),
    ("x" * (MAX_APP_PREFIX_CHARS + 1), f"over the {MAX_APP_PREFIX_CHARS}"),
])
def test_an_apps_prefix_is_real_text_of_a_bounded_size(tmp_path, system, message):
    with _memory(tmp_path) as memory:
        with pytest.raises(InputError, match=message):
            memory.apps.add("coder", system)
        assert memory.apps.list() == []


def test_a_read_only_store_lists_apps_and_refuses_to_add_one(tmp_path):
    from skillgraft.store.block_store import BlockStore

    with _memory(tmp_path) as memory:
        memory.apps.add("coder", APP)
    store = BlockStore(tmp_path / "store", read_only=True)
    try:
        assert [row["name"] for row in store.app_prefix_rows()] == ["coder"]
        with pytest.raises(StoreError, match="read-only"):
            store.put_app_prefix("writer", "You edit prose.")
    finally:
        store.close()


def test_warming_behind_an_app_is_warming_behind_its_text_and_serves_its_chats(tmp_path):
    with _memory(tmp_path) as memory:
        memory.apps.add("coder", APP)
        report = memory.skills.warm(["pdf"], app="coder")
        parts = memory.skills.get("pdf").parts
        assert len(report.warmed) == len(parts) and not report.left_out
        for warmed in report.warmed:  # the states a chat behind this system prompt looks up
            tokens, mark = skill_prompt(memory.engine, memory.blocks.get(warmed["block_id"]).source,
                                        [("system", APP), ("user", QUESTION)])
            assert warmed["tokens"] == mark and memory.states.cache.holds(tokens[:mark])
        same_text = memory.skills.warm(["pdf"], system=APP)
        assert not same_text.warmed and len(same_text.kept) == len(parts)  # the very same tokens
        block = memory.blocks.get(report.warmed[0]["block_id"])
        answer = memory.answer([("system", APP), ("user", QUESTION)], OPTIONS, block=block)
        assert answer.note.reused_from == "derived" and answer.note.cache_n >= report.warmed[0]["tokens"]


def test_a_warm_names_an_app_or_gives_a_prompt_not_both_and_a_missing_app_stops_it_before_it_runs(tmp_path):
    with _memory(tmp_path) as memory:
        memory.apps.add("coder", APP)
        calls = dict(memory.engine.calls)
        with pytest.raises(InputError, match="not both"):
            memory.skills.warm(["pdf"], system=APP, app="coder")
        with pytest.raises(AppNotFoundError):
            memory.skills.warm(["pdf"], app="reviewer")
        with pytest.raises(AppNotFoundError):
            memory.skills.warm_in_background(["pdf"], app="reviewer")
        assert dict(memory.engine.calls) == calls  # nothing ran
        job = memory.skills.warm_in_background(["pdf"], app="coder", lock=threading.Lock())
        report = job.wait(30)
        assert len(report.warmed) == len(memory.skills.get("pdf").parts)


def test_a_namespaces_apps_live_in_its_own_store(tmp_path):
    with _memory(tmp_path) as base:
        base.apps.add("coder", APP)
    with SkillMemory(tmp_path / "store", namespace="team-a", engine=FakeEngine(), embedder=FakeEmbedder()) as team:
        assert team.apps.list() == []
        team.apps.add("coder", "You review the team's pull requests.")
        assert team.apps.get("coder").system.startswith("You review")
    with _memory(tmp_path) as base:
        assert base.apps.get("coder").system == APP


def test_apps_from_the_cli_and_a_warm_behind_one(runner, home, tmp_path, fake_cli):
    from skillgraft.cli.main import cli

    with _memory(tmp_path):
        pass
    prompt = tmp_path / "app.txt"
    prompt.write_text(APP, encoding="utf-8")
    added = runner.invoke(cli, ["apps", "add", "coder", "--prefix", str(prompt), "--json"])
    assert added.exit_code == 0, added.output
    assert json.loads(added.stdout)["chars"] == len(APP)
    taken = runner.invoke(cli, ["apps", "add", "coder", "--prefix", str(prompt)])
    assert taken.exit_code == 1 and "stored already" in taken.stderr
    listed = runner.invoke(cli, ["apps", "list", "--json"])
    assert [row["name"] for row in json.loads(listed.stdout)["rows"]] == ["coder"]
    assert "coder" in runner.invoke(cli, ["apps", "list"]).stdout
    team = runner.invoke(cli, ["apps", "list", "--namespace", "team-a", "--json"])
    assert team.exit_code == 0 and json.loads(team.stdout)["rows"] == []  # a namespace's apps are its own
    warmed = runner.invoke(cli, ["skills", "warm", "pdf", "--app", "coder", "--json"])
    assert warmed.exit_code == 0, warmed.output
    assert json.loads(warmed.stdout)["warmed"]
    again = runner.invoke(cli, ["skills", "warm", "pdf", "--prefix", str(prompt), "--json"])
    assert not json.loads(again.stdout)["warmed"] and json.loads(again.stdout)["kept"]
    both = runner.invoke(cli, ["skills", "warm", "pdf", "--prefix", str(prompt), "--app", "coder"])
    assert both.exit_code == 1 and "not both" in both.stderr
    binary = tmp_path / "app.bin"
    binary.write_bytes(b"\xff\xfe prompt")
    for args in (["apps", "add", "reviewer", "--prefix", str(binary)],
                 ["skills", "warm", "pdf", "--prefix", str(binary)]):
        refused = runner.invoke(cli, args)
        assert refused.exit_code == 1 and "not UTF-8" in refused.stderr, refused.output
    hostile = runner.invoke(cli, ["apps", "add", "../etc", "--prefix", str(prompt)])
    assert hostile.exit_code == 1 and "an app cannot have" in hostile.stderr
    removed = runner.invoke(cli, ["apps", "remove", "coder", "--json"])
    assert json.loads(removed.stdout) == {"removed": "coder"}
    missing = runner.invoke(cli, ["skills", "warm", "pdf", "--app", "coder"])
    assert missing.exit_code == 1 and "no app 'coder'" in missing.stderr
