"""The KV cache behind imported skills: pins that outlive eviction and restarts, the budget
they count against, what is cached by skill (CLI and inspector), warming in the background,
import progress counted in skills, and a text manual's update staying text."""

from __future__ import annotations

import json
import threading

import pytest

from skillgraft.core.states import KVState, sha256_hex
from skillgraft.errors import InputError, PinBudgetError, SkillNotFoundError
from skillgraft.kv.prefixes import state_key
from skillgraft.memory import SkillMemory
from skillgraft.store.derived_states import DerivedStates, derived_usage, encode_state
from skillgraft.testing import FakeEmbedder, FakeEngine

from .skill_folders import git_skill, pdf_skill

APP = "You are a coding agent working in the user's repository. Answer briefly and precisely. " * 2


def _memory(tmp_path, **options) -> SkillMemory:
    memory = SkillMemory(tmp_path / "store", engine=FakeEngine(), embedder=FakeEmbedder(), **options)
    if not memory.store.skill_names():
        memory.skills.import_folders([pdf_skill(tmp_path / "skills"), git_skill(tmp_path / "skills")])
    return memory


def _row(report, name):
    return next(row for row in report.skills if row.name == name)


def _state(fingerprint, tokens, size) -> KVState:
    payload = bytes([len(tokens) % 251]) * size
    return KVState(tuple(tokens), payload, sha256_hex(payload), fingerprint)


def test_pinned_states_outlive_the_lru_and_a_pinned_state_never_takes_the_cache_past_its_budget(tmp_path):
    fingerprint = FakeEngine().fingerprint
    size = len(encode_state(_state(fingerprint, range(1000, 1100), 900), "pinned"))  # every file below: alike
    budget = 3 * size + size // 2
    states = DerivedStates(tmp_path / "d", fingerprint, max_bytes=budget, pinned=frozenset({"pinned"}))

    def put(start, parent, payload=900):
        state = _state(fingerprint, range(start, start + 100), payload)
        key = state_key(fingerprint.id, state.tokens)
        states.put(key, state, parent)
        return key

    kept = put(1000, "pinned")
    others = [put(2000 + 100 * i, "other") for i in range(3)]  # the first is the oldest use, after the pinned one
    assert states.get(others[0]) is None and states.get(others[-1]) is not None  # the oldest unpinned went
    assert states.get(kept) is not None and states.pinned_bytes == size and states.n_bytes <= budget
    second = put(3000, "pinned")
    assert states.get(second) is not None and states.pinned_bytes == 2 * size
    third = put(4000, "pinned", payload=900 + size)  # the pinned ones would outgrow the budget: not kept
    assert states.get(third) is None and states.get(kept) is not None and states.pinned_bytes == 2 * size
    states.pin(frozenset())  # unpinned: the LRU order holds again
    assert states.n_bytes <= budget
    assert {use.parent for use in derived_usage(tmp_path)} <= {"pinned", "other"}


def test_a_pinned_skill_keeps_its_states_through_eviction_and_restarts_and_its_text_is_never_lost(tmp_path):
    with _memory(tmp_path) as memory:
        memory.skills.warm(["pdf"], system=APP)
        pdf = _row(memory.skills.cache(), "pdf")
        assert pdf.states == len(memory.skills.get("pdf").parts) and pdf.n_bytes > 0 and not pdf.pinned
        report = memory.skills.pin("pdf")
        assert _row(report, "pdf").pinned and report.pinned_bytes == pdf.n_bytes
        texts = {part.block_id: memory.blocks.get(part.block_id).source for part in memory.skills.get("pdf").parts}
    budget = pdf.n_bytes + pdf.n_bytes // 2  # room for the pinned states and a little more
    with _memory(tmp_path, derived_bytes=budget) as memory:  # a restart: the pin is in the catalog
        assert memory.store.pinned_skills() == ["pdf"]
        memory.skills.warm(["git-squash"], system=APP)
        memory.skills.warm(["git-squash"], system="Another app prompt, long enough to be worth a state. " * 4)
        cache = memory.skills.cache()
        assert _row(cache, "pdf").n_bytes == pdf.n_bytes and cache.used <= budget  # the others were evicted
        again = memory.skills.warm(["pdf"], system=APP)
        assert not again.warmed and len(again.kept) == len(texts)
        memory.skills.unpin("pdf")
        assert not _row(memory.skills.cache(), "pdf").pinned and memory.store.pinned_skills() == []
    with _memory(tmp_path, derived_bytes=1) as memory:  # a budget too small for anything: every state goes
        memory.states.cache  # opening the cache applies the budget
        assert _row(memory.skills.cache(), "pdf").states == 0
        assert {block_id: memory.blocks.get(block_id).source for block_id in texts} == texts  # the text is the row
        answer = memory.answer([("system", APP), ("user", "merge pdf files with PdfWriter")],
                               block=memory.skills.get("pdf").parts[0].block_id)
        assert answer.note.decision == "graft" and answer.text


def test_a_pin_the_budget_cannot_hold_is_refused_and_a_removed_skill_takes_its_pin(tmp_path):
    with _memory(tmp_path) as memory:
        memory.skills.warm(["pdf"], system=APP)
        size = _row(memory.skills.cache(), "pdf").n_bytes
    with _memory(tmp_path, derived_bytes=size - 1) as memory:
        with pytest.raises(PinBudgetError) as refused:
            memory.skills.pin("pdf")
        assert refused.value.pinned_bytes == size and refused.value.budget == size - 1
        assert memory.store.pinned_skills() == []
        with pytest.raises(SkillNotFoundError):
            memory.skills.pin("no-such-skill")
        memory.skills.pin("git-squash")
        memory.skills.remove("git-squash")
        assert memory.store.pinned_skills() == []


def test_a_background_warm_reports_progress_holds_the_lock_per_part_and_stops_and_resumes(tmp_path):
    with _memory(tmp_path) as memory:
        parts = len(memory.skills.get("pdf").parts)
        with pytest.raises(InputError, match="non-empty"):  # checked before it starts
            memory.skills.warm_in_background(["pdf"], system=" ")
        lock = threading.Lock()
        with lock:  # a chat holds the memory: the warm waits for it between parts
            job = memory.skills.warm_in_background(["pdf"], system=APP, lock=lock)
            assert job.progress == (0, parts) and job.wait(0.2) is None and job.running
            job.stop()
        report = job.wait(10)
        assert report.stopped and report.left == parts and not report.warmed and job.progress == (0, parts)
        job = memory.skills.warm_in_background(["pdf"], system=APP, lock=lock)
        report = job.wait(30)
        assert not report.stopped and len(report.warmed) == parts and job.progress == (parts, parts)
        again = memory.skills.warm_in_background(["pdf"], system=APP).wait(30)
        assert len(again.kept) == parts and not again.warmed


def test_a_failing_background_warm_hands_its_error_to_whoever_waits(tmp_path):
    with _memory(tmp_path) as memory:
        def refuse(*args, **kwargs):
            raise RuntimeError("the context is gone")

        memory._forced = refuse
        job = memory.skills.warm_in_background(["pdf"], system=APP)
        with pytest.raises(RuntimeError, match="context is gone"):
            job.wait(30)
        assert not job.running and isinstance(job.error, RuntimeError)


def test_import_progress_counts_skills_out_of_a_total_given_up_front(tmp_path):
    seen = []
    with SkillMemory(tmp_path / "store", engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        memory.skills.import_folders([pdf_skill(tmp_path / "skills"), git_skill(tmp_path / "skills")],
                             progress=lambda done, total: seen.append((done, total)))
        assert seen == [(0, 2), (1, 2), (2, 2)]  # the total is known before the first skill is read
        seen.clear()
        memory.skills.import_folders([tmp_path / "skills"], progress=lambda done, total: seen.append((done, total)))
        assert seen[-1] == (2, 2)  # unchanged: a folder each


def test_updating_a_text_manual_keeps_it_text_and_drops_its_states(tmp_path):
    with SkillMemory(tmp_path / "store", engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        block = memory.add_manual("notes", "Skill manual: keep release notes short. " * 20, capture=False)
        memory.answer([("system", APP), ("user", "how do I write release notes")], block=block.id)
        memory.answer([("system", APP), ("user", "what belongs in release notes")], block=block.id)
        memory.states.flush()
        held = [use for use in derived_usage(memory.store.home / "derived") if use.parent == block.id]
        calls = dict(memory.engine.calls)
        updated = memory.blocks.update("notes", text="Skill manual: release notes list every change. " * 20)
        assert updated.text_only and updated.name == "notes" and updated.id != block.id
        assert memory.blocks.get("notes").source.startswith("Skill manual: release notes")
        assert dict(memory.engine.calls).get("capture", 0) == calls.get("capture", 0)  # no model ran
        assert held and not [use for use in derived_usage(memory.store.home / "derived") if use.parent == block.id]
        with pytest.raises(InputError, match="no text"):
            memory.blocks.update("notes", text="   ")


def test_skills_pin_unpin_cache_and_warm_with_a_prefix_from_the_cli(runner, home, tmp_path, fake_cli):
    from skillgraft.cli.main import cli

    with _memory(tmp_path):
        pass
    app = tmp_path / "app.txt"
    app.write_text(APP, encoding="utf-8")
    warmed = runner.invoke(cli, ["skills", "warm", "pdf", "--prefix", str(app), "--json"])
    assert warmed.exit_code == 0, warmed.output
    assert json.loads(warmed.stdout)["warmed"]
    pinned = runner.invoke(cli, ["skills", "pin", "pdf", "--json"])
    assert pinned.exit_code == 0, pinned.output
    data = json.loads(pinned.stdout)
    assert data["pinned_bytes"] > 0 and data["budget"] == 2 << 30
    assert [row["name"] for row in data["skills"] if row["pinned"]] == ["pdf"]
    refused = runner.invoke(cli, ["skills", "pin", "git-squash", "--derived-mib", "0"])
    assert refused.exit_code != 0 and "budget" in refused.output
    table = runner.invoke(cli, ["skills", "cache"])
    assert table.exit_code == 0 and "pinned" in table.stdout and "pdf" in table.stdout
    unpinned = runner.invoke(cli, ["skills", "unpin", "pdf", "--json"])
    assert json.loads(unpinned.stdout)["pinned_bytes"] == 0


def test_the_inspector_shows_what_is_cached_by_skill(tmp_path):
    from tests.required import need

    need("fastapi", "skillgraft[serve]")
    from starlette.testclient import TestClient

    from skillgraft.inspector import LocalSource
    from skillgraft.inspector.local import inspector_app

    with _memory(tmp_path) as memory:
        memory.skills.warm(["pdf"], system=APP)
        memory.skills.pin("pdf")
        client = TestClient(inspector_app(LocalSource(memory), allowed_hosts=["testserver"]))
        page = client.get("/ui/cache")
        assert page.status_code == 200 and 'aria-current="page"' in page.text
        rows = page.text.split('<table class="list" id="cached">')[1].split("</table>")[0]
        pdf = next(row for row in rows.split("<tr>") if "<td>pdf</td>" in row)
        assert "pinned" in pdf and "git-squash" in rows and "KV states kept" in page.text


def test_a_read_only_store_older_than_the_pins_shows_none(tmp_path):
    with _memory(tmp_path) as memory:
        memory.skills.pin("pdf")
        memory.store.catalog.execute("DROP TABLE skill_pins")  # as a catalog made before pins were
    with SkillMemory(tmp_path / "store", engine=FakeEngine(), embedder=FakeEmbedder(), read_only=True) as memory:
        assert memory.store.pinned_skills() == [] and not any(row.pinned for row in memory.skills.cache().skills)


def test_a_part_too_short_for_a_state_of_its_own_is_left_out_saying_so_not_blamed_on_pins(tmp_path):
    with SkillMemory(tmp_path / "store", engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        memory.add_manual("short", "Squash with git rebase -i.", description="squash commits", capture=False)
        memory.add_manual("long", "Squash with git rebase -i, then push with --force-with-lease. " * 30,
                          description="squash commits at length", capture=False)
        short = memory.skills.warm(["short"])
        assert not short.warmed and len(short.left_out) == 1
        reason = short.left_out[0]["reason"]
        assert "fewer than the 64" in reason and "pinned" not in reason
        behind_app = memory.skills.warm(["short"], system=APP)  # the app's prompt and the part: long enough
        assert len(behind_app.warmed) == 1 and not behind_app.left_out
        assert len(memory.skills.warm(["long"]).warmed) == 1
