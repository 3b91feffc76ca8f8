"""Deposits: capturing a manual or a verified solution as a block, and its routing keys.

Name clashes and duplicate texts are settled *before* anything is captured; a solution is
verified before it is captured, and only verified solutions are stored. :class:`Deposits`
is mixed into :class:`~skillgraft.memory.SkillMemory`, which provides ``engine``, ``store``
and ``router``.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

from ..core import telemetry
from ..core.blocks import Block, solution_text
from ..core.chat_layout import block_tokens
from ..core.expiry import Expiry, expiry_of
from ..core.questions import normalize_question, question_sha256
from ..core.sha import ID_LIKE
from ..core.text_checks import MAX_QUERY_CHARS, clean_query, require_text
from ..errors import BlockNotFoundError, ConflictError, ContextOverflowError, DuplicateBlockError, InputError, NameTakenError
from ..routing.router import MAX_EXAMPLES, manual_key_texts, name_key
from ..skills.window_fit import QUERY_ROOM_TOKENS, block_room
from ..store.ledger import LedgerEvent
from ..verify.verifiers import make_verifier
from .route_names import require_routable

# A block must leave this many tokens of the context free for the question and the answer.
MAX_NAME_CHARS = 200


class Deposits:
    """``add_manual`` and ``add_solution`` of a memory."""

    def _source_tokens(self, text: str) -> list[int]:
        """The tokens a block of ``text`` captures: the chat prefix with ``text`` as system turn."""
        return block_tokens(self.engine, text)

    def _capturable_tokens(self, name: str, kind: str, text) -> list[int]:
        """The tokens a block of ``text`` would hold, or a clear error before any capture."""
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{kind} {name!r} has no text")
        require_text(text, f"{kind} {name!r}")
        tokens = self._source_tokens(text)
        room = block_room(self.engine.n_ctx)
        if len(tokens) > room:
            hint = "split it into several manuals, say one per heading (skillgraft add-manual NAME FILE --split)"
            raise ContextOverflowError(
                len(tokens), room, f"{kind} {name!r} (the context keeps {QUERY_ROOM_TOKENS} tokens free for questions)",
                hint=hint if kind == "manual" else "",
            )
        return tokens

    def _settle_capture(self, name: str, kind: str, text: str) -> tuple[list[int], Optional[Block]]:
        """Settle name clashes and duplicate text *before* any capture.

        Returns the tokens to capture and, when this very text is already stored under this
        name, that block (nothing to capture). Raises :class:`NameTakenError` or
        :class:`DuplicateBlockError` otherwise.
        """
        taken = self._named(name)
        if taken is not None:
            if taken.source == text and taken.status == "ok":
                return list(taken.tokens), taken
            raise NameTakenError(name, taken.id)
        tokens = self._capturable_tokens(name, kind, text)
        same = self.store.find_same(tokens, self.engine.fingerprint.id)
        if same is not None and same.status == "ok":
            if same.name == name and same.source == text:  # another process stored it meanwhile
                return tokens, same
            raise DuplicateBlockError(same.id, same.name, name)
        return tokens, None

    def _not_a_question(self, name: str) -> None:
        """Refuse a manual named like a verified question (its text or its solution's name)."""
        key = normalize_question(name)
        if (key and self.store.solutions_for(key)) or name.casefold().startswith("solution-"):
            raise InputError(f"the name {name!r} reads as a verified question or a solution's name: name the manual "
                             "by its topic")

    def _named(self, name: str) -> Optional[Block]:
        try:
            block = self.store.get(name)
        except BlockNotFoundError:
            return None
        return block if block.name == name else None

    def _capture(
        self, name: str, kind: str, text: str, description: str, solution: Optional[dict], progress=None
    ) -> Block:
        tokens, existing = self._settle_capture(name, kind, text)
        if existing is not None:
            return existing
        state = self.engine.capture(tokens, progress)
        block, _ = self.store.put(state, name=name, kind=kind, source=text, description=description, solution=solution)
        if block.name != name:  # the very same bytes are stored already (under another runtime)
            raise DuplicateBlockError(block.id, block.name, name)
        return block

    def _text_manual(self, name: str, text: str, description: str) -> Block:
        self._capturable_tokens(name, "manual", text)  # a manual that could never be placed is refused now
        taken = self._named(name)
        if taken is not None:
            if taken.source == text and taken.status == "ok" and taken.kind == "manual":
                return taken  # the same manual, stored as text or captured
            raise NameTakenError(name, taken.id)
        block, _ = self.store.put_text(text, name=name, description=description)
        if block.name != name:  # the very same text is stored already
            raise DuplicateBlockError(block.id, block.name, name)
        return block

    def add_manual(
        self, name: str, text: str, *, examples: Sequence[str] = (), description: str = "", progress=None,
        capture: bool = True, expires: Optional[Expiry] = None, imported: bool = False,
    ) -> Block:
        """Capture a skill manual as a block and make it routable by its name, description,
        examples and its own sentences; with ``capture`` False store it as a text block instead
        (no model runs: its cells are made where it is first used, after the app's own prompt,
        as an imported skill's are).

        A name already taken raises :class:`NameTakenError` and a text already stored under
        another name :class:`DuplicateBlockError`, both before anything is captured; the same
        text under the same name returns the stored block. ``progress(done, total)`` is
        called as the manual's tokens are prefilled. ``expires`` (a time, a duration from now,
        or a text naming either: :mod:`skillgraft.core.expiry`) hides the block after it.
        ``imported``: the name comes from stored data (a bundle), kept even where the gateway's
        paths cannot reach it (:mod:`.route_names`; its id does).
        """
        name = clean_name(name, imported=imported)
        self._not_a_question(name)
        examples = clean_keys(description, examples)
        stamp = expiry_of(expires)
        new = self._named(name) is None
        block = telemetry.deposited(self.namespace, lambda: self._manual(name, text, description, examples, progress,
                                                                         capture), _named, text=text)
        if new:  # the same manual given again is no deposit
            self.store.log(LedgerEvent("deposit", decision="manual", block_id=block.id,
                                       detail={"stored": "text" if block.text_only else "captured"}))
        return block if expires is None else self.store.set_block_expiry(block, stamp)

    def _manual(self, name: str, text: str, description: str, examples: list, progress, capture: bool) -> Block:
        block = self._capture(name, "manual", text, description, None, progress) if capture \
            else self._text_manual(name, text, description)
        self._add_keys(block, name=True, description=description, examples=examples, manual=text)
        return block

    def _add_keys(
        self, block: Block, *, name: bool = False, description: str = "", examples: Sequence[str] = (), manual: str = ""
    ) -> None:
        self.router.add_key_sets(block, [
            ("name", [name_key(block.name)] if name else []),
            ("description", [description]),
            ("example", examples),
            ("manual", manual_key_texts(manual) if manual else []),
        ])

    def add_solution(
        self,
        question: str,
        answer: str,
        *,
        method: Optional[str] = None,
        verifier=None,
        expected: Optional[str] = None,
        name: Optional[str] = None,
        examples: Sequence[str] = (),
        expires: Optional[Expiry] = None,
        imported: bool = False,
    ) -> Block:
        """Verify a solution and deposit it; unverified or failing solutions are never stored.

        ``verifier`` is ``"python"``, ``"exact"``, ``"numeric"``, a :class:`Verifier` or a
        callable ``(question, answer, method) -> bool``; ``exact`` and ``numeric`` compare
        with ``expected`` (the ground truth). ``expires`` as for :meth:`add_manual` (given, it
        is also set on the solution already stored for the question); ``imported`` as for
        :meth:`add_manual`.
        """
        stamp = expiry_of(expires)
        block = telemetry.deposited(self.namespace, lambda: self._add_solution(
            question, answer, method, verifier, expected, name, examples, imported),
            _named, text=f"{question}\n{answer}")
        return block if expires is None else self.store.set_block_expiry(block, stamp)

    def _add_solution(self, question, answer, method, verifier, expected, name, examples, imported,
                      keyed: bool = True) -> Block:
        """The verified solution stored (or the one stored already); ``keyed`` False gives it no
        routing key of its own (an experience: its question is its skills' key, :mod:`.learning`)."""
        question = clean_query(question)
        if len(question) > MAX_QUERY_CHARS:
            raise InputError(f"the question is {len(question)} characters (at most {MAX_QUERY_CHARS})")
        examples = clean_keys("", examples)
        if name is not None:
            name = clean_name(name, imported=imported)
        if not isinstance(answer, str) or not answer.strip():
            raise InputError("the answer is empty")
        answer = answer.strip()
        key = normalize_question(question)
        if not key:
            raise InputError(f"the question {question!r} holds nothing visible to recur by")
        name = name or solution_name(question, key)
        stored = self._stored_answer(key, answer, name)
        if stored is not None:
            return stored
        check = make_verifier(verifier, expected).verify(question, answer, method)
        stored = self._stored_answer(key, answer, name)  # another process may have won meanwhile
        if stored is not None:
            return stored
        block = self._capture(
            name,
            "solution",
            solution_text(question, answer, method),
            question,
            {
                "question": question,
                "question_key": key,
                "answer": answer,
                "method": method,
                "verifier": check.verifier,
                "verifier_output_sha256": check.output_sha256,
                "verify_seconds": check.seconds,
            },
        )
        if keyed:
            self.router.add_keys(block, [question, *examples], kind="example")
        self.store.log(LedgerEvent("deposit", decision="solution", block_id=block.id, detail=check.as_dict()))
        return block

    def _stored_answer(self, key: str, answer: str, name: str) -> Optional[Block]:
        """The solution already stored for this question (same answer), or a clear error.

        A different stored answer raises :class:`ConflictError`; a name held by another block
        :class:`NameTakenError`. The store decides a race inside its write transaction.
        """
        def same_answer(other: Block) -> Block:
            if other.answer != answer:
                raise ConflictError(other.question or key, other.id, other.answer or "", answer)
            return other

        for other in self.store.solutions_for(key):
            return same_answer(other)
        taken = self._named(name)
        if taken is None:
            return None
        if taken.kind == "solution" and taken.status == "ok" and taken.question_key == key:
            return same_answer(taken)  # another writer stored this question between the two reads
        raise NameTakenError(name, taken.id)


def _named(block: Block) -> list[tuple[str, str]]:
    return [(block.id, block.name)]


def clean_name(name, *, imported: bool = False) -> str:
    """``name`` stripped, or :class:`InputError` when it cannot name a block: empty, over
    ``MAX_NAME_CHARS``, unprintable, read as an id, or (unless ``imported`` from stored data)
    one the gateway's URL paths cannot reach (:func:`~.route_names.require_routable`)."""
    if not isinstance(name, str) or not name.strip():
        raise InputError("a block needs a non-empty name")
    name = name.strip()
    if len(name) > MAX_NAME_CHARS or any(not c.isprintable() for c in name):
        raise InputError(f"a block name must be printable and at most {MAX_NAME_CHARS} characters: {name[:40]!r}")
    if ID_LIKE.fullmatch(name):
        raise InputError(f"the name {name!r} has the form of a block id or an id's prefix (hex digits only): "
                         "ids and names must not be confused")
    return name if imported else require_routable(name)


def clean_keys(description, examples) -> list[str]:
    """The examples as a list, or :class:`InputError` when a routing key text is not one a
    bundle can carry (see :mod:`skillgraft.bundles.reader`): each text without NUL bytes and at
    most ``MAX_QUERY_CHARS`` long, at most ``MAX_EXAMPLES`` examples."""
    if isinstance(examples, (str, bytes)):
        raise InputError("the examples must be a list of texts, not one text")
    examples = list(examples)
    if len(examples) > MAX_EXAMPLES:
        raise InputError(f"{len(examples)} examples given (at most {MAX_EXAMPLES})")
    for what, text in [("the description", description), *(("an example", t) for t in examples)]:
        stored_as_given = what == "the description"  # examples are stored stripped, a description as given
        require_text(text, what)
        size = len(text) if stored_as_given else len(text.strip())
        if size > MAX_QUERY_CHARS:
            raise InputError(f"{what} is {size} characters (at most {MAX_QUERY_CHARS}): {text[:40]!r}")
    return examples


def solution_name(question: str, key: str) -> str:
    """A readable default name for a solution: its question's words plus a short hash."""
    words = re.sub(r"[^0-9a-z]+", "-", key.casefold()).strip("-")[:40].rstrip("-")
    return f"solution-{words}-{question_sha256(key)[:8]}" if words else f"solution-{question_sha256(key)[:10]}"
