"""A skill's files are stored once per catalog, by their SHA-256: versions and skills share them,
and they go with the last version that refers to them (a real SQLite catalog)."""

from __future__ import annotations

import hashlib
import os
import sqlite3

import pytest

from skillgraft.errors import StoreError

from .skill_folders import write_skill

BIG = 1536 << 10  # a binary file kept with the skill, not captured


def _stored(memory) -> tuple[int, int]:
    """(bytes of file data the catalog holds, pages of the catalog in use)."""
    memory.store.catalog.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with sqlite3.connect(memory.store.home / "catalog.db") as db:
        data = db.execute("SELECT COALESCE(SUM(LENGTH(data)), 0) FROM skill_files").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0] - db.execute("PRAGMA freelist_count").fetchone()[0]
        size = db.execute("PRAGMA page_size").fetchone()[0]
    return data, pages * size


def _import(memory, root, name: str, body: str, files: dict) -> int:
    report = memory.skills.import_folders([write_skill(root, name, f"The {name} skill.", body, files=files)])
    assert not report.skipped, report.skipped
    return (report.imported[0].version if report.imported else report.unchanged[0]["version"])


def test_versions_share_their_files_and_the_last_one_frees_them(fake_memory, tmp_path):
    blob = os.urandom(BIG)
    files = {"assets/model.bin": blob, "references/notes.md": "# Notes\n\nKeep the ledger short.\n"}
    first = _import(fake_memory, tmp_path / "v1", "ledger", "# Ledger\n\nWrite every entry once.\n", files)
    data_1, used_1 = _stored(fake_memory)
    body_2 = "# Ledger\n\nWrite every entry once, and sign it.\n"
    second = _import(fake_memory, tmp_path / "v2", "ledger", body_2, files)
    data_2, used_2 = _stored(fake_memory)
    assert (first, second) == (1, 2)
    assert data_2 - data_1 == len((tmp_path / "v2" / "ledger" / "SKILL.md").read_bytes())  # only the changed file
    assert used_2 - used_1 < BIG // 8  # the catalog grew by about that file, not by the skill
    other = _import(fake_memory, tmp_path / "v3", "archive", "# Archive\n\nBox the old ledgers.\n", {"assets/model.bin": blob})
    assert other == 1 and _stored(fake_memory)[0] - data_2 < 1024  # another skill shares it too

    fake_memory.skills.remove("ledger", 1)  # the version that held the bytes
    _, files_2 = fake_memory.skills.contents("ledger", 2)
    assert dict(files_2)["assets/model.bin"] == blob and _stored(fake_memory)[0] >= BIG
    fake_memory.skills.remove("archive")
    assert dict(fake_memory.skills.contents("ledger", 2)[1])["assets/model.bin"] == blob
    held, used_held = _stored(fake_memory)
    fake_memory.skills.remove("ledger")
    freed, used_freed = _stored(fake_memory)
    assert held >= BIG and freed == 0 and used_held - used_freed >= BIG


def test_an_address_is_the_bytes_own_hash_whatever_the_caller_says(fake_memory):
    store = fake_memory.store
    one, other = b"first file\n", b"other file\n"
    lying = [("SKILL.md", len(one), hashlib.sha256(one).hexdigest(), one),
             ("b.md", len(other), hashlib.sha256(one).hexdigest(), other)]  # claims the first file's address
    with pytest.raises(StoreError, match="b.md"):
        store.add_skill_version("forged", 1, folder="", manifest_sha256="0" * 64, description="d", record={},
                                files=lying, parts=[])
    assert "forged" not in store.skill_names()
    same = [("a.md", len(one), hashlib.sha256(one).hexdigest(), one), ("b.md", len(one), hashlib.sha256(one).hexdigest(), one),
            ("c.md", len(other), hashlib.sha256(other).hexdigest(), other)]
    store.add_skill_version("twins", 1, folder="", manifest_sha256="0" * 64, description="d", record={}, files=same,
                            parts=[])
    assert {f["path"]: f["data"] for f in store.skill_files("twins", 1, with_data=True)} == {
        "a.md": one, "b.md": one, "c.md": other}


def test_bytes_that_do_not_match_their_address_are_never_served(fake_memory):
    store = fake_memory.store
    data = b"the real bytes\n"
    row = ("SKILL.md", len(data), hashlib.sha256(data).hexdigest(), data)
    for version in (1, 2):
        store.add_skill_version("kept", version, folder="", manifest_sha256="0" * 64, description="d", record={},
                                files=[row], parts=[])
    with store.catalog.write() as conn:  # someone with the catalog swaps the bytes the versions share
        conn.execute("UPDATE skill_files SET data = ? WHERE data IS NOT NULL", (b"forged bytes!!\n",))
    for version in (1, 2):
        with pytest.raises(StoreError, match="no bytes of"):
            store.skill_files("kept", version, with_data=True)
    # A new version with the same file does not lean on the forged row: it stores its own bytes.
    store.add_skill_version("kept", 3, folder="", manifest_sha256="0" * 64, description="d", record={},
                            files=[row], parts=[])
    assert [f["data"] for f in store.skill_files("kept", 1, with_data=True)] == [data]


def test_one_file_of_a_version_is_read_alone(fake_memory, tmp_path):
    blob = os.urandom(BIG)
    version = _import(fake_memory, tmp_path / "v1", "ledger", "# Ledger\n\nWrite every entry once.\n",
                      {"assets/model.bin": blob, "references/notes.md": "# Notes\n"})
    read = []
    file_bytes = fake_memory.store._file_bytes
    fake_memory.store._file_bytes = lambda row: read.append(row["path"]) or file_bytes(row)
    one = fake_memory.store.skill_files("ledger", version, with_data=True, path="references/notes.md")
    assert [(f["path"], f["data"]) for f in one] == [("references/notes.md", b"# Notes\n")]
    assert read == ["references/notes.md"]  # the 1.5 MiB file is not read to serve another
    assert fake_memory.store.skill_files("ledger", version, path="../SKILL.md") == []
    assert [f["path"] for f in fake_memory.store.skill_files("ledger", version)] == \
        ["SKILL.md", "assets/model.bin", "references/notes.md"]
