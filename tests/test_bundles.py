import io
import json
import tarfile

import pytest

from skillgraft.bundles.transfer import ImportReport, export_bundle, import_bundle
from skillgraft.errors import BundleError
from skillgraft.memory import SkillMemory
from tests.conftest import GIT_MANUAL


def test_export_import_is_byte_identical_and_idempotent(stocked, tmp_path, embedder):
    bundle = tmp_path / "skills.tar"
    assert export_bundle(stocked.store, bundle).blocks == 3
    with tarfile.open(bundle) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    # A manual's sentence keys are derived from its text on import, never carried in the bundle.
    assert {k["kind"] for row in manifest["blocks"] for k in row["routing_keys"]} <= {"name", "description", "example"}
    with SkillMemory(tmp_path / "second", engine=stocked.engine, embedder=embedder) as other:
        report = import_bundle(other, bundle)
        assert isinstance(report, ImportReport) and report.blocks == 3 and report.as_dict()["blocks"] == 3
        assert {b.how.split(";")[-1].strip() for b in report.imported} == {"payload recomputed from its source text"}
        for block in stocked.store.blocks():
            copy = other.store.get(block.id)
            local_only = {"status", "created_at", "verify_seconds"}
            assert copy.model_dump(exclude=local_only) == block.model_dump(exclude=local_only)
            assert other.store.path_of(copy).read_bytes() == stocked.store.path_of(block).read_bytes()
            keys = {(k["kind"], k["text"]) for k in other.store.routing_keys(copy.id)}
            assert keys == {(k["kind"], k["text"]) for k in stocked.store.routing_keys(block.id)}
            assert any(kind == "manual" for kind, _ in keys) == (block.kind == "manual")
        again = import_bundle(other, bundle)
        assert again.blocks == 0 and {s.reason for s in again.skipped} == {"already in the store"}
        assert other.recall("what is 17*23").decision == "exact"
        assert other.route("how do I squash my last commits?").block.name == "git-squash"
        assert other.blocks.check()["ok"]


def test_trust_payloads_skips_only_the_recompute(stocked, tmp_path, embedder):
    bundle = tmp_path / "skills.tar"
    export_bundle(stocked.store, bundle)
    with SkillMemory(tmp_path / "second", engine=stocked.engine, embedder=embedder) as other:
        report = import_bundle(other, bundle, trust_payloads=True)
        assert report.blocks == 3
        manuals = [b for b in report.imported if b.kind == "manual"]
        assert all("trusted" in b.how for b in manuals)
        solution = next(b for b in report.imported if b.kind == "solution")
        assert "re-verified" in solution.how


def test_progress_counts_checks_then_deposits(stocked, tmp_path, embedder):
    bundle = tmp_path / "skills.tar"
    export_bundle(stocked.store, bundle)
    calls = []
    with SkillMemory(tmp_path / "second", engine=stocked.engine, embedder=embedder) as other:
        import_bundle(other, bundle, progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (6, 6) and calls[0] == (1, 3)


def write_tar(path, entries):
    with tarfile.open(path, "w") as tar:
        for name, data, kind in entries:
            info = tarfile.TarInfo(name)
            if kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


MANIFEST = json.dumps({"format": "skillgraft-bundle", "version": 1, "fingerprints": {}, "blocks": []}).encode()


@pytest.mark.parametrize(
    "entries, message",
    [
        ([("manifest.json", MANIFEST, "file"), ("../escape.kv", b"x", "file")], "unsafe path"),
        ([("manifest.json", MANIFEST, "file"), ("/etc/evil", b"x", "file")], "unsafe path"),
        ([("manifest.json", MANIFEST, "file"), ("blocks/" + "a" * 64 + ".kv", b"", "link")], "not a regular file"),
        ([("blocks/" + "a" * 64 + ".kv", b"x", "file")], "no manifest"),
        ([("manifest.json", b"{not json", "file")], "not valid JSON"),
    ],
)
def test_unsafe_or_malformed_bundles_are_refused(memory, tmp_path, entries, message):
    bundle = tmp_path / "bad.tar"
    write_tar(bundle, entries)
    with pytest.raises(BundleError, match=message):
        import_bundle(memory, bundle)
    assert len(memory.store) == 0


def test_tampered_payload_is_refused(stocked, tmp_path, embedder):
    bundle = tmp_path / "skills.tar"
    export_bundle(stocked.store, bundle)
    tampered = tmp_path / "tampered.tar"
    with tarfile.open(bundle) as source, tarfile.open(tampered, "w") as target:
        for member in source.getmembers():
            data = bytearray(source.extractfile(member).read())
            if member.name.endswith(".kv"):
                data[100] ^= 1
            target.addfile(member, io.BytesIO(bytes(data)))
    with SkillMemory(tmp_path / "second", engine=stocked.engine, embedder=embedder) as other:
        with pytest.raises(BundleError, match="SHA-256"):
            import_bundle(other, tampered)
        assert len(other.store) == 0


@pytest.mark.sandbox
def test_foreign_blocks_are_skipped_recaptured_or_kept_as_asked(memory, tmp_path, gemma3, embedder):
    """Blocks of another runtime: skipped; with allow_foreign re-captured here from their
    source; with allow_foreign and trust_payloads kept as they are."""
    bundle = tmp_path / "foreign.tar"
    with SkillMemory(tmp_path / "gemma", engine=gemma3, embedder=embedder) as foreign:
        made = foreign.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
        foreign.add_solution("What is 6 * 7?", "42", method="print(6 * 7)", verifier="python")
        export_bundle(foreign.store, bundle)

    skipped = import_bundle(memory, bundle)
    assert skipped.blocks == 0 and all("another runtime" in s.reason for s in skipped.skipped)

    with SkillMemory(tmp_path / "recaptured", engine=memory.engine, embedder=embedder) as other:
        report = import_bundle(other, bundle, allow_foreign=True)
        assert report.blocks == 2 and all("re-captured under this runtime" in b.how for b in report.imported)
        manual = other.store.get("git-squash")
        assert manual.id != made.id and manual.fingerprint_id == memory.engine.fingerprint.id
        assert other.route("how do I squash my last commits?").block.id == manual.id
        assert other.recall("What is 6 * 7?").block.answer == "42"

    with SkillMemory(tmp_path / "kept", engine=memory.engine, embedder=embedder) as other:
        report = import_bundle(other, bundle, allow_foreign=True, trust_payloads=True)
        kept = other.store.get("git-squash")
        assert kept.id == made.id and kept.fingerprint_id == gemma3.fingerprint.id
        assert "another runtime" in next(b.how for b in report.imported if b.kind == "manual")
        assert other.store.load_state(kept).state.sha256 == made.sha256


def test_cli_import_reports_each_block_and_refuses_a_bad_bundle(runner, stocked, tmp_path, monkeypatch):
    from skillgraft.cli.main import cli

    bundle = tmp_path / "skills.tar"
    exported = runner.invoke(cli, ["--home", str(stocked.store.home), "export", str(bundle), "--json"])
    assert exported.exit_code == 0 and json.loads(exported.stdout)["blocks"] == 3
    monkeypatch.setenv("SKILLGRAFT_HOME", str(tmp_path / "cli-store"))
    result = runner.invoke(cli, ["import", str(bundle), "--trust-payloads", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["blocks"] == 3 and report["skipped"] == []
    assert {"block_id", "bundle_id", "name", "kind", "how"} <= set(report["imported"][0])
    again = runner.invoke(cli, ["import", str(bundle)])
    assert again.exit_code == 0 and "skipped 3" in again.stdout and "already in the store" in again.stdout
    bad = tmp_path / "bad.tar"
    write_tar(bad, [("manifest.json", b"[1]", "file")])
    refused = runner.invoke(cli, ["import", str(bad)])
    assert refused.exit_code == 1 and "BundleError" not in refused.stderr
    assert refused.stderr.startswith("Error: ") and len(refused.stderr.strip().splitlines()) == 1
