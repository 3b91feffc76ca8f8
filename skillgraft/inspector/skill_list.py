"""The Skills page's list, one row per skill, paged: no HTML, no SQL here.

An imported Agent Skill is one row, its parts (the blocks of its versions) folded under it and
its size that of its default version's parts; a manual or a solution is a row of its own. A
row's size is the tokens of its text (a captured block's own count; a text block's counted only
by a model already loaded, else None: the page then shows its text's size in characters) and
the bytes of its stored state (None for text only: nothing is stored for it until it is used).
A page holds at most :data:`MAX_PAGE_SIZE` rows, so its HTML is bounded whatever the store holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Optional

from ..core.blocks import Block
from ..errors import InputError, SkillgraftError
from ..store.ledger import BlockUse

if TYPE_CHECKING:
    from ..store.block_store import BlockStore

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
SORTS = {
    "name": lambda r: r.name.casefold(),
    "kind": lambda r: (r.kind, r.name.casefold()),
    "tokens": lambda r: (r.n_tokens if r.n_tokens is not None else -1, r.n_chars),  # uncounted: by their text
    "bytes": lambda r: r.n_bytes if r.n_bytes is not None else -1,
    "created": lambda r: r.created_at,
    "uses": lambda r: r.uses,
    "last_use": lambda r: r.last_use or "",
    "status": lambda r: (r.status, r.name.casefold()),
}
Counter = Callable[[Block], Optional[int]]  # the tokens of a text block, None where no model is loaded


@dataclass(frozen=True)
class SkillRow:
    """One skill of the list: a manual, a solution, or an imported skill (``kind`` "skill").
    ``id`` is the block its page is reached by: the block itself, or the skill's first part."""

    id: str
    name: str
    kind: str
    description: str
    n_tokens: Optional[int]  # None: a text part no loaded model counted
    n_chars: int  # the size of its text
    n_bytes: Optional[int]  # its stored state; None: text only, nothing stored
    created_at: str
    status: str
    parts: int = 1
    version: Optional[int] = None
    uses: int = 0
    last_use: Optional[str] = None
    expired: bool = False  # past its expiry, or its skill's: hidden from routing and listings
    blocks: tuple = ()  # the parts' blocks (the default version's), to count their tokens on the page


@dataclass(frozen=True)
class SkillPage:
    """One page of the rows that match: ``matched`` of ``total`` skills, page ``page`` of ``pages``."""

    rows: list
    total: int
    matched: int
    page: int
    pages: int
    size: int

    @property
    def first(self) -> int:
        """The number of the page's first row (0 for an empty page)."""
        return (self.page - 1) * self.size + 1 if self.rows else 0

    @property
    def last(self) -> int:
        return self.first + len(self.rows) - 1 if self.rows else 0


def _sizes(blocks: list, count: Optional[Counter] = None) -> tuple[Optional[int], int, Optional[int]]:
    """``(tokens, chars, bytes)`` of ``blocks``: tokens None while a text one is not counted,
    bytes None when none of them holds a stored state."""
    tokens: Optional[int] = 0
    for block in blocks:
        n = block.n_tokens if not block.text_only else (_counted(count, block) if count else None)
        tokens = None if tokens is None or n is None else tokens + n
    stored = [block.n_bytes for block in blocks if not block.text_only]
    return tokens, sum(len(block.source) for block in blocks), sum(stored) if stored else None


def _counted(count: Counter, block: Block) -> Optional[int]:
    try:
        return count(block)
    except SkillgraftError:  # a template that cannot render it: shown by its text's size
        return None


def _block_row(block: Block, use: Optional[BlockUse], is_expired: bool) -> SkillRow:
    tokens, chars, stored = _sizes([block])
    return SkillRow(block.id, block.name, block.kind, block.description or block.question or "", tokens, chars, stored,
                    block.created_at, block.status, uses=use.uses if use else 0, last_use=use.last_use if use else None,
                    expired=is_expired, blocks=(block,))


def _skill_row(name: str, entry: dict, held: list, uses: dict, is_expired: bool) -> SkillRow:
    """The row of imported skill ``name``: the default version's parts (``entry``), the uses of every block it holds."""
    by_id = {block.id: block for block in held}
    parts = [by_id[block_id] for block_id in entry["blocks"] if block_id in by_id]
    tokens, chars, stored = _sizes(parts)
    used = [uses[block.id] for block in held if block.id in uses]
    statuses = {block.status for block in parts} - {"ok"}
    return SkillRow(
        parts[0].id if parts else name, name, "skill", entry["description"], tokens, chars, stored,
        entry["created_at"] or min((block.created_at for block in held), default=""),
        min(statuses) if statuses else "ok", parts=len(entry["blocks"]), version=entry["version"],
        uses=sum(use.uses for use in used), last_use=max((use.last_use for use in used if use.last_use), default=None),
        expired=is_expired, blocks=tuple(parts),
    )


def skill_rows(store: "BlockStore") -> list[SkillRow]:
    """One row per skill of ``store`` (quarantined ones too), in the catalog's order."""
    uses = store.block_uses()
    blocks = store.blocks()
    hidden = store.deadlines(blocks).hidden()  # what expiry hides: shown, marked expired
    skill_of = store.skill_routing()[0]
    defaults = store.skill_defaults()
    rows: list[SkillRow] = []
    held: dict[str, list] = {}
    for block in blocks:
        name = skill_of.get(block.id)
        if name is None or name not in defaults:
            rows.append(_block_row(block, uses.get(block.id), hidden.hides(block.id)))
            continue
        if name not in held:
            held[name] = []
            rows.append(name)  # its place: where its first block is
        held[name].append(block)
    return [row if isinstance(row, SkillRow) else
            _skill_row(row, defaults[row], held[row], uses, any(hidden.hides(b.id, row) for b in held[row]))
            for row in rows]


def skill_page(stores: list, *, search: str = "", sort: str = "created", descending: bool = False, page: int = 1,
               size: int = PAGE_SIZE, count: Optional[Counter] = None) -> SkillPage:
    """Page ``page`` of the skills of ``stores`` (each store's rows sorted, the first store's
    first) whose name, description or id holds ``search`` (case-insensitive); the text parts of
    the page's rows counted with ``count`` where it is given."""
    if sort not in SORTS:
        raise InputError(f"sort must be one of {', '.join(SORTS)}, got {sort[:40]!r}")
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise InputError(f"a page holds 1 to {MAX_PAGE_SIZE} skills, got {size}")
    if page < 1:
        raise InputError(f"pages are numbered from 1, got {page}")
    needle, total, rows = search.strip().casefold(), 0, []
    for store in stores:
        mine = skill_rows(store)
        total += len(mine)
        if needle:
            mine = [r for r in mine if needle in f"{r.name}\n{r.description}\n{r.id}".casefold()]
        rows += sorted(mine, key=SORTS[sort], reverse=descending)
    pages = max(1, -(-len(rows) // size))
    page = min(page, pages)  # past the last page: the last one
    shown = rows[(page - 1) * size: page * size]
    if count is not None:
        shown = [replace(row, n_tokens=_sizes(list(row.blocks), count)[0]) if row.n_tokens is None else row
                 for row in shown]
    return SkillPage(shown, total, len(rows), page, pages, size)
