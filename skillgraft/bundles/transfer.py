"""Portable bundles: ``skillgraft export`` and ``skillgraft import``.

A bundle is an uncompressed tar file::

    manifest.json        format, fingerprints, block rows with their routing key texts, routing corrections,
                         imported skills (versions and manifests: :mod:`skillgraft.bundles.skills`)
    blocks/<sha256>.kv   the block payloads, byte-identical to the store's files
    skills/<sha256>      the files of imported skills, each once

Import trusts nothing in a bundle, and is all or nothing:

- reads are bounded: at most ``MAX_MEMBERS`` entries, every entry a plain (not sparse)
  regular file named ``manifest.json`` or ``blocks/<64 hex>.kv``, the manifest at most
  ``MAX_MANIFEST_BYTES`` (checked on its header, before reading it), each payload exactly the
  size its row records; no tar header can make the reader take more than ``MAX_READ_BYTES``
  at once;
- every row is checked field by field (a malformed one is a :class:`BundleError`), its id
  must be the first 16 hex digits of its payload's SHA-256 and each payload's size and
  SHA-256 must match the row;
- a payload is accepted only when it is shown to belong to its source text: the source is
  rendered and tokenized as :class:`SkillMemory` does (the row's tokens must be exactly
  that), prefilled under the current runtime and the captured payload must hash to the
  bundle's (one prefill per block; ``trust_payloads`` skips only this step);
- a solution becomes verified only by being verified here: its stored method is re-run
  with the ``python`` verifier and it is deposited through :meth:`SkillMemory.add_solution`;
  a solution that cannot be re-run here (``exact``/``numeric`` ground truth is not in a
  bundle; no method) is skipped, and a local answer to the same question always wins;
- routing vectors are never read from a bundle: key texts of known kinds, bounded in
  length, are embedded again by the memory's embedder (a manual's sentence keys are not in
  the bundle: they are derived again from its source text), and so are routing corrections
  (:mod:`skillgraft.bundles.corrections`); creation times are set to now;
- blocks captured under another runtime cannot be recomputed here: they are skipped unless
  ``allow_foreign``, and then re-captured under this runtime from their source text, or
  kept as they are (size and SHA-256 checked) with ``trust_payloads``.

A block's name is kept as the bundle has it, even one the gateway's URL paths cannot reach
(:mod:`skillgraft.memory.route_names`: an older version stored it; its id reaches it).

Everything is validated and recomputed before the first deposit; if a deposit fails (a block,
a correction, a skill version, a text manual), what this import stored is removed again, the
skills' defaults it changed are set back, and nothing stored before is touched
(:mod:`skillgraft.bundles.undo`).

Reading and checking rows is :mod:`skillgraft.bundles.reader`, deciding what to do with each
:mod:`skillgraft.bundles.plan`; this module writes bundles and runs the import.

Export writes a temp file created exclusively (``O_EXCL | O_NOFOLLOW``) under a random name
beside ``PATH`` and renames it over ``PATH``: no planted link is ever written through (a
link at ``PATH`` itself is replaced, its target untouched).
"""

from __future__ import annotations

from ..core.progress import Progress

import io
import json
import os
import tarfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Union

from .plan import ImportPlan, Planner, SkippedBlock
from .corrections import export_corrections, import_corrections
from .reader import BUNDLE_FORMAT, BUNDLE_VERSION, KEY_KINDS, TAR_ERRORS, BoundedFile, payload, read_bundle_parts
from .skills import check_skill_files, export_skills, import_skills_of, parse_skills
from .texts import export_texts, import_texts, parse_texts
from .undo import ImportUndo
from ..errors import BundleError, StoreError
from ..store.ledger import LedgerEvent
from ..routing.router import manual_key_texts, name_key
from ..verify.verifiers import Accepted

if TYPE_CHECKING:
    from ..memory import SkillMemory
    from ..store.block_store import BlockStore



# -- reports -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportReport:
    """What :func:`export_bundle` wrote."""

    path: str
    blocks: int
    bytes: int
    skills: int = 0  # imported skills carried (their blocks are captured again on import, not rows)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ImportedBlock:
    """A bundle block now in the store. ``block_id`` differs from ``bundle_id`` when re-captured."""

    block_id: str
    bundle_id: str
    name: str
    kind: str
    how: str


@dataclass
class ImportReport:
    """What :func:`import_bundle` did with each block of a bundle."""

    path: str
    imported: list[ImportedBlock] = field(default_factory=list)
    skipped: list[SkippedBlock] = field(default_factory=list)
    seconds: float = 0.0
    skills: list = field(default_factory=list)  # each imported skill version: imported, unchanged or skipped

    @property
    def blocks(self) -> int:
        return len(self.imported)

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "blocks": self.blocks,
            "imported": [asdict(b) for b in self.imported],
            "skipped": [asdict(b) for b in self.skipped],
            "seconds": round(self.seconds, 3),
            "skills": self.skills,
        }


# -- export --------------------------------------------------------------------------------


def export_bundle(store: "BlockStore", path: Union[str, Path], progress: Progress = None) -> ExportReport:
    """Write every healthy block of ``store`` to a bundle at ``path`` (links are never followed)."""
    path = Path(path)
    _, skill_blocks = export_skills(store, lambda name, data: None) if store.skill_names() else ([], set())
    blocks = [b for b in store.blocks(include_quarantined=False) if b.id not in skill_blocks]
    texts, blocks = [b for b in blocks if b.text_only], [b for b in blocks if not b.text_only]
    manifest = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "fingerprints": {},
        "blocks": [],
    }
    if path.name in ("", ".."):
        raise StoreError(f"cannot write the bundle {str(path)!r}: it names no file")
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
    try:
        fd = os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise StoreError(f"cannot write the bundle {str(path)!r}: {getattr(exc, 'strerror', None) or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for done, block in enumerate(blocks, 1):
                    payload = store.load_state(block).state.payload
                    fingerprint = store.fingerprint(block.fingerprint_id)
                    manifest["fingerprints"][fingerprint.id] = json.loads(fingerprint.canonical_json())
                    row = block.model_dump(exclude={"status", "created_at"})
                    row["file"] = f"blocks/{block.file_name}"
                    row["routing_keys"] = [
                        {"kind": k["kind"], "text": k["text"]} for k in store.routing_keys(block.id) if k["kind"] in KEY_KINDS
                    ]
                    manifest["blocks"].append(row)
                    _add_bytes(tar, row["file"], payload)
                    if progress:
                        progress(done, len(blocks))
                manifest["texts"] = export_texts(store, texts)
                manifest["corrections"] = export_corrections(store, {b.id for b in blocks})
                manifest["skills"], _ = export_skills(store, lambda name, data: _add_bytes(tar, name, data))
                _add_bytes(tar, "manifest.json", json.dumps(manifest, indent=1).encode())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException as exc:
        temp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise StoreError(f"cannot write the bundle {path}: {exc.strerror or exc}") from exc
        raise
    return ExportReport(str(path), len(blocks) + len(texts), path.stat().st_size, len(manifest["skills"]))


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


# -- import --------------------------------------------------------------------------------


def import_bundle(
    memory: "SkillMemory",
    path: Union[str, Path],
    *,
    allow_foreign: bool = False,
    trust_payloads: bool = False,
    progress: Progress = None,
) -> ImportReport:
    """Check, verify and import a bundle into ``memory``, all or nothing (see the module docstring).

    ``progress(done, total)`` counts checked rows, then deposits; checking a block costs
    one prefill of its source (none with ``trust_payloads``).
    """
    started = time.perf_counter()
    path = Path(path)
    try:
        handle = open(path, "rb")
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise BundleError(f"cannot read the bundle {str(path)!r}: {getattr(exc, 'strerror', None) or exc}") from None
    with handle:
        try:
            tar = tarfile.open(fileobj=BoundedFile(handle), mode="r:")
        except TAR_ERRORS as exc:
            raise BundleError(f"{path} is not a readable bundle: {exc}") from None
        with tar:
            rows, corrections, manifest, members = read_bundle_parts(tar)
            skills = parse_skills(manifest.get("skills", []), members)  # checked before any deposit
            texts = parse_texts(manifest.get("texts"))
            check_skill_files(tar, members, skills)
            planner = Planner(memory, tar, allow_foreign, trust_payloads)
            total = len(rows)
            for done, row in enumerate(rows, 1):
                planner.plan(row)
                if progress:
                    progress(done, total)
            total += len(planner.plans)
            undo = ImportUndo({b.id for b in memory.store.blocks()})
            try:
                imported = _deposit(memory, tar, planner.plans, lambda i: progress and progress(len(rows) + i, total),
                                    (corrections, f"import:{path.name}"), undo)
                skill_reports = import_skills_of(memory, tar, members, skills, f"bundle:{path.name}", undo)
                imported += [ImportedBlock(block.id, block.id, block.name, "manual", "text")
                             for block in import_texts(memory, texts, undo)]
            except BaseException:
                undo.run(memory)
                raise
    for item in imported:
        detail = {"bundle": path.name, "bundle_id": item.bundle_id, "how": item.how}
        memory.store.log(LedgerEvent("import", decision=item.kind, block_id=item.block_id, detail=detail))
    report = ImportReport(str(path), imported, planner.skipped, time.perf_counter() - started)
    for skill_report in skill_reports:
        report.skills.extend({"name": s.name, "version": s.version, "how": "imported"} for s in skill_report.imported)
        report.skills.extend({**u, "how": "unchanged"} for u in skill_report.unchanged)
        report.skills.extend({**k, "how": "skipped"} for k in skill_report.skipped)
    return report


def _deposit(
    memory: "SkillMemory", tar: tarfile.TarFile, plans: list[ImportPlan], step: Callable[[int], None],
    corrections: tuple[list, str], undo: ImportUndo,
) -> list[ImportedBlock]:
    """Deposit every plan, then the routing corrections, noting in ``undo`` what is stored."""
    imported = []
    for done, plan in enumerate(plans, 1):
        row, block = plan.row, plan.row.block
        if plan.action == "solution":
            stored = memory.add_solution(
                block.question,
                block.answer,
                method=block.method,
                verifier=Accepted(plan.verdict),
                name=block.name,
                examples=[t for t in row.texts("example") if t != block.question],
                imported=True,
            )
        elif plan.action == "recapture":
            stored = memory.add_manual(
                block.name, block.source, examples=row.texts("example"), description=block.description,
                imported=True,
            )
        else:
            stored, _ = memory.store.deposit(block, payload(tar, row), row.fingerprint)
        undo.stored(stored.id)
        recomputed_here = plan.action != "recapture" and row.fingerprint.id == memory.engine.fingerprint.id
        if recomputed_here and stored.sha256 != block.sha256:
            raise BundleError(f"bundle block {block.id} ({block.name}): captured here it became block {stored.id}")
        sets = [(kind, row.texts(kind)) for kind in KEY_KINDS]
        if plan.action == "deposit":
            sets.append(("name", [name_key(block.name)]))
            if block.kind == "manual":
                sets.append(("manual", manual_key_texts(block.source)))
        # add_manual and add_solution stored some of them already: embed only the others.
        stored_keys = {(k["kind"], k["text"]) for k in memory.store.routing_keys(stored.id)}
        memory.router.add_key_sets(stored, [
            (kind, [t for t in texts if (kind, t.strip()) not in stored_keys]) for kind, texts in sets
        ])
        imported.append(ImportedBlock(stored.id, block.id, block.name, block.kind, plan.how))
        step(done)
    texts, by = corrections
    import_corrections(memory, texts, {b.bundle_id: b.block_id for b in imported}, by, undo.corrections)
    return imported
