"""Portable bundles: ``skillgraft export`` and ``skillgraft import``.

A bundle is an uncompressed tar file::

    manifest.json        format, fingerprints, block rows, routing keys, SHA-256 per block
    blocks/<sha256>.kv   the block payloads, byte-identical to the store's files

Import trusts nothing: every entry must be a regular file named ``manifest.json`` or
``blocks/<64 hex>.kv`` (no absolute paths, no ``..``, no links), every payload must match
its size and SHA-256, and blocks captured under another runtime are kept only when asked.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import tarfile
import time
from pathlib import Path
from typing import Callable, Optional, Union

from .blocks import Block
from .errors import BundleError, StoreError
from .fingerprint import RuntimeFingerprint
from .store import BlockStore

BUNDLE_FORMAT = "skillgraft-bundle"
BUNDLE_VERSION = 1
_PAYLOAD_NAME = re.compile(r"^blocks/[0-9a-f]{64}\.kv$")
Progress = Optional[Callable[[int, int], None]]


def export_bundle(store: BlockStore, path: Union[str, Path], progress: Progress = None) -> dict:
    """Write every healthy block of ``store`` to a bundle at ``path``."""
    path = Path(path)
    blocks = store.blocks(include_quarantined=False)
    fingerprints = {b.fingerprint_id: store.fingerprint(b.fingerprint_id) for b in blocks}
    manifest = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "fingerprints": {fid: json.loads(fp.canonical_json()) for fid, fp in fingerprints.items()},
        "blocks": [],
    }
    temp = path.with_name(path.name + ".part")
    try:
        with tarfile.open(temp, "w", format=tarfile.PAX_FORMAT) as tar:
            for done, block in enumerate(blocks, 1):
                loaded = store.load_state(block)
                row = block.model_dump()
                row["file"] = f"blocks/{block.file_name}"
                row["routing_keys"] = [
                    {
                        "kind": k["kind"],
                        "text": k["text"],
                        "embedder": k["embedder"],
                        "vector": base64.b64encode(k["vector"]).decode() if k["vector"] else None,
                    }
                    for k in store.routing_keys(block.id)
                ]
                manifest["blocks"].append(row)
                _add_bytes(tar, row["file"], loaded.state.payload)
                if progress:
                    progress(done, len(blocks))
            _add_bytes(tar, "manifest.json", json.dumps(manifest, indent=1).encode())
        temp.replace(path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise StoreError(f"cannot write the bundle {path}: {exc.strerror or exc}") from exc
    return {"path": str(path), "blocks": len(blocks), "bytes": path.stat().st_size}


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def _checked_members(tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
    members = {}
    for member in tar.getmembers():
        name = member.name
        if name.startswith("/") or ".." in Path(name).parts or "\\" in name:
            raise BundleError(f"bundle entry {name!r} has an unsafe path")
        if not member.isfile():
            raise BundleError(f"bundle entry {name!r} is not a regular file (links and folders are refused)")
        if name != "manifest.json" and not _PAYLOAD_NAME.match(name):
            raise BundleError(f"bundle entry {name!r} is not part of the bundle format")
        if name in members:
            raise BundleError(f"bundle entry {name!r} appears twice")
        members[name] = member
    if "manifest.json" not in members:
        raise BundleError("the bundle has no manifest.json")
    return members


def import_bundle(
    store: BlockStore,
    path: Union[str, Path],
    runtime: Optional[RuntimeFingerprint] = None,
    *,
    allow_foreign: bool = False,
    progress: Progress = None,
) -> dict:
    """Verify and import a bundle. Blocks whose fingerprint differs from ``runtime`` are
    skipped unless ``allow_foreign``; blocks already present are skipped."""
    path = Path(path)
    try:
        tar = tarfile.open(path, "r:")
    except (OSError, tarfile.TarError) as exc:
        raise BundleError(f"{path} is not a readable bundle: {exc}") from exc
    imported, skipped = [], []
    with tar:
        members = _checked_members(tar)
        manifest = _read_manifest(tar, members["manifest.json"])
        fingerprints = {
            fid: RuntimeFingerprint.model_validate(data) for fid, data in manifest["fingerprints"].items()
        }
        for done, row in enumerate(manifest["blocks"], 1):
            outcome = _import_block(store, tar, members, row, fingerprints, runtime, allow_foreign)
            (imported if outcome["imported"] else skipped).append(outcome)
            if progress:
                progress(done, len(manifest["blocks"]))
    return {"blocks": len(imported), "imported": imported, "skipped": skipped}


def _read_manifest(tar: tarfile.TarFile, member: tarfile.TarInfo) -> dict:
    try:
        manifest = json.loads(tar.extractfile(member).read())
    except (ValueError, AttributeError) as exc:
        raise BundleError(f"the bundle's manifest.json is not valid JSON: {exc}") from exc
    if manifest.get("format") != BUNDLE_FORMAT or manifest.get("version") != BUNDLE_VERSION:
        raise BundleError(
            f"unsupported bundle format {manifest.get('format')!r} version {manifest.get('version')!r}"
        )
    if not isinstance(manifest.get("blocks"), list) or not isinstance(manifest.get("fingerprints"), dict):
        raise BundleError("the bundle's manifest lacks its blocks or fingerprints")
    return manifest


def _import_block(store, tar, members, row, fingerprints, runtime, allow_foreign) -> dict:
    routing_keys = row.pop("routing_keys", [])
    file_name = row.pop("file", None)
    try:
        block = Block(**{**row, "status": "ok"})
    except Exception as exc:  # pydantic.ValidationError, TypeError
        raise BundleError(f"bundle block {row.get('id', '?')} has an invalid row: {exc}") from None
    outcome = {"block_id": block.id, "name": block.name, "imported": False}
    fingerprint = fingerprints.get(block.fingerprint_id)
    if fingerprint is None or fingerprint.id != block.fingerprint_id:
        raise BundleError(f"bundle block {block.id} names fingerprint {block.fingerprint_id}, which the manifest lacks")
    if runtime is not None and fingerprint.id != runtime.id and not allow_foreign:
        return {**outcome, "reason": f"captured under another runtime ({fingerprint.id}); pass allow_foreign"}
    existing = [b for b in store.blocks() if b.id == block.id and b.status == "ok"]
    if existing:
        return {**outcome, "reason": "already in the store"}
    member = members.get(file_name or "")
    if member is None or file_name != f"blocks/{block.file_name}":
        raise BundleError(f"bundle block {block.id} has no payload entry")
    payload = tar.extractfile(member).read()
    if len(payload) != block.n_bytes or hashlib.sha256(payload).hexdigest() != block.sha256:
        raise BundleError(f"bundle block {block.id} ({block.name}): payload does not match its size or SHA-256")
    stored, _ = store.deposit(block, payload, fingerprint)
    store.add_routing_keys(
        stored.id,
        [{**k, "vector": base64.b64decode(k["vector"]) if k.get("vector") else None} for k in routing_keys],
    )
    return {**outcome, "imported": True}
