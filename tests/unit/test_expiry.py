"""Expiry on the fakes: what an expiry may be, and what an expired skill or solution is hidden from."""

from __future__ import annotations

import json
import time
import types
from datetime import datetime, timedelta, timezone

import pytest

from skillgraft.core.expiry import expired, expiry_stamp, expiry_time
from skillgraft.errors import ExpiredError, ExpiryError, InputError

from .conftest import ANSWER, GIT_QUERY, QUESTION
from .skill_folders import git_skill

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
PAST = "2001-01-01T00:00:00Z"


@pytest.mark.parametrize("given, expected", [
    ("30d", NOW + timedelta(days=30)),
    ("12h", NOW + timedelta(hours=12)),
    (" 90 m ", NOW + timedelta(minutes=90)),
    ("2W", NOW + timedelta(weeks=2)),
    ("2027-01-31", datetime(2027, 1, 31, tzinfo=timezone.utc)),
    ("2027-01-31T12:00:00Z", datetime(2027, 1, 31, 12, tzinfo=timezone.utc)),
    ("2027-01-31T14:00:00+02:00", datetime(2027, 1, 31, 12, tzinfo=timezone.utc)),
    (timedelta(hours=1), NOW + timedelta(hours=1)),
    (datetime(2027, 1, 31), datetime(2027, 1, 31, tzinfo=timezone.utc)),
    (PAST, datetime(2001, 1, 1, tzinfo=timezone.utc)),  # in the past: expires at once
])
def test_an_expiry_is_a_time_or_a_duration_from_now(given, expected):
    assert expiry_time(given, now=NOW) == expected


@pytest.mark.parametrize("given", [
    "", "soon", "30", "30y", "-5d", "0d", "1999-12-31", "2227-01-01", "99999d", "1" * 65, "2027-13-01", "3d\x00",
    "２０２７-01-01", timedelta(0), timedelta(days=-1), timedelta(days=40000), 12, 1.5, True, None, b"30d",
])
def test_a_malformed_or_absurd_expiry_is_a_clear_error(given):
    with pytest.raises(ExpiryError) as caught:
        expiry_time(given, now=NOW)
    assert caught.value.value is not None or given is None


@pytest.mark.parametrize("given, said", [("0d", "'0d'"), (" 0h ", "'0h'"), (timedelta(0), "'0s'"),
                                         ("40000d", "'40000d'"), (timedelta(days=-1), "'-86400s'")])
def test_a_duration_refused_is_named_as_it_was_given(given, said):
    with pytest.raises(ExpiryError, match=f"^expiry {said} is "):
        expiry_time(given, now=NOW)


def test_stamps_compare_in_time_order_and_an_unreadable_one_counts_as_passed():
    stamp = expiry_stamp(expiry_time("2027-01-31T14:00:00+02:00"))
    assert stamp == "2027-01-31T12:00:00.000+00:00"
    assert expired(stamp, now=datetime(2027, 1, 31, 12, tzinfo=timezone.utc).timestamp())
    assert not expired(stamp, now=datetime(2027, 1, 31, 11, 59, tzinfo=timezone.utc).timestamp())
    assert not expired(None) and expired("garbage")


def test_an_expired_manual_is_hidden_never_deleted(fake_stocked):
    memory = fake_stocked
    assert memory.route(GIT_QUERY).block.name == "git-squash"
    record = memory.expiry.set("git-squash", PAST)
    assert (record.kind, record.expired, record.expires_at) == ("manual", True, "2001-01-01T00:00:00.000+00:00")
    assert memory.route(GIT_QUERY).block_id != record.block_id
    assert "git-squash" not in [b.name for b in memory.blocks.list()]
    listed = {b.name: b for b in memory.blocks.list(include_expired=True)}
    assert listed["git-squash"].expires_at == record.expires_at  # kept, shown with its expiry
    assert memory.generate(GIT_QUERY).block_id != record.block_id
    with pytest.raises(ExpiredError) as caught:
        memory.answer([("user", GIT_QUERY)], block="git-squash")
    assert caught.value.name == "git-squash" and caught.value.expires_at == record.expires_at
    assert memory.expiry.set("git-squash", None).expires_at is None  # renewed: routed again
    assert memory.route(GIT_QUERY).block.name == "git-squash"


def test_an_expiry_passing_takes_effect_at_route_time_without_a_rebuild(fake_stocked, monkeypatch):
    memory = fake_stocked
    memory.add_manual("git-squash-2", "Skill manual: squash commits with git rebase and push with force.",
                      expires="1h")
    memory.blocks.delete("git-squash")
    assert memory.route(GIT_QUERY).block.name == "git-squash-2"
    index = memory.router.index()
    later = time.time() + 7200
    monkeypatch.setattr("skillgraft.core.expiry.time", types.SimpleNamespace(time=lambda: later))
    assert memory.route(GIT_QUERY).decision == "abstain"
    assert memory.router.index() is index  # the same index: only the candidates' expiries were read


def test_an_expired_solution_answers_nothing(fake_stocked):
    memory = fake_stocked
    assert memory.recall(QUESTION).decision == "exact"
    solution = memory.blocks.list("solution")[0]
    memory.expiry.set(solution.id, PAST)
    assert memory.recall(QUESTION).decision != "exact"
    assert memory.blocks.list("solution") == []
    again = memory.add_solution(QUESTION, ANSWER, verifier="exact", expected=ANSWER, expires="30d")
    assert again.id == solution.id and not expired(again.expires_at)  # a deposit sets it again
    assert memory.recall(QUESTION).decision == "exact"


def test_an_expired_imported_skill_is_hidden_and_pruned_only_when_asked(fake_memory, tmp_path):
    memory = fake_memory
    memory.skills.import_folders([git_skill(tmp_path / "skills")], expires="30d")
    (record,) = memory.skills.list()
    assert record.expires_at is not None and not record.expired
    assert memory.route(GIT_QUERY).decision == "graft"
    part = memory.skills.get("git-squash").parts[0].block_id
    with pytest.raises(InputError, match="part of skill"):
        memory.expiry.set(part, PAST)
    memory.expiry.set("git-squash", PAST)
    assert memory.skills.list() == [] and memory.blocks.list() == []
    assert memory.skills.list(include_expired=True)[0].as_dict()["expired"] is True
    assert memory.route(GIT_QUERY).decision == "abstain"
    with pytest.raises(ExpiredError):
        memory.answer([("user", GIT_QUERY)], block=part)
    memory.add_manual("kept", "Skill manual: a manual that never expires.")
    assert [r.name for r in memory.expiry.prune()] == ["git-squash"]
    assert memory.skills.list(include_expired=True) == [] and [b.name for b in memory.blocks.list(include_expired=True)] == ["kept"]


def test_a_bad_expiry_is_refused_before_anything_is_captured(fake_memory, fake_engine):
    captures = fake_engine.calls["capture"]
    with pytest.raises(ExpiryError):
        fake_memory.add_manual("git", "Skill manual: git things.", expires="someday")
    with pytest.raises(ExpiryError):
        fake_memory.add_solution(QUESTION, ANSWER, verifier="exact", expected=ANSWER, expires="1000000d")
    assert fake_engine.calls["capture"] == captures and fake_memory.blocks.list(include_expired=True) == []


def test_the_cli_sets_lists_and_prunes_expiries(runner, home, tmp_path, monkeypatch):
    from skillgraft.cli.main import cli
    from skillgraft.memory import SkillMemory
    from skillgraft.testing import FakeEmbedder, FakeEngine

    engine, embedder = FakeEngine(), FakeEmbedder()
    monkeypatch.setattr(SkillMemory, "open", classmethod(
        lambda cls, home_, **o: cls(home_, engine=engine, embedder=embedder)))
    manual = tmp_path / "manual.txt"
    manual.write_text("Skill manual: squash commits with git rebase -i.", encoding="utf-8")

    def run(*args):
        result = runner.invoke(cli, [*args])
        return result.exit_code, result.stdout

    code, out = run("skills", "import", str(git_skill(tmp_path / "skills")), "--expires", "30d", "--json")
    assert code == 0, out
    assert run("add-manual", "notes", str(manual), "--expires", "yesterday")[0] == 1  # refused, nothing stored
    code, out = run("add-manual", "notes", str(manual), "--expires", "2030-01-01", "--json")
    assert code == 0 and json.loads(out)["expires_at"] == "2030-01-01T00:00:00.000+00:00", out
    code, out = run("skills", "list", "--json")
    (row,) = json.loads(out)["rows"]
    assert row["name"] == "git-squash" and row["expires_at"] and not row["expired"]
    assert run("skills", "expire", "git-squash")[0] == 2  # --at or --never is asked for
    code, out = run("skills", "expire", "git-squash", "--at", PAST, "--json")
    assert code == 0 and json.loads(out)["expired"] is True, out
    assert json.loads(run("skills", "list", "--json")[1])["rows"] == []
    code, out = run("skills", "list", "--all")
    assert "git-squash" in out and "(expired)" in out
    assert "notes" in run("list")[1] and "git-squash" not in run("list")[1]
    assert "(expired)" in run("list", "--all")[1]
    code, out = run("skills", "expire", "notes", "--never", "--json")
    assert code == 0 and json.loads(out)["expires_at"] is None
    code, out = run("skills", "prune", "--json")
    assert [r["name"] for r in json.loads(out)["removed"]] == ["git-squash"]
    assert "git-squash" not in run("skills", "list", "--all")[1] and "notes" in run("list")[1]


def test_a_bundle_carries_a_blocks_expiry_and_refuses_a_bad_one(fake_stocked, tmp_path, fake_embedder):
    from skillgraft.bundles.transfer import export_bundle, import_bundle
    from skillgraft.errors import BundleError
    from skillgraft.memory import SkillMemory
    from skillgraft.testing import FakeEngine

    from .test_exportable import _forged

    fake_stocked.expiry.set("git-squash", PAST)
    export_bundle(fake_stocked.store, tmp_path / "bundle.tar")
    with SkillMemory(tmp_path / "other", engine=FakeEngine(), embedder=fake_embedder) as other:
        import_bundle(other, tmp_path / "bundle.tar")
        assert other.blocks.get("git-squash").expires_at == "2001-01-01T00:00:00.000+00:00"  # still hidden there
        assert "git-squash" not in [b.name for b in other.blocks.list()]
    forged = _forged(tmp_path / "forged", lambda row: row.update(expires_at="someday"))
    with SkillMemory(tmp_path / "third", engine=FakeEngine(), embedder=fake_embedder) as third:
        with pytest.raises(BundleError, match="expires_at|expiry"):
            import_bundle(third, forged)
        assert third.blocks.list(include_expired=True) == []
