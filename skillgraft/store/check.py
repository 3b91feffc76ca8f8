"""``check`` and ``check --repair``: what is wrong with a store, typed, and how it was settled.

Reports, never raises on, a damaged catalog, invalid or inconsistent rows, payloads missing,
of the wrong size or hash, unreadable or not regular files, routing keys of missing blocks or
with malformed vectors, temp and unclaimed files.

Repair quarantines corrupt payloads, re-captures a block from its stored source text when
``recapture`` can (the new payload must hash to the recorded SHA-256), removes temp files
of dead processes and moves files without a catalog row to quarantine. One block that
cannot be repaired is reported; the others are still repaired.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Protocol, runtime_checkable

import numpy as np

from ..core.blocks import Block, block_id_for, text_sha256, tokens_sha256
from ..errors import SkillgraftError, StoreError
from ..core.hashing import file_digest_problem
from ..core.sha import SHA256_HEX
from ..core.states import KVState
from .protocols import BlockStorage, Catalog


__all__ = ["CheckReport", "CheckedStore", "Recapture", "check_store", "identity_problems", "row_problems",
           "usable_vector"]

Recapture = Callable[[Block], Optional[KVState]]


def usable_vector(data: object, length: Optional[int] = None) -> bool:
    """A routing vector: float32 bytes (``length`` of them), finite, unit length."""
    if not isinstance(data, bytes) or not data or len(data) % 4 or (length is not None and len(data) != length):
        return False
    vector = np.frombuffer(data, dtype=np.float32)
    return bool(np.isfinite(vector).all()) and abs(float(np.linalg.norm(vector)) - 1.0) < 1e-3


@dataclass
class CheckReport:
    """The outcome of a check: how many rows, whether all is well, what is wrong, what was repaired.

    ``problems`` and ``repaired`` hold one dict per finding (``block_id``, ``name`` or
    ``file``, ``problem``, and for a repair its ``action``). It also reads like the dict the
    CLI prints (``report["ok"]``), through :meth:`as_dict`.
    """

    blocks: int = 0
    problems: list[dict] = field(default_factory=list)
    repaired: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {"blocks": self.blocks, "ok": self.ok, "problems": self.problems, "repaired": self.repaired}

    def __getitem__(self, key: str):
        return self.as_dict()[key]

    def get(self, key: str, default=None):
        return self.as_dict().get(key, default)

    def keys(self):
        return self.as_dict().keys()


@runtime_checkable
class CheckedStore(Protocol):
    """What a check needs of a store: the public surface of
    :class:`~skillgraft.store.block_store.BlockStore`, which calls :func:`check_store`."""

    catalog: Catalog
    storage: BlockStorage
    read_only: bool

    def block_rows(self) -> list[dict]: ...

    def block_from_row(self, row: dict) -> Block: ...

    def routing_keys(self, block_id: Optional[str] = None) -> list[dict]: ...

    def orphan_routing_keys(self) -> list[dict]: ...

    def delete_routing_keys_by_id(self, key_ids: Iterable[int]) -> None: ...

    def clear_routing_vectors(self, key_ids: Iterable[int]) -> None: ...

    def payload_problem(self, block: Block, payload: bytes) -> Optional[str]: ...

    def mark_quarantined(self, block: Block) -> None: ...

    def evict(self, sha256: str) -> None: ...

    def restore_payload(self, block: Block, payload: bytes) -> None: ...


def identity_problems(block_id: str, sha256: str, tokens: tuple[int, ...], n_tokens: object,
                      recorded_tokens_sha256: object) -> list[str]:
    """What is inconsistent among a block row's id, SHA-256, token ids and their count and digest."""
    if not SHA256_HEX.fullmatch(sha256):
        return [f"sha256 {sha256[:80]!r} is not a SHA-256 hex digest"]
    problems = []
    if block_id != block_id_for(sha256):
        problems.append(f"id does not match its SHA-256 (expected {block_id_for(sha256)})")
    if n_tokens != len(tokens):
        problems.append(f"n_tokens is {n_tokens} but the row holds {len(tokens)} tokens")
    if recorded_tokens_sha256 != tokens_sha256(tokens):
        problems.append("tokens do not match tokens_sha256")
    return problems


def row_problems(block: Block) -> list[str]:
    """What is inconsistent inside one catalog row: its id, hashes and counts."""
    problems = identity_problems(block.id, block.sha256, block.tokens, block.n_tokens, block.tokens_sha256)
    if not SHA256_HEX.fullmatch(block.sha256):  # nothing more can be checked
        return problems
    if digest_problem := file_digest_problem(block.blake3):
        problems.append(digest_problem)
    if block.text_only:
        if block.sha256 != text_sha256(block.source):
            problems.append("the text block's text does not match its SHA-256")
        if block.n_bytes or block.tokens:
            problems.append("a text block holds no payload and no tokens")
    return problems


def check_store(store: CheckedStore, *, repair: bool = False, recapture: Optional[Recapture] = None) -> CheckReport:
    """Verify the catalog and every payload of ``store``; with ``repair``, settle what is wrong."""
    report = CheckReport()
    messages = store.catalog.integrity_problems()
    if messages:
        report.problems.append({"block_id": None, "problem": f"catalog integrity: {_shown(messages)}"})
    try:
        rows = store.block_rows()
    except StoreError as exc:
        report.problems.append({"block_id": None, "problem": f"catalog unreadable: {exc}"})
        return report
    report.blocks = len(rows)
    blocks = []
    for row in rows:
        try:
            blocks.append(store.block_from_row(row))
        except StoreError as exc:
            report.problems.append({"block_id": str(row.get("id")), "problem": str(exc)})
    for block in blocks:
        try:
            _check_block(store, block, repair, recapture, report)
        except (SkillgraftError, OSError) as exc:
            report.problems.append({"block_id": block.id, "name": block.name, "problem": f"repair failed: {exc}"})
    known = {b.file_name for b in blocks if not b.text_only}
    try:
        _check_routing_keys(store, repair, report)
    except (SkillgraftError, OSError) as exc:
        report.problems.append({"block_id": None, "problem": f"check failed: {exc}"})
    try:
        lock = store.catalog.read if store.read_only else store.catalog.write
        found, settled = store.storage.strays(known, repair, lock)
        report.problems += found
        report.repaired += settled
    except (SkillgraftError, OSError) as exc:
        report.problems.append({"block_id": None, "problem": f"check failed: {exc}"})
    return report


def _shown(messages: list[str]) -> str:
    more = f" (+{len(messages) - 5} more)" if len(messages) > 5 else ""
    return "; ".join(str(m) for m in messages[:5]) + more


def _check_block(store: CheckedStore, block: Block, repair: bool, recapture: Optional[Recapture], report: CheckReport) -> None:
    entry = {"block_id": block.id, "name": block.name}
    inconsistent = row_problems(block)
    if inconsistent:
        quarantine = repair and block.status == "ok"
        if quarantine:
            store.mark_quarantined(block)
        suffix = "; quarantined, remove it and re-add it from its source" if quarantine else ""
        report.problems += [{**entry, "problem": problem + suffix} for problem in inconsistent]
        return
    if block.text_only:  # its text is the row: nothing stored beside it
        return
    if block.status == "quarantined":
        problem = "quarantined"
    else:
        _, problem = store.storage.read(block, store.payload_problem)
    if not problem:
        return
    entry = {**entry, "problem": problem}
    if not repair or problem.startswith("unreachable"):
        report.problems.append(entry)
        return
    store.storage.quarantine(block)
    store.evict(block.sha256)
    state = recapture(block) if recapture else None
    if state is not None and state.sha256 == block.sha256:
        store.restore_payload(block, state.payload)
        report.repaired.append({**entry, "action": "re-captured from its source text (byte-identical)"})
    elif block.status != "quarantined":
        store.mark_quarantined(block)
        report.problems.append({**entry, "problem": f"{problem}; quarantined, re-add it from its source"})
    else:
        report.problems.append(entry)


def _check_routing_keys(store: CheckedStore, repair: bool, report: CheckReport) -> None:
    """Routing keys of blocks the catalog lacks, and keys whose vector is malformed."""
    orphans = store.orphan_routing_keys()
    rows = [key for key in store.routing_keys() if key["vector"] is not None]
    lengths = Counter(len(r["vector"]) for r in rows if isinstance(r["vector"], bytes))
    common = lengths.most_common(1)[0][0] if lengths else None
    malformed = [r for r in rows if not usable_vector(r["vector"], common)]
    for found, problem, action, settle in (
        (orphans, "routing key of a block the catalog lacks", "deleted", store.delete_routing_keys_by_id),
        (malformed, "routing key with a malformed vector", "vector dropped: re-embedded from its text on the next route",
         store.clear_routing_vectors),
    ):
        if not found:
            continue
        entries = [{"block_id": r["block_id"], "key_id": r["id"], "problem": problem} for r in found]
        if repair:
            settle([r["id"] for r in found])
            report.repaired += [{**e, "action": action} for e in entries]
        else:
            report.problems += entries
