"""What `skillgraft skills import` tells a new user: plain progress lines when stderr is no
terminal (a total given up front, a line each 50 skills or 5 seconds, a final summary), no
model loaded nor announced, and one count of the skills named unlike their folders."""

from __future__ import annotations

import io
import json
import re

import pytest
from click.testing import CliRunner

from skillgraft.cli import common
from skillgraft.cli.common import Activity
from skillgraft.cli.main import cli
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder

from .skill_folders import write_skill

COUNT = 120


@pytest.fixture
def opened(monkeypatch):
    """The CLI's memories on the fake embedder and no engine at all (a model would be loaded
    on first use: the fast suite fails a test that imports the real engine)."""
    memories = []

    def open_fake(cls, home, derived_bytes=None, namespace=None, **options):
        memory = cls(home, embedder=FakeEmbedder(), derived_bytes=derived_bytes, namespace=namespace)
        memories.append(memory)
        return memory

    monkeypatch.setattr(SkillMemory, "open", classmethod(open_fake))
    return memories


def collection(root, count: int = COUNT, renamed: int = 0):
    """``count`` small skills under ``root``, the first ``renamed`` in a folder of another name."""
    for i in range(count):
        name = f"skill-{i:03d}"
        write_skill(root, name, f"Handles task number {i} of the collection.", f"# Task {i}\n\nDo step {i} carefully.\n",
                    folder=f"folder-{i:03d}" if i < renamed else None)
    return root


def run_import(tmp_path, *args):
    result = CliRunner().invoke(cli, ["--home", str(tmp_path / "store"), "skills", "import", *args])
    assert result.exit_code == 0, result.output
    return result


def test_an_import_off_a_terminal_prints_plain_progress_and_a_summary(tmp_path, opened):
    result = run_import(tmp_path, str(collection(tmp_path / "skills")))
    lines = result.stderr.splitlines()
    progress = [line for line in lines if re.fullmatch(r"import skills: [\d,]+/[\d,]+ skills \(\d+ s\)", line)]
    assert progress[0].startswith(f"import skills: 0/{COUNT} skills")  # the total, before the first skill
    assert {f"import skills: {n}/{COUNT} skills" for n in (50, 100)} <= {p.split(" (")[0] for p in progress}
    assert re.fullmatch(rf"import skills: {COUNT}/{COUNT} skills in \d+\.\d s", lines[-1])
    assert all(f"/{COUNT} " in line for line in progress)  # the total never grows
    assert "loading" not in result.stderr and result.stdout.startswith(f"imported {COUNT},")


def test_an_import_loads_no_model(tmp_path, opened):
    run_import(tmp_path, str(collection(tmp_path / "skills", 3)))
    [memory] = opened
    assert memory._engine is None
    from skillgraft.store.block_store import BlockStore

    store = BlockStore(tmp_path / "store")
    assert sorted(store.skill_names()) == ["skill-000", "skill-001", "skill-002"]
    store.close()


def test_names_unlike_their_folders_are_one_warning_unless_verbose(tmp_path, opened):
    root = collection(tmp_path / "skills", 12, renamed=7)
    result = run_import(tmp_path, str(root))
    assert "differs from its folder" not in result.stdout
    warned = [line for line in result.stdout.splitlines() if "differs from the folder" in line]
    assert len(warned) == 1 and warned[0].startswith("warning    7 skills:") and "--verbose" in warned[0]
    verbose = run_import(tmp_path / "v", str(root), "--verbose")
    assert verbose.stdout.count("differs from its folder") == 7 and "differs from the folder" not in verbose.stdout
    data = json.loads(run_import(tmp_path / "j", str(root), "--json").stdout)
    assert sum("differs from its folder" in w for item in data["imported"] for w in item["warnings"]) == 7


def test_plain_lines_come_each_every_units_or_every_seconds(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(common, "time", type("Clock", (), {"monotonic": staticmethod(lambda: clock[0])}))
    piped = io.StringIO()
    with Activity("import skills", unit="skills", stream=piped, every=10, every_s=5.0) as progress:
        for done in range(0, 31):
            clock[0] = done * 0.1  # fast: each 10 skills
            progress(done, 30)
        clock[0] = 20.0
        progress(30, 30)  # the end is the summary's to say
    told = [line.split(" (")[0] for line in piped.getvalue().splitlines()]
    assert told == ["import skills: 0/30 skills", "import skills: 10/30 skills", "import skills: 20/30 skills",
                    "import skills: 30/30 skills in 20.0 s"]
    slow = io.StringIO()
    with Activity("import skills", unit="skills", stream=slow, every=50, every_s=5.0) as progress:
        for done in range(0, 4):
            clock[0] = 20.0 + done * 6  # slow: each 5 seconds
            progress(done, 4)
    assert len(slow.getvalue().splitlines()) == 4 + 1
    quiet = io.StringIO()
    with Activity("capture", unit="tok", stream=quiet) as progress:  # without every: one final line, as before
        progress(1, 2)
        progress(2, 2)
    assert len(quiet.getvalue().splitlines()) == 1
