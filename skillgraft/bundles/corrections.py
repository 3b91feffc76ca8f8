"""Routing corrections in bundles: exported as texts, embedded again on import.

Export lists the store's corrections of the exported blocks (``feedback`` keys) and its
negatives in the manifest's ``corrections``; no vector leaves the store. Import embeds
each text with the importing memory's encoder and stores it as a correction given by
``import:<bundle file name>``, for the blocks the import stored; a correction of a text the
store already has (any kind) is skipped: the local one wins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..routing.feedback import MAX_CORRECTIONS
from .reader import BundleCorrection

if TYPE_CHECKING:
    from ..memory import SkillMemory
    from ..store.block_store import BlockStore

__all__ = ["export_corrections", "import_corrections"]


def export_corrections(store: "BlockStore", block_ids: set[str]) -> list[dict]:
    """The manifest's ``corrections``: feedback keys of the exported blocks, and every negative."""
    return [
        {"kind": row["kind"], "block_id": row["block_id"], "text": row["text"]}
        for row in store.corrections()
        if row["kind"] == "negative" or row["block_id"] in block_ids
    ][:MAX_CORRECTIONS]


def import_corrections(memory: "SkillMemory", corrections: Iterable[BundleCorrection], stored_ids: dict[str, str],
                       by: str, added: list[int]) -> list[int]:
    """Store the bundle's corrections whose block was imported (``stored_ids``: bundle id to
    stored id), appending the id of each one added to ``added`` as it is stored."""
    local = {row["text"] for row in memory.store.routing_keys() if row["kind"] in ("feedback", "negative")}
    wanted = [c for c in corrections if c.text not in local and (c.kind == "negative" or c.block_id in stored_ids)]
    rows = memory.router.key_rows([(c.kind, [c.text]) for c in wanted])
    for correction, row in zip(wanted, rows):
        block_id = stored_ids.get(correction.block_id) if correction.kind == "feedback" else None
        added.append(memory.store.add_correction(row, block_id, by, MAX_CORRECTIONS)["id"])
    return added
