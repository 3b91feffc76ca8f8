"""Listing or showing imported skills loads no model: a text part's size is its characters until one is loaded."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from skillgraft.cli.main import cli
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

from .skill_folders import git_skill, pdf_skill


@pytest.fixture
def imported(tmp_path):
    """A store holding two imported skills (text parts), written with a fake engine and closed."""
    home = tmp_path / "store"
    pdf_skill(tmp_path / "skills")
    git_skill(tmp_path / "skills")
    with SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        memory.skills.import_folders([tmp_path / "skills"])
        counted = {s.name: s for s in memory.skills.list()}
    return home, counted


@pytest.fixture
def no_engine(monkeypatch):
    """The memories the CLI opens have no engine, and making one fails the test: ``created`` counts the tries."""
    embedder, created = FakeEmbedder(), []

    def refuse(self):
        created.append(self)
        raise AssertionError("a listing loaded the model")

    monkeypatch.setattr(SkillMemory, "engine", property(refuse))
    monkeypatch.setattr(SkillMemory, "open", classmethod(
        lambda cls, home, namespace=None, derived_bytes=None, **options: cls(
            home, embedder=embedder, namespace=namespace, derived_bytes=derived_bytes)))
    return created


def test_a_loaded_engine_counts_the_tokens_of_text_parts(imported):
    _, counted = imported
    pdf = counted["pdf"]
    assert pdf.n_tokens and all(part.n_tokens and part.n_chars for part in pdf.parts)
    assert pdf.as_dict()["n_chars"] == sum(part.n_chars for part in pdf.parts) > 0


def test_skills_list_and_show_load_no_model(imported, no_engine):
    home, counted = imported
    runner = CliRunner()
    listed = runner.invoke(cli, ["--home", str(home), "skills", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {row["name"]: row for row in json.loads(listed.stdout)["rows"]}
    assert set(rows) == {"git-squash", "pdf"}
    for name, row in rows.items():
        assert row["tokens"] is None and row["chars"] == counted[name].n_chars > 0
        assert row["blocks"] == len(counted[name].parts)
    text = runner.invoke(cli, ["--home", str(home), "skills", "list"])
    assert text.exit_code == 0 and f"{counted['pdf'].n_chars:>6} chr" in text.stdout and " tok" not in text.stdout
    shown = runner.invoke(cli, ["--home", str(home), "skills", "show", "pdf", "--json"])
    assert shown.exit_code == 0, shown.output
    parts = json.loads(shown.stdout)["parts"]
    assert [p["n_chars"] for p in parts] == [p.n_chars for p in counted["pdf"].parts]
    assert all(p["n_tokens"] is None for p in parts)
    assert no_engine == []


def test_the_memory_lists_without_an_engine(imported, no_engine):
    home, counted = imported
    with SkillMemory.open(home) as memory:
        records = memory.skills.list()
        assert [(r.name, r.n_chars, r.n_tokens) for r in records] == [
            (name, counted[name].n_chars, None) for name in sorted(counted)]
        assert memory.skills.get("pdf").parts[0].n_chars == counted["pdf"].parts[0].n_chars
    assert no_engine == []
