"""Copy a store into another: a local folder into a shared catalog and bucket, or back.

Every healthy block is read and verified (size and SHA-256) from the source, deposited in
the destination (which verifies it again), then read back from the destination and
verified a third time. Routing keys (with their vectors, corrections and negatives included),
the encoder record and settings come along; the ledger stays with the source. Copying again
is safe: blocks and keys already present are left as they are. Quarantined blocks are skipped and listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import SkillgraftError
from ..routing.feedback import MAX_CORRECTIONS
from ..store.block_store import BlockStore

__all__ = ["MigrationReport", "copy_store"]

SETTINGS_COPIED = ("router.threshold", "gate.mean_logprob", "router.encoder")


@dataclass
class MigrationReport:
    """What a copy did: blocks copied or already there, keys added, what was skipped and why."""

    copied: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    keys_added: int = 0
    settings: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.skipped

    def as_dict(self) -> dict:
        return {"ok": self.ok, "copied": self.copied, "present": self.present, "keys_added": self.keys_added,
                "settings": self.settings, "skipped": self.skipped}


def copy_store(source: BlockStore, target: BlockStore) -> MigrationReport:
    """Copy every healthy block of ``source``, its routing keys and settings into ``target``."""
    report = MigrationReport()
    for block in source.blocks():
        if block.status != "ok":
            report.skipped.append({"block_id": block.id, "name": block.name, "problem": "quarantined in the source"})
            continue
        try:
            loaded = source.load_state(block)
            stored, created = target.deposit(block, loaded.state.payload, loaded.state.fingerprint)
            target.evict(stored.sha256)
            target.load_state(stored)  # read back from the destination and verified again
        except SkillgraftError as exc:
            report.skipped.append({"block_id": block.id, "name": block.name, "problem": str(exc)})
            continue
        (report.copied if created else report.present).append(block.id)
        keys = [
            {"kind": k["kind"], "text": k["text"], "embedder": k["embedder"], "vector": k["vector"],
             "created_at": k.get("created_at"), "created_by": k.get("created_by")}
            for k in source.routing_keys(block.id)
        ]
        report.keys_added += target.add_routing_keys(stored.id, keys)
    for row in source.routing_keys():
        if row["kind"] == "negative" and row["block_id"] is None:
            key = {"kind": "negative", "text": row["text"], "embedder": row["embedder"], "vector": row["vector"]}
            target.add_correction(key, None, row.get("created_by") or "", MAX_CORRECTIONS, at=row.get("created_at"))
            report.keys_added += 1
    for key in SETTINGS_COPIED:
        value = source.setting(key)
        if value is not None and target.setting(key) is None:
            target.set_setting(key, value)
            report.settings.append(key)
    return report
