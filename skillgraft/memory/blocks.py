"""``memory.blocks``: the memory's blocks — read (list, get, the store that holds one, its known
size), forced into a graft, deleted, renamed, updated, captured again under a new runtime and
checked with repair — over the memory's own store and, for a namespace, the base it reads
(:mod:`skillgraft.memory.namespaces`): its own blocks first, the base read-only; what has expired
hidden (``memory.expiry``, :class:`~.expiry.Expiries`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence, Union

from ..core.blocks import Block
from ..core.chat_layout import block_size
from ..core.planning import forced_recall
from ..core.questions import normalize_question
from ..core.recall import Recall
from ..core.states import KVState
from ..core.text_checks import require_text
from ..errors import BlockNotFoundError, DuplicateBlockError, InputError, SharedBaseError, SkillgraftError
from ..routing.experience import EXPERIENCE, SOLUTION_ORIGIN
from ..routing.router import manual_key_texts, name_key
from .deposits import clean_keys, clean_name

if TYPE_CHECKING:
    from ..store.check import CheckReport

__all__ = ["Blocks", "RecaptureReport", "block_in"]


@dataclass
class RecaptureReport:
    """What :meth:`Blocks.recapture` did."""

    recaptured: list = field(default_factory=list)
    unchanged: list = field(default_factory=list)
    failed: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class Blocks:
    """``memory.blocks``: every verb on a memory's blocks (the imported skills' own are ``memory.skills``')."""

    def __init__(self, memory) -> None:
        self.memory = memory

    def store_of(self, block: Block):
        """The store holding ``block``: this memory's own, or the base a namespace reads."""
        if self.memory.base is None:
            return self.memory.store
        try:
            self.memory.store.get(block.id)
            return self.memory.store
        except BlockNotFoundError:
            return self.memory.base

    def known_tokens(self, block: Block) -> Optional[int]:
        """The tokens ``block`` adds to a prompt, without loading a model: a captured block's own
        count; a text block's counted by the engine when one is loaded already, else None."""
        if not block.text_only:
            return block.n_tokens
        engine = getattr(self.memory, "_engine", None)
        return None if engine is None else block_size(engine, block)

    def list(self, kind: Optional[str] = None, *, include_quarantined: bool = False,
             include_expired: bool = False) -> list[Block]:
        """Every block (of ``kind``), oldest first; a namespace's own, then the base's. Those
        past their expiry (or their skill's) only with ``include_expired``."""
        blocks = [block for store in self.memory._stores()
                  for block in store.blocks(kind=kind, include_quarantined=include_quarantined)]
        return blocks if include_expired else self.memory.expiry.visible(blocks)

    def get(self, ref: str) -> Block:
        """A block by id, unique id prefix, name, an imported skill's name (the first block of
        its default version), or the question a solution answers; a namespace's own block
        before the base's."""
        try:
            return block_in(self.memory.store, ref)
        except BlockNotFoundError:
            if self.memory.base is None:
                raise
            return block_in(self.memory.base, ref)

    def forced_graft(self, block: Union[Block, str], named_by: str = "the caller") -> Recall:
        """The recall that grafts ``block`` (a :class:`Block`, or what :meth:`get` reads: a
        namespace's own block, else the base's) whatever routing would say: every forced graft
        (``answer(block=...)``, an adapter's ``block_id``) is made here. One expired, or part of
        an expired skill, is :class:`ExpiredError` (``memory.expiry.live``); one quarantined is answered
        plainly by the pipeline, as a routed one is."""
        block = self.memory.expiry.live(block if isinstance(block, Block) else self.get(block))
        return forced_recall(block, self.memory.router.threshold, f"block {block.name!r} named by {named_by}")

    def delete(self, ref: str) -> Block:
        """Delete a block, its routing keys (a solution's experience keys too) and (when no other
        block shares it) its file. A block of an imported skill is removed with its skill
        (``skills.remove``); a block of the base a namespace reads is :class:`SharedBaseError`."""
        block = self.get(ref)
        if self.store_of(block) is not self.memory.store:
            raise SharedBaseError(ref, self.memory.namespace)
        skill = self.memory.store.skill_of_block(block.id)
        if skill is not None:
            raise InputError(f"block {block.id} is part of skill {skill!r}: remove the skill (skillgraft skills rm {skill})")
        if block.kind == "solution":
            self.forget_experience(block)  # a verified question is no evidence once its solution is gone
        return self.memory.store.remove(block.id)

    def rename(self, ref: str, new_name: str) -> Block:
        """Give a block a new name (free, or :class:`NameTakenError`); its name key follows."""
        block = self.get(ref)
        skill = self.memory.store.skill_of_block(block.id)
        if skill is not None:
            raise InputError(f"block {block.id} is part of skill {skill!r}: its blocks are named after the skill")
        new_name = clean_name(new_name)
        if new_name == block.name:
            return block
        keys = self.memory.router.key_rows([("name", [name_key(new_name)])])  # before any change
        renamed = self.memory.store.rename(block.id, new_name)
        self.memory.store.set_routing_keys(block.id, "name", keys)
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
        skill = self.memory.store.skill_of_block(block.id)
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
                same = self.memory.store.find_text(text)
            else:
                tokens = self.memory._capturable_tokens(block.name, block.kind, text)
                same = self.memory.store.find_same(tokens, self.memory.engine.fingerprint.id)
            if same is not None and same.id != block.id:
                raise DuplicateBlockError(same.id, same.name, block.name)
            sets.append(("manual", manual_key_texts(text)))
        rows = self.memory.router.key_rows(sets)  # embedded before any change: a failing embedder changes nothing
        keys = {kind: [row for row in rows if row["kind"] == kind] for kind, _ in sets}
        if new_text:
            state = None if block.text_only else self.memory.engine.capture(tokens, progress)
            block = self.memory.store.replace(block, state, source=text, keys={"manual": keys["manual"]})
        if "description" in keys:
            block = self.memory.store.set_description(block.id, description, keys["description"])
        if "example" in keys:
            self.memory.store.set_routing_keys(block.id, "example", keys["example"])
        return block

    def recapture(self, progress=None) -> "RecaptureReport":
        """Capture every block again under the current runtime, keeping names, keys and answers.

        Blocks already captured under this runtime are left alone. Use it after changing the
        model file, a context setting or the llama.cpp build. ``progress(done, total)`` is
        called per block.
        """
        runtime = self.memory.engine.fingerprint.id
        blocks = self.list(include_quarantined=True)
        report = RecaptureReport()
        for done, block in enumerate(blocks, 1):
            if block.text_only or (block.fingerprint_id == runtime and block.status == "ok"):
                report.unchanged.append(block.id)
            else:
                try:
                    state = self.memory.engine.capture(self.memory._source_tokens(block.source))
                    new = self.memory.store.replace(block, state, source=block.source)
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
            if block.fingerprint_id != self.memory.engine.fingerprint.id:
                return None
            state = self.memory.engine.capture(list(block.tokens))
            return state if state.sha256 == block.sha256 else None

        report = self.memory.store.check(repair=repair, recapture=recapture if repair else None)
        if repair:
            keyed: dict[str, set[str]] = {}
            for key in self.memory.store.routing_keys():
                if key["kind"] == "manual":
                    keyed.setdefault(key["block_id"], set()).add(key["text"])
            skill_blocks, _ = self.memory.store.skill_routing()
            for block in self.memory.store.blocks(kind="manual", include_quarantined=False):
                if block.id in skill_blocks:  # an imported skill's keys follow its own policy
                    continue
                texts = manual_key_texts(block.source)
                if keyed.get(block.id, set()) != {t.strip() for t in texts}:
                    self.memory.router.replace_keys(block, texts, kind="manual")
                    problem = "routing keys that are not the manual's sentences" if block.id in keyed else (
                        "no routing keys from the manual's sentences")
                    report.repaired.append({
                        "block_id": block.id, "name": block.name, "problem": problem, "action": f"set {len(texts)}",
                    })
        return report

    def forget_experience(self, solution: Block) -> int:
        """Remove the experience keys ``solution`` gave its skills; how many."""
        origin = f"{SOLUTION_ORIGIN}{solution.id}"
        ids = [k["id"] for k in self.memory.store.routing_keys() if k["kind"] == EXPERIENCE and k.get("created_by") == origin]
        if ids:
            self.memory.store.delete_routing_keys_by_id(ids)
        return len(ids)


def block_in(store, ref: str) -> Block:
    """The block ``ref`` names in ``store`` (see :meth:`Blocks.get`)."""
    if ref in store.skill_names():
        parts = store.skill_parts(ref, store.skill_default(ref))
        if parts:
            return store.get(parts[0]["block_id"])
    try:
        return store.get(ref)
    except BlockNotFoundError:
        matches = store.solutions_for(normalize_question(ref))
        if matches:
            return matches[0]
        raise
