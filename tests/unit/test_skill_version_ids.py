"""A skill's version numbers (and so its version ids) are never given twice: not after the
latest version is removed, not after the whole skill is removed and imported again."""

from __future__ import annotations

from .skill_folders import write_skill


def test_a_removed_versions_number_is_never_given_again(fake_memory, tmp_path):
    def import_body(body: str) -> int:
        folder = write_skill(tmp_path / body.split()[0], "note-taking", "Taking notes.", body)
        (stored,) = fake_memory.skills.import_folders(folder).imported
        return stored["version"] if isinstance(stored, dict) else stored.version

    assert import_body("first body\n") == 1 and import_body("second body\n") == 2
    fake_memory.skills.remove("note-taking", 2)
    assert import_body("third body\n") == 3  # not 2 again
    fake_memory.skills.remove("note-taking")
    assert "note-taking" not in fake_memory.store.skill_names()
    assert import_body("fourth body\n") == 4
