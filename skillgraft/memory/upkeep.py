"""Upkeep of a memory's blocks: rename, update (recapture a manual's new text), recapture
everything under a new runtime, and check with repair. :class:`Upkeep` is mixed into
:class:`~skillgraft.memory.SkillMemory`, which provides ``engine``, ``store``, ``router`` and
``get``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

from ..core.blocks import Block
from ..core.states import KVState
from ..core.text_checks import require_text
from ..errors import DuplicateBlockError, InputError, SkillgraftError
from ..routing.router import manual_key_texts, name_key
from .deposits import clean_keys, clean_name

if TYPE_CHECKING:
    from ..store.check import CheckReport


@dataclass
class RecaptureReport:
    """What :meth:`SkillMemory.recapture` did."""

    recaptured: list = field(default_factory=list)
    unchanged: list = field(default_factory=list)
    failed: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class Upkeep:
    """``rename``, ``update``, ``recapture`` and ``check`` of a memory."""

    def rename(self, ref: str, new_name: str) -> Block:
        """Give a block a new name (free, or :class:`NameTakenError`); its name key follows."""
        block = self.get(ref)
        skill = self.store.skill_of_block(block.id)
        if skill is not None:
            raise InputError(f"block {block.id} is part of skill {skill!r}: its blocks are named after the skill")
        new_name = clean_name(new_name)
        if new_name == block.name:
            return block
        keys = self.router.key_rows([("name", [name_key(new_name)])])  # before any change
        renamed = self.store.rename(block.id, new_name)
        self.store.set_routing_keys(block.id, "name", keys)
        return renamed

    def update(
        self,
        ref: str,
        *,
        text: Optional[str] = None,
        examples: Optional[Sequence[str]] = None,
        description: Optional[str] = None,
        progress=None,
    ) -> Block:
        """Change a manual's text (recaptured, keeping its name and keys), examples or description.

        ``examples`` and ``description``, when given, replace the old ones. A manual stored as
        text stays text: its new text is stored, no model runs. A solution's text is its
        verified question and answer: add a new solution instead of editing it.
        """
        block = self.get(ref)
        skill = self.store.skill_of_block(block.id)
        if skill is not None:
            raise InputError(f"block {block.id} is part of skill {skill!r}: edit its folder and run skillgraft skills update {skill}")
        if examples is not None:
            examples = clean_keys(description or "", examples)
        elif description is not None:
            clean_keys(description, ())
        new_text = text is not None and text != block.source
        sets = []
        if examples is not None:
            sets.append(("example", [*([block.question] if block.kind == "solution" else []), *examples]))
        if description is not None and description != block.description:
            sets.append(("description", [description]))
        if new_text:
            if block.kind == "solution":
                raise InputError(f"block {block.id} is a verified solution: add a new solution instead of editing it")
            if block.text_only:
                if not isinstance(text, str) or not text.strip():
                    raise InputError(f"manual {block.name!r} has no text")
                require_text(text, f"manual {block.name!r}")
                same = self.store.find_text(text)
            else:
                tokens = self._capturable_tokens(block.name, block.kind, text)
                same = self.store.find_same(tokens, self.engine.fingerprint.id)
            if same is not None and same.id != block.id:
                raise DuplicateBlockError(same.id, same.name, block.name)
            sets.append(("manual", manual_key_texts(text)))
        rows = self.router.key_rows(sets)  # embedded before any change: a failing embedder changes nothing
        keys = {kind: [row for row in rows if row["kind"] == kind] for kind, _ in sets}
        if new_text:
            state = None if block.text_only else self.engine.capture(tokens, progress)
            block = self.store.replace(block, state, source=text, keys={"manual": keys["manual"]})
        if "description" in keys:
            block = self.store.set_description(block.id, description, keys["description"])
        if "example" in keys:
            self.store.set_routing_keys(block.id, "example", keys["example"])
        return block

    def recapture(self, progress=None) -> "RecaptureReport":
        """Capture every block again under the current runtime, keeping names, keys and answers.

        Blocks already captured under this runtime are left alone. Use it after changing the
        model file, a context setting or the llama.cpp build. ``progress(done, total)`` is
        called per block.
        """
        runtime = self.engine.fingerprint.id
        blocks = self.list(include_quarantined=True)
        report = RecaptureReport()
        for done, block in enumerate(blocks, 1):
            if block.text_only or (block.fingerprint_id == runtime and block.status == "ok"):
                report.unchanged.append(block.id)
            else:
                try:
                    state = self.engine.capture(self._source_tokens(block.source))
                    new = self.store.replace(block, state, source=block.source)
                    report.recaptured.append({"old": block.id, "new": new.id, "name": block.name})
                except SkillgraftError as exc:
                    report.failed.append({"block_id": block.id, "name": block.name, "error": str(exc)})
            if progress:
                progress(done, len(blocks))
        return report

    # -- upkeep ----------------------------------------------------------------------------

    def check(self, *, repair: bool = False) -> "CheckReport":
        """Store integrity; repair re-captures lost blocks from their source when the runtime
        matches, and gives each manual the routing keys of its own sentences (a manual stored
        before manuals had them, or one whose keys do not match its text)."""

        def recapture(block: Block) -> Optional[KVState]:
            if block.fingerprint_id != self.engine.fingerprint.id:
                return None
            state = self.engine.capture(list(block.tokens))
            return state if state.sha256 == block.sha256 else None

        report = self.store.check(repair=repair, recapture=recapture if repair else None)
        if repair:
            keyed: dict[str, set[str]] = {}
            for key in self.store.routing_keys():
                if key["kind"] == "manual":
                    keyed.setdefault(key["block_id"], set()).add(key["text"])
            skill_blocks, _ = self.store.skill_routing()
            for block in self.store.blocks(kind="manual", include_quarantined=False):
                if block.id in skill_blocks:  # an imported skill's keys follow its own policy
                    continue
                texts = manual_key_texts(block.source)
                if keyed.get(block.id, set()) != {t.strip() for t in texts}:
                    self.router.replace_keys(block, texts, kind="manual")
                    problem = "routing keys that are not the manual's sentences" if block.id in keyed else (
                        "no routing keys from the manual's sentences")
                    report.repaired.append({
                        "block_id": block.id, "name": block.name, "problem": problem, "action": f"set {len(texts)}",
                    })
        return report
