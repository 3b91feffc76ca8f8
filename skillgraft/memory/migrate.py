"""Copy a store into another: a local folder into a shared catalog and bucket, or back.

Every healthy block is read and verified (size and SHA-256) from the source, deposited in
the destination (which verifies it again), then read back from the destination and
verified a third time; a manual stored as text is stored as text again (its id is its text's
hash, so it must come out the same). Routing keys (with their vectors, corrections and
negatives included), expiries, the encoder record and settings come along, and so do the
imported skills (every version, its files checked against their SHA-256 by the destination,
the default version and the pins) and the apps' prefixes; the ledger stays with the source.
Copying again is safe: what is already present is left as it is. Quarantined blocks are
skipped and listed, and so is a skill version whose blocks did not all arrive or whose files
the source cannot give (bytes that do not match their SHA-256), and a skill the destination
holds another version of under the same number (another skill of the same name: left as it is).
A text block whose text does not hash to its id (edited in the catalog) is skipped before anything of it is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import BlockIntegrityError, InputError, SkillgraftError
from ..routing.feedback import MAX_CORRECTIONS
from .app_prefixes import check_app_name, check_app_prefix
from ..store.block_store import BlockStore
from ..store.check import row_problems

__all__ = ["MigrationReport", "copy_store"]

SETTINGS_COPIED = ("router.threshold", "gate.mean_logprob", "router.encoder")


@dataclass
class MigrationReport:
    """What a copy did: blocks copied or already there, keys added, the skill versions and
    apps copied, what was skipped and why."""

    copied: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    keys_added: int = 0
    settings: list[str] = field(default_factory=list)
    skills: list[str] = field(default_factory=list)  # "name@vN" of each version copied
    apps: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.skipped

    def as_dict(self) -> dict:
        return {"ok": self.ok, "copied": self.copied, "present": self.present, "keys_added": self.keys_added,
                "settings": self.settings, "skills": self.skills, "apps": self.apps, "skipped": self.skipped}


def copy_store(source: BlockStore, target: BlockStore) -> MigrationReport:
    """Copy every healthy block of ``source``, its routing keys, imported skills, apps and
    settings into ``target`` (see the module's docstring)."""
    report = MigrationReport()
    arrived: set[str] = set(b.id for b in target.blocks())
    for block in source.blocks():
        if block.status != "ok":
            report.skipped.append({"block_id": block.id, "name": block.name, "problem": "quarantined in the source"})
            continue
        try:
            stored, created = _copy_block(source, target, block)
            if block.expires_at and stored.expires_at != block.expires_at:
                stored = target.set_block_expiry(stored, block.expires_at)
        except SkillgraftError as exc:
            report.skipped.append({"block_id": block.id, "name": block.name, "problem": str(exc)})
            continue
        arrived.add(stored.id)
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
    _copy_skills(source, target, arrived, report)
    for app in source.app_prefix_rows():
        try:  # a row edited in the source's catalog is skipped, as the app verbs would refuse it
            check_app_name(app["name"])
            check_app_prefix(app["system"])
        except InputError as exc:
            report.skipped.append({"app": str(app["name"])[:80], "problem": str(exc)})
            continue
        try:
            target.app_prefix_row(app["name"])
        except SkillgraftError:  # not there yet
            target.put_app_prefix(app["name"], app["system"])
            report.apps.append(app["name"])
    for key in SETTINGS_COPIED:
        value = source.setting(key)
        if value is not None and target.setting(key) is None:
            target.set_setting(key, value)
            report.settings.append(key)
    return report


def _copy_block(source: BlockStore, target: BlockStore, block):
    """``(stored, created)``: ``block`` in ``target``, its payload verified on the way, or its text."""
    if block.text_only:
        problems = row_problems(block)  # checked before anything is written: an edited text no longer hashes to its id
        if problems:
            raise BlockIntegrityError(f"its row is inconsistent: {'; '.join(problems)}")
        return target.put_text(block.source, name=block.name, description=block.description)
    loaded = source.load_state(block)
    stored, created = target.deposit(block, loaded.state.payload, loaded.state.fingerprint)
    target.evict(stored.sha256)
    target.load_state(stored)  # read back from the destination and verified again
    return stored, created


def _copy_skills(source: BlockStore, target: BlockStore, arrived: set, report: MigrationReport) -> None:
    """Each imported skill's versions the destination lacks, when all their blocks arrived;
    then its default version, expiry and pin as the source has them. A skill of which the
    destination holds a version of the same number with other files is another skill: it is
    left as it is, and said."""
    expiries, pinned = source.skill_expiries(), set(source.pinned_skills())
    for name in source.skill_names():
        held = {row["version"]: row["manifest_sha256"] for row in target.skill_versions(name)}
        rows = source.skill_versions(name)
        clashes = [row["version"] for row in rows if held.get(row["version"], row["manifest_sha256"]) != row["manifest_sha256"]]
        if clashes:
            report.skipped.extend({"skill": name, "version": version,
                                   "problem": f"the destination holds another version {version} of this skill"}
                                  for version in clashes)
            continue
        for row in rows:
            version = row["version"]
            if version in held:
                continue
            parts = source.skill_parts(name, version)
            missing = sorted({p["block_id"] for p in parts} - arrived)
            if missing:
                report.skipped.append({"skill": name, "version": version,
                                       "problem": f"its blocks {', '.join(missing)} were not copied"})
                continue
            try:
                files = [(f["path"], f["size"], f["sha256"], f["data"])
                         for f in source.skill_files(name, version, with_data=True)]
                target.add_skill_version(
                    name, version, folder=row["folder"], manifest_sha256=row["manifest_sha256"],
                    description=row["description"], record=row["record"], files=files, make_default=False,
                    parts=[(p["part"], p["block_id"], p["role"], p["title"]) for p in parts])
            except SkillgraftError as exc:
                report.skipped.append({"skill": name, "version": version, "problem": str(exc)})
                continue
            report.skills.append(f"{name}@v{version}")
        if name not in target.skill_names():
            continue
        default = source.skill_default(name)
        if default in {row["version"] for row in target.skill_versions(name)} and target.skill_default(name) != default:
            target.set_skill_default(name, default)
        if name in expiries and target.skill_expiries().get(name) != expiries[name]:
            target.set_skill_expiry(name, expiries[name])
        if name in pinned:
            target.set_skill_pin(name, True)
