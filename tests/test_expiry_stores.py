"""Expiry in real catalogs: migration m019 on a real SQLite file and a real PostgreSQL server,
a catalog made before it migrated with its rows kept, and an expired skill or solution hidden
from a second memory opened on the same catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from .unit.skill_folders import git_skill

from skillgraft.errors import ExpiredError
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

MANUAL = "Skill manual: baking sourdough bread. Feed the starter, fold every half hour, proof overnight, bake."
QUERY = "How can I squash my last three commits into one?"
PAST = "2001-01-01T00:00:00Z"


def _open(home: Path, catalog) -> SkillMemory:
    return SkillMemory(home, catalog=catalog, engine=FakeEngine(), embedder=FakeEmbedder())


def _hidden_after_expiry(tmp_path: Path, catalog) -> None:
    with _open(tmp_path / "a", catalog) as a:
        a.skills.import_folders([git_skill(tmp_path / "skills")], expires="30d")
        a.add_manual("sourdough", MANUAL, expires="2030-01-01")
        solution = a.add_solution("What is 17 * 23?", "391", verifier="exact", expected="391")
        catalog_of = a.store.catalog
        applied = {row["name"] for row in catalog_of.query("SELECT name FROM _migrations")}
        assert "m019_record_expiry" in applied
        # A catalog made before m019: its columns gone, the migration not applied; reopening migrates it.
        with catalog_of.write() as conn:
            for table in ("blocks", "skills"):
                conn.execute(f"ALTER TABLE {table} DROP COLUMN expires_at")
            conn.execute("DELETE FROM _migrations WHERE name = 'm019_record_expiry'")
    with _open(tmp_path / "a", catalog) as a:
        assert [b.expires_at for b in a.blocks.list()] == [None] * len(a.blocks.list()) and len(a.blocks.list()) >= 3  # rows kept
        assert a.route(QUERY).decision == "graft" and a.recall("what is 17*23").decision == "exact"
        a.expiry.set("git-squash", PAST)
        a.expiry.set(solution.id, PAST)
        a.expiry.set("sourdough", "2030-01-01T00:00:00Z")
    with _open(tmp_path / ("b" if catalog else "a"), catalog) as b:  # another host of a shared catalog
        assert b.route(QUERY).decision == "abstain"
        assert b.recall("what is 17*23").decision != "exact"
        assert [x.name for x in b.blocks.list()] == ["sourdough"] and b.skills.list() == []
        assert b.blocks.get("sourdough").expires_at == "2030-01-01T00:00:00.000+00:00"
        assert {r.name: r.expired for r in b.expiry.list()} == {"git-squash": True, solution.name: True, "sourdough": False}
        with pytest.raises(ExpiredError):
            b.answer([("user", QUERY)], block="git-squash")
        assert sorted(r.name for r in b.expiry.prune()) == sorted(["git-squash", solution.name])
        assert [x.name for x in b.blocks.list(include_expired=True)] == ["sourdough"]


def test_expiry_in_a_real_sqlite_catalog(tmp_path):
    _hidden_after_expiry(tmp_path, None)


def test_expiry_in_a_real_postgresql_catalog(tmp_path, postgres):
    _hidden_after_expiry(tmp_path, postgres.database())
