"""Forged and hostile bundles: a bundle is untrusted input from start to end.

Threat model: whoever wrote the bundle may forge any manifest field and any payload. Import
must never store a solution that was not verified here, a payload that does not belong to
its source text, a block whose id is not its hash, routing vectors it did not compute, or
half a bundle; it must read a bounded amount and raise :class:`BundleError` on anything
malformed. Export must never write through a link planted beside or at its target.
"""

import base64
import io
import json
import os
import tarfile
import time

import numpy as np
import pytest

from skillgraft.routing.ranking import LEXICAL_WEIGHT

from skillgraft.bundles import reader as bundle_reader
from skillgraft.bundles.transfer import export_bundle, import_bundle
from skillgraft.errors import BundleError
from skillgraft.core.blocks import solution_text
from skillgraft.memory import SkillMemory
from tests.conftest import GIT_MANUAL, SOURDOUGH_MANUAL


@pytest.fixture(scope="module")
def source(tmp_path_factory, smollm2, embedder):
    """Two manuals and one verified solution, built once for the module (never changed)."""
    with SkillMemory(tmp_path_factory.mktemp("source"), engine=smollm2, embedder=embedder) as memory:
        memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?", "combine commits into one"])
        memory.add_manual("sourdough", SOURDOUGH_MANUAL, examples=["how do I bake sourdough bread?", "my loaf is too dense"])
        memory.add_solution("What is 17 * 23?", "391", method="print(17 * 23)", verifier="python")
        yield memory


@pytest.fixture(scope="module")
def bundle(source, tmp_path_factory):
    path = tmp_path_factory.mktemp("bundle") / "skills.tar"
    export_bundle(source.store, path)
    return path


@pytest.fixture
def fresh(tmp_path, smollm2, embedder):
    with SkillMemory(tmp_path / "fresh", engine=smollm2, embedder=embedder) as other:
        yield other


def read_bundle(path):
    with tarfile.open(path) as tar:
        entries = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    return json.loads(entries.pop("manifest.json")), entries


def write_bundle(path, manifest, entries):
    with tarfile.open(path, "w") as tar:
        for name, data in [("manifest.json", json.dumps(manifest).encode()), *entries.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def forge(bundle, tmp_path, edit):
    """A copy of ``bundle`` whose manifest and entries ``edit(manifest, entries)`` changed."""
    manifest, entries = read_bundle(bundle)
    edit(manifest, entries)
    return write_bundle(tmp_path / "forged.tar", manifest, entries)


def row(manifest, name):
    return next(r for r in manifest["blocks"] if r["name"] == name)


def solution_row(manifest):
    return next(r for r in manifest["blocks"] if r["kind"] == "solution")


# -- solutions: verified here or not at all -------------------------------------------------


def test_forged_solution_answer_is_not_stored_as_verified(bundle, tmp_path, fresh):
    def edit(manifest, entries):
        solution = solution_row(manifest)
        solution["answer"] = "400"
        solution["source"] = solution_text(solution["question"], "400", solution["method"])

    report = import_bundle(fresh, forge(bundle, tmp_path, edit))
    skipped = next(s for s in report.skipped if s.kind == "solution")
    assert "did not verify" in skipped.reason and "391" in skipped.reason
    assert fresh.recall("What is 17 * 23?").decision != "exact"
    assert report.blocks == 2


def test_solution_that_cannot_be_re_run_is_skipped(tmp_path, fresh, smollm2, embedder):
    with SkillMemory(tmp_path / "other", engine=smollm2, embedder=embedder) as other:
        other.add_solution("Capital of France?", "Paris", verifier="exact", expected="Paris")
        path = tmp_path / "exact.tar"
        export_bundle(other.store, path)
    report = import_bundle(fresh, path)
    assert report.blocks == 0 and "not re-verified" in report.skipped[0].reason
    assert fresh.recall("Capital of France?").decision != "exact"


def test_python_solution_without_method_is_skipped(bundle, tmp_path, fresh):
    def edit(manifest, entries):
        solution = solution_row(manifest)
        solution["method"] = None
        solution["source"] = solution_text(solution["question"], solution["answer"], None)

    report = import_bundle(fresh, forge(bundle, tmp_path, edit))
    assert "no method" in next(s.reason for s in report.skipped if s.kind == "solution")
    assert fresh.recall("What is 17 * 23?").decision != "exact"


@pytest.mark.sandbox
def test_bundle_never_overrides_a_local_answer(fresh, tmp_path, smollm2, embedder):
    with SkillMemory(tmp_path / "other", engine=smollm2, embedder=embedder) as other:
        other.add_solution("What is 17*23?", "392", method="print(392)", verifier="python")
        path = tmp_path / "other.tar"
        export_bundle(other.store, path)
    fresh.add_solution("What is 17 * 23?", "391", method="print(17 * 23)", verifier="python")

    def edit(manifest, entries):
        solution_row(manifest)["created_at"] = "2000-01-01T00:00:00.000+00:00"  # older than the local answer

    report = import_bundle(fresh, forge(path, tmp_path, edit))
    assert report.blocks == 0 and "the local answer is kept" in report.skipped[0].reason
    assert fresh.recall("What is 17 * 23?").block.answer == "391"


def test_solution_text_must_be_its_question_and_answer(bundle, tmp_path, fresh):
    def edit(manifest, entries):
        solution_row(manifest)["answer"] = "392"  # the payload and source still say 391

    with pytest.raises(BundleError, match="not the text of its question"):
        import_bundle(fresh, forge(bundle, tmp_path, edit))
    assert len(fresh.store) == 0


# -- payloads belong to their source; ids are hashes -----------------------------------------


def swap_payload(manifest, entries):
    """Row git-squash keeps its text but carries the sourdough payload; the sourdough row goes."""
    git, sourdough = row(manifest, "git-squash"), row(manifest, "sourdough")
    for key in ("id", "sha256", "n_bytes", "file"):
        git[key] = sourdough[key]
    manifest["blocks"].remove(sourdough)


def test_payload_of_another_text_is_refused(bundle, tmp_path, fresh):
    with pytest.raises(BundleError, match="does not belong to its source text"):
        import_bundle(fresh, forge(bundle, tmp_path, swap_payload))
    assert len(fresh.store) == 0


def test_trust_payloads_still_checks_tokens_against_the_source(bundle, tmp_path, fresh):
    def edit(manifest, entries):
        git, sourdough = row(manifest, "git-squash"), row(manifest, "sourdough")
        for key in ("id", "sha256", "n_bytes", "file", "tokens", "n_tokens"):
            git[key] = sourdough[key]
        manifest["blocks"].remove(sourdough)

    with pytest.raises(BundleError, match="not the tokenization of its source"):
        import_bundle(fresh, forge(bundle, tmp_path, edit), trust_payloads=True)
    assert len(fresh.store) == 0


def test_copied_row_with_a_new_id_is_refused(bundle, tmp_path, fresh):
    def edit(manifest, entries):
        copy = dict(row(manifest, "git-squash"), id="0123456789abcdef", name="git-copy")
        manifest["blocks"].append(copy)

    with pytest.raises(BundleError, match="id is not the start of its payload's SHA-256"):
        import_bundle(fresh, forge(bundle, tmp_path, edit))
    assert len(fresh.store) == 0


def test_duplicate_rows_are_refused(bundle, tmp_path, fresh):
    def edit(manifest, entries):
        manifest["blocks"].append(dict(row(manifest, "git-squash"), name="git-copy"))

    with pytest.raises(BundleError, match="appears twice"):
        import_bundle(fresh, forge(bundle, tmp_path, edit))
    assert len(fresh.store) == 0


def test_rm_of_an_imported_block_leaves_every_other_file(bundle, fresh):
    import_bundle(fresh, bundle)
    files = {b.name: fresh.store.path_of(b) for b in fresh.store.blocks()}
    fresh.store.remove("git-squash")
    assert not files.pop("git-squash").exists()
    assert all(path.exists() for path in files.values())
    assert fresh.blocks.check()["ok"]


# -- routing keys: texts only, vectors computed here ------------------------------------------


def test_routing_vectors_from_the_bundle_are_ignored(bundle, tmp_path, fresh, embedder):
    hijack = base64.b64encode(embedder.encode(["how do I squash my last commits?"])[0].tobytes()).decode()

    def edit(manifest, entries):
        for key in row(manifest, "sourdough")["routing_keys"]:
            key["vector"] = hijack
        row(manifest, "git-squash")["routing_keys"][0]["vector"] = base64.b64encode(b"0123456789").decode()
        solution_row(manifest)["routing_keys"][0]["vector"] = "!!not base64!!"

    assert import_bundle(fresh, forge(bundle, tmp_path, edit)).blocks == 3
    routed = fresh.route("how do I squash my last commits?")
    assert routed.block.name == "git-squash" and routed.score < 0.999 + LEXICAL_WEIGHT  # the key blended with its centroid
    for key in fresh.store.routing_keys():
        assert np.allclose(np.frombuffer(key["vector"], np.float32), embedder.encode([key["text"]])[0], atol=1e-5)


@pytest.mark.parametrize(
    "key, message",
    [
        ({"kind": "backdoor", "text": "anything"}, "routing key is not an object of kind"),
        ({"kind": "example", "text": "x" * 5000}, "5000 characters"),
        ({"kind": "example", "text": 7}, "must be text"),
        ("example", "routing key is not an object"),
    ],
)
def test_routing_keys_are_of_known_kinds_and_bounded(bundle, tmp_path, fresh, key, message):
    def edit(manifest, entries):
        row(manifest, "git-squash")["routing_keys"].append(key)

    with pytest.raises(BundleError, match=message):
        import_bundle(fresh, forge(bundle, tmp_path, edit))
    assert len(fresh.store) == 0


def test_created_at_from_the_bundle_is_not_trusted(bundle, tmp_path, fresh):
    def edit(manifest, entries):
        for block in manifest["blocks"]:
            block["created_at"] = "9999-12-31T23:59:59.999+00:00"

    started = time.strftime("%Y-%m-%d", time.gmtime())
    import_bundle(fresh, forge(bundle, tmp_path, edit))
    assert all(b.created_at[:10] >= started and not b.created_at.startswith("9999") for b in fresh.store.blocks())
    fresh.add_manual("sourdough-2", "Skill manual: rye sourdough needs a wetter dough.", examples=["rye bread"])
    assert fresh.route("how do I squash my last commits?").block.name == "git-squash"


# -- schema: every malformed field is a BundleError -----------------------------------------


def _set(field, value):
    def edit(manifest, entries):
        row(manifest, "git-squash")[field] = value

    return edit


def _drop(field):
    def edit(manifest, entries):
        del row(manifest, "git-squash")[field]

    return edit


SCHEMA_EDITS = {
    "row not an object": lambda m, e: m["blocks"].append(1),
    "blocks not a list": lambda m, e: m.update(blocks={"a": 1}),
    "missing id": _drop("id"),
    "missing sha256": _drop("sha256"),
    "missing tokens": _drop("tokens"),
    "missing file": _drop("file"),
    "kind unknown": _set("kind", "macro"),
    "name not text": _set("name", ["git"]),
    "name with a newline": _set("name", "git\nsquash"),
    "tokens not a list": _set("tokens", "1,2,3"),
    "tokens of text": _set("tokens", ["1", "2"]),
    "negative token": _set("tokens", [-1]),
    "n_bytes text": _set("n_bytes", "1000"),
    "n_tokens bool": _set("n_tokens", True),
    "id upper case": lambda m, e: row(m, "git-squash").update(id=row(m, "git-squash")["id"].upper()),
    "routing_keys not a list": _set("routing_keys", "name"),
    "fingerprint unknown": _set("fingerprint_id", "0" * 16),
    "fingerprint not an object": lambda m, e: m["fingerprints"].update({"x": 1}),
    "fingerprint invalid": lambda m, e: [fp.update(n_batch="big") for fp in m["fingerprints"].values()],
    "fingerprint under another id": lambda m, e: m.update(fingerprints={"0" * 16: next(iter(m["fingerprints"].values()))}),
    "file unhashable": _set("file", ["blocks"]),
    "version wrong": lambda m, e: m.update(version=2),
}


@pytest.mark.parametrize("edit", SCHEMA_EDITS.values(), ids=SCHEMA_EDITS.keys())
def test_schema_errors_are_bundle_errors(bundle, tmp_path, fresh, edit):
    with pytest.raises(BundleError):
        import_bundle(fresh, forge(bundle, tmp_path, edit))
    assert len(fresh.store) == 0


@pytest.mark.parametrize(
    "manifest",
    [b"[1, 2]", b'"text"', b"[" * 100_000, b'{"format": "skillgraft-bundle", "version": 1, "blocks": 3}'],
    ids=["list", "string", "deeply nested", "blocks not a list"],
)
def test_manifest_of_the_wrong_shape_is_a_bundle_error(fresh, tmp_path, manifest):
    path = tmp_path / "odd.tar"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    with pytest.raises(BundleError):
        import_bundle(fresh, path)


# -- all or nothing --------------------------------------------------------------------------


def test_a_bad_late_block_imports_nothing(bundle, tmp_path, fresh):
    def edit(manifest, entries):
        name = row(manifest, "sourdough")["file"]
        entries[name] = entries[name][:-1] + bytes([entries[name][-1] ^ 1])

    with pytest.raises(BundleError, match="SHA-256"):
        import_bundle(fresh, forge(bundle, tmp_path, edit))
    assert len(fresh.store) == 0 and fresh.store.routing_keys() == []


def test_a_failure_while_depositing_removes_what_was_deposited(bundle, fresh, monkeypatch):
    local = fresh.add_manual("local", "Skill manual: water the plants on Sundays.", examples=["when to water plants"])
    local_file = fresh.store.path_of(local).read_bytes()
    local_keys = fresh.store.routing_keys(local.id)
    calls = {"n": 0}
    real = fresh.store.deposit

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr(fresh.store, "deposit", failing)
    with pytest.raises(OSError):
        import_bundle(fresh, bundle)
    monkeypatch.undo()
    assert [b.id for b in fresh.store.blocks()] == [local.id]
    assert fresh.store.path_of(local).read_bytes() == local_file
    assert fresh.store.routing_keys(local.id) == local_keys
    assert sorted(p.name for p in fresh.store.blocks_dir.iterdir()) == [local.file_name]
    assert fresh.blocks.check()["ok"]


# -- bounded reads ---------------------------------------------------------------------------


def test_sparse_manifest_claiming_a_gibibyte_is_refused_unread(fresh, tmp_path):
    path = tmp_path / "sparse.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("manifest.json")
        data = b"1\n0\n0\n".ljust(512, b"\0")
        info.size = len(data)
        info.pax_headers = {
            "GNU.sparse.major": "1", "GNU.sparse.minor": "0",
            "GNU.sparse.name": "manifest.json", "GNU.sparse.realsize": str(1 << 30),
        }
        tar.addfile(info, io.BytesIO(data))
    assert path.stat().st_size < 20_000
    started = time.perf_counter()
    with pytest.raises(BundleError, match="sparse"):
        import_bundle(fresh, path)
    assert time.perf_counter() - started < 2


def test_manifest_over_the_cap_is_refused_by_its_header(fresh, tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_reader, "MAX_MANIFEST_BYTES", 100)
    path = write_bundle(tmp_path / "big.tar", {"format": "skillgraft-bundle", "pad": "x" * 200}, {})
    with pytest.raises(BundleError, match="manifest.json is .* bytes"):
        import_bundle(fresh, path)


def test_huge_extended_header_is_not_read(fresh, tmp_path):
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, 1 << 30
    path = tmp_path / "pax.tar"
    path.write_bytes(header.tobuf(format=tarfile.USTAR_FORMAT) + b"\0" * 4096)
    with pytest.raises(BundleError, match="at once"):
        import_bundle(fresh, path)


def test_payload_entry_must_have_the_rows_size(bundle, tmp_path, fresh):
    def edit(manifest, entries):
        name = row(manifest, "git-squash")["file"]
        entries[name] += b"extra"

    with pytest.raises(BundleError, match="payload entry is .* bytes, the row says"):
        import_bundle(fresh, forge(bundle, tmp_path, edit))


def test_too_many_entries_are_refused(fresh, tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_reader, "MAX_MEMBERS", 3)
    entries = {f"blocks/{i:064x}.kv": b"x" for i in range(5)}
    path = write_bundle(tmp_path / "many.tar", {"format": "skillgraft-bundle", "version": 1}, entries)
    with pytest.raises(BundleError, match="more than 3 entries"):
        import_bundle(fresh, path)


# -- names -----------------------------------------------------------------------------------


def test_a_local_name_of_other_content_wins(bundle, tmp_path, fresh):
    local = fresh.add_manual("git-squash", "Skill manual: our own squash policy: never squash.", examples=["squash?"])
    report = import_bundle(fresh, bundle)
    reason = next(s.reason for s in report.skipped if s.name == "git-squash")
    assert "taken by local block" in reason and report.blocks == 2
    assert fresh.store.get("git-squash").id == local.id
    assert fresh.store.get("git-squash").source.startswith("Skill manual: our own")


# -- export never follows links ----------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "O_NOFOLLOW"), reason="needs O_NOFOLLOW")
def test_export_never_writes_through_a_planted_link(source, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    target = tmp_path / "out" / "skills.tar"
    target.parent.mkdir()
    (target.parent / "skills.tar.part").symlink_to(outside)
    export_bundle(source.store, target)
    assert outside.read_text() == "precious"
    assert tarfile.is_tarfile(target)

    linked = tmp_path / "out" / "linked.tar"
    linked.symlink_to(outside)
    export_bundle(source.store, linked)
    assert outside.read_text() == "precious"
    assert not linked.is_symlink() and tarfile.is_tarfile(linked)
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".part") and not p.is_symlink()]
