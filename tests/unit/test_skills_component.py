"""``memory.skills``: the one face of the Agent Skills verbs, and their old names on the memory,
which still work for one release and warn."""

from __future__ import annotations

import pytest

from skillgraft.skills import Skills
from skillgraft.skills.component import RENAMED

from .skill_folders import git_skill, pdf_skill


def test_the_memory_reaches_its_skills_through_one_component(fake_memory, tmp_path):
    assert isinstance(fake_memory.skills, Skills) and fake_memory.skills.memory is fake_memory
    report = fake_memory.skills.import_folders([git_skill(tmp_path / "skills"), pdf_skill(tmp_path / "skills")])
    assert sorted(item.name for item in report.imported) == ["git-squash", "pdf"]
    assert fake_memory.skills.names() == ["git-squash", "pdf"]
    assert [record.name for record in fake_memory.skills.list()] == ["git-squash", "pdf"]
    record = fake_memory.skills.get("pdf")
    assert [v.version for v in fake_memory.skills.versions("pdf")] == [1]
    assert fake_memory.skills.of_block(record.parts[0].block_id) == "pdf"
    assert fake_memory.skills.file("pdf", "SKILL.md") == dict(fake_memory.skills.contents("pdf")[1])["SKILL.md"]
    assert fake_memory.skills.file("pdf", "nothing.md") is None


def test_each_old_name_is_a_new_verb_of_the_component():
    assert all(callable(getattr(Skills, new, None)) for new in RENAMED.values())


def test_the_old_verbs_on_the_memory_warn_and_still_work(fake_memory, tmp_path):
    with pytest.deprecated_call(match=r"SkillMemory.import_skills is deprecated: use memory.skills.import_folders"):
        report = fake_memory.import_skills([git_skill(tmp_path / "skills")])
    assert [item.name for item in report.imported] == ["git-squash"]
    with pytest.deprecated_call(match=r"memory.skills.names"):
        assert fake_memory.skill_names() == ["git-squash"]
    with pytest.deprecated_call(match=r"memory.skills.get"):
        assert fake_memory.skill("git-squash") == fake_memory.skills.get("git-squash")
    with pytest.deprecated_call(match=r"memory.skills.list\(\)"):
        assert [record.name for record in fake_memory.skills()] == ["git-squash"]
    with pytest.deprecated_call(match=r"memory.skills.cache"):
        assert [row.name for row in fake_memory.skill_cache().skills] == ["git-squash"]
    with pytest.deprecated_call(match=r"memory.skills.remove"):
        assert fake_memory.remove_skill("git-squash")
    assert fake_memory.skills.names() == []


def test_a_name_that_is_no_verb_is_still_no_attribute(fake_memory):
    with pytest.raises(AttributeError, match="no attribute 'import_skill'"):
        fake_memory.import_skill
