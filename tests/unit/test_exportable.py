"""Whatever a memory verb stores, an export carries and an import takes again: texts that a
bundle refuses (NUL bytes, over-long or too many routing keys) are refused before capture."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from skillgraft.core.blocks import solution_text
from skillgraft.bundles.transfer import export_bundle, import_bundle
from skillgraft.core.chat_layout import block_tokens
from skillgraft.errors import BundleError, InputError, StoreError
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

from .conftest import GIT_MANUAL

LONG = "word " * 1_000  # 5,000 characters: one routing key of a bundle holds at most 4,000
MANY = [f"example number {i}" for i in range(300)]  # a bundle block holds at most 256 keys


def _memory(home):
    return SkillMemory(home, engine=FakeEngine(n_ctx=16_384), embedder=FakeEmbedder())


def _solution(**options):
    given = {"question": "What is 2 + 2?", "answer": "4", "verifier": "exact", "expected": "4", **options}
    return lambda memory: memory.add_solution(given.pop("question"), given.pop("answer"), **given)


@pytest.mark.parametrize(
    "verb",
    [
        lambda memory: memory.add_manual("m", "Skill manual: baking.", description="bread\x00"),
        lambda memory: memory.add_manual("m", "Skill manual: baking.", description=LONG),
        lambda memory: memory.add_manual("m", "Skill manual: baking.", description="bread" + " " * 4_000),
        lambda memory: memory.add_manual("m", "Skill manual: baking.", examples=["how to bake\x00"]),
        lambda memory: memory.add_manual("m", "Skill manual: baking.", examples=[LONG]),
        lambda memory: memory.add_manual("m", "Skill manual: baking.", examples=MANY),
        lambda memory: memory.add_manual("m", "Skill manual: baking.", examples="how do I bake bread?"),
        _solution(answer="4\x00", expected="4\x00"),
        _solution(method="print(4)\x00"),
        _solution(question="What is " + " + ".join(["1"] * 1_500) + "?", answer="1500", expected="1500"),
        _solution(examples=MANY),
        lambda memory: memory.blocks.update("git-squash", description=LONG),
        lambda memory: memory.blocks.update("git-squash", examples=["squash\x00"]),
    ],
    ids=[
        "description-nul", "description-long", "description-padded", "example-nul", "example-long", "too-many-examples", "examples-a-string",
        "answer-nul", "method-nul", "question-long", "solution-too-many-examples", "update-description", "update-example",
    ],
)
def test_what_a_bundle_refuses_is_refused_before_capture(tmp_path, verb):
    with _memory(tmp_path / "a") as memory:
        memory.add_manual("git-squash", GIT_MANUAL, description="squashing commits", examples=["squash commits"])
        captures = memory.engine.calls["capture"]
        with pytest.raises(InputError):
            verb(memory)
        assert memory.engine.calls["capture"] == captures
        assert [b.name for b in memory.blocks.list()] == ["git-squash"]
        export_bundle(memory.store, tmp_path / "bundle.tar")
    with _memory(tmp_path / "b") as other:
        report = import_bundle(other, tmp_path / "bundle.tar")
        assert [b.name for b in report.imported] == ["git-squash"] and not report.skipped


def _forged(tmp_path, edit):
    """A bundle of one manual whose manifest row ``edit(row)`` changed."""
    with _memory(tmp_path / "a") as memory:
        memory.add_manual("git-squash", GIT_MANUAL)
        export_bundle(memory.store, tmp_path / "bundle.tar")
    with tarfile.open(tmp_path / "bundle.tar") as tar:
        entries = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    manifest = json.loads(entries.pop("manifest.json"))
    edit(manifest["blocks"][0])
    with tarfile.open(tmp_path / "forged.tar", "w") as tar:
        for name, data in [("manifest.json", json.dumps(manifest).encode()), *entries.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return tmp_path / "forged.tar"


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda row: row["routing_keys"].extend({"kind": "example", "text": t} for t in MANY[:254]), "254 example"),
        (lambda row: row.update(name="0123456789abcdef"), "form of a block id"),
        (lambda row: row.update(routing_keys=[{"kind": "description", "text": f"d {i}"} for i in range(256)]), "257 routing keys"),
    ],
    ids=["too-many-examples", "name-of-an-id", "no-room-for-the-name-key"],
)
def test_a_row_a_verb_would_refuse_is_refused_before_any_deposit(tmp_path, edit, message):
    forged = _forged(tmp_path, edit)
    with _memory(tmp_path / "b") as other:
        with pytest.raises(BundleError, match=message):
            import_bundle(other, forged)
        assert other.blocks.list() == [] and other.engine.calls["capture"] == 0


def test_a_solution_row_whose_question_is_nothing_visible_is_refused(tmp_path):
    engine = FakeEngine(n_ctx=16_384)
    question, answer = "\u200b?", "42"
    source = solution_text(question, answer, None)
    state = engine.capture(block_tokens(engine, source))
    with _memory(tmp_path / "a") as memory:
        memory.add_solution("What is 6 * 7?", answer, verifier="exact", expected=answer)
        export_bundle(memory.store, tmp_path / "bundle.tar")
    with tarfile.open(tmp_path / "bundle.tar") as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
    row = manifest["blocks"][0]
    tokens = block_tokens(engine, source)
    row.update(question=question, description=question, source=source, tokens=tokens, n_tokens=len(tokens),
               sha256=state.sha256, id=state.sha256[:16], file=f"blocks/{state.sha256}.kv", n_bytes=len(state.payload))
    with tarfile.open(tmp_path / "forged.tar", "w") as tar:
        for name, data in [("manifest.json", json.dumps(manifest).encode()), (row["file"], state.payload)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with _memory(tmp_path / "b") as other:
        with pytest.raises(BundleError, match="nothing visible"):
            import_bundle(other, tmp_path / "forged.tar")
        assert other.blocks.list() == []


@pytest.mark.parametrize("path", ["", ".", "/", "..", "a\x00b.tar"])
def test_a_bundle_path_that_names_no_file_is_a_clear_error(tmp_path, monkeypatch, path):
    monkeypatch.chdir(tmp_path)
    with _memory(tmp_path / "a") as memory:
        memory.add_manual("git-squash", GIT_MANUAL)
        with pytest.raises(StoreError, match="cannot write the bundle"):
            export_bundle(memory.store, path)
        if path not in ("/", ".."):
            with pytest.raises(BundleError, match="cannot read the bundle"):
                import_bundle(memory, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
