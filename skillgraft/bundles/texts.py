"""Text manuals in a bundle: manuals stored as text (no payload, ``add_manual(capture=False)``)
that belong to no imported skill travel in the manifest's ``texts`` list — name, text,
description, example keys and expiry — and are stored as text again on import, after every
field is checked (:func:`parse_texts`), so an import makes no model run for them either. A
manual new to the store gets the bundle's expiry; one held already keeps its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..core.blocks import Block
from ..core.sha import ID_LIKE
from ..errors import BundleError
from .reader import MAX_BLOCKS, MAX_KEY_CHARS, MAX_NAME_CHARS, _expiry, _text
from ..routing.router import MAX_EXAMPLES

__all__ = ["TextManual", "export_texts", "import_texts", "parse_texts"]


@dataclass(frozen=True)
class TextManual:
    """One checked entry of a bundle's ``texts``."""

    name: str
    text: str
    description: str
    examples: tuple[str, ...]
    expires_at: Optional[str] = None


def export_texts(store, blocks: list[Block]) -> list[dict]:
    """The ``texts`` entries of ``blocks`` (text blocks)."""
    return [{"name": block.name, "text": block.source, "description": block.description,
             "examples": [k["text"] for k in store.routing_keys(block.id) if k["kind"] == "example"],
             "expires_at": block.expires_at}
            for block in blocks]


def parse_texts(raw) -> list[TextManual]:
    """The manifest's ``texts`` checked (:class:`BundleError` for anything malformed)."""
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_BLOCKS:
        raise BundleError(f"the bundle's texts must be a list of at most {MAX_BLOCKS}")
    manuals, names = [], set()
    for index, entry in enumerate(raw):
        where = f"bundle text #{index}"
        if not isinstance(entry, dict):
            raise BundleError(f"{where} is not an object")
        name = _text(entry, "name", where, limit=MAX_NAME_CHARS)
        if not name.strip() or name != name.strip() or ID_LIKE.fullmatch(name) or name in names:
            raise BundleError(f"{where}: its name {name!r} is empty, padded, id-like or repeated")
        text = _text(entry, "text", where)
        if not text.strip():
            raise BundleError(f"{where}: its text is empty")
        examples = entry.get("examples", [])
        if not isinstance(examples, list) or len(examples) > MAX_EXAMPLES:
            raise BundleError(f"{where}: examples must be a list of at most {MAX_EXAMPLES}")
        checked = tuple(_text({"example": e}, "example", where, limit=MAX_KEY_CHARS) for e in examples)
        names.add(name)
        manuals.append(TextManual(name, text, _text(entry, "description", where, limit=MAX_KEY_CHARS, optional=True) or "",
                                  checked, _expiry(entry.get("expires_at"), where)))
    return manuals


def import_texts(memory, manuals: list[TextManual], undo) -> list[Block]:
    """Store each manual as text (see the module's docstring), noting in ``undo`` (an
    :class:`~skillgraft.bundles.undo.ImportUndo`) each one stored; the blocks."""
    blocks = []
    for t in manuals:
        block = memory.add_manual(t.name, t.text, description=t.description, examples=list(t.examples), capture=False,
                                  imported=True)  # a name stored before is kept (see .route_names)
        undo.stored(block.id)
        if block.id not in undo.before and t.expires_at is not None:
            block = memory.store.set_block_expiry(block, t.expires_at)
        blocks.append(block)
    return blocks
