import io
import json
import tarfile

import pytest

from skillgraft.bundles import export_bundle, import_bundle
from skillgraft.errors import BundleError
from skillgraft.memory import SkillMemory


def test_export_import_is_byte_identical_and_idempotent(stocked, tmp_path, embedder):
    bundle = tmp_path / "skills.tar"
    assert export_bundle(stocked.store, bundle)["blocks"] == 3
    with SkillMemory(tmp_path / "second", engine=stocked.engine, embedder=embedder) as other:
        report = import_bundle(other.store, bundle, other.engine.fingerprint)
        assert report["blocks"] == 3
        for block in stocked.store.blocks():
            copy = other.store.get(block.id)
            assert copy.model_dump(exclude={"status"}) == block.model_dump(exclude={"status"})
            assert other.store.path_of(copy).read_bytes() == stocked.store.path_of(block).read_bytes()
            assert len(other.store.routing_keys(copy.id)) == len(stocked.store.routing_keys(block.id))
        assert import_bundle(other.store, bundle, other.engine.fingerprint)["blocks"] == 0
        assert other.recall("what is 17*23").decision == "exact"
        assert other.route("how do I squash my last commits?").block.name == "git-squash"


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
        import_bundle(memory.store, bundle, memory.engine.fingerprint)
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
            import_bundle(other.store, tampered, other.engine.fingerprint)


def test_foreign_blocks_are_kept_only_when_asked(stocked, tmp_path, gemma3, embedder):
    bundle = tmp_path / "skills.tar"
    export_bundle(stocked.store, bundle)
    with SkillMemory(tmp_path / "second", engine=stocked.engine, embedder=embedder) as other:
        skipped = import_bundle(other.store, bundle, gemma3.fingerprint)
        assert skipped["blocks"] == 0 and "another runtime" in skipped["skipped"][0]["reason"]
        assert import_bundle(other.store, bundle, gemma3.fingerprint, allow_foreign=True)["blocks"] == 3
