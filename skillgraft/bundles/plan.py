"""Planning a bundle import: what to do with each row, decided before anything is deposited.

The :class:`Planner` checks every row against the store and this runtime (see the trust
rules in :mod:`skillgraft.bundles.transfer`): a solution is re-verified by re-running its method, a
payload of this runtime is recomputed from its source text (unless ``trust_payloads``), a
foreign block is skipped or planned for re-capture, and clashes of names, texts and answers
are skipped with their reason.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Union

from ..core.blocks import solution_text, tokens_sha256
from .reader import Row, payload
from ..core.chat_layout import block_tokens
from ..core.questions import normalize_question
from ..errors import BundleError, ContextOverflowError, SkillgraftError
from ..routing.router import clean_query
from ..skills.window_fit import block_overflow
from ..verify.verifiers import make_verifier

if TYPE_CHECKING:
    from ..memory import SkillMemory
    from ..verify.verifiers import Verdict


@dataclass(frozen=True)
class SkippedBlock:
    """A bundle block left out, and why."""

    block_id: str
    name: str
    kind: str
    reason: str


@dataclass(frozen=True)
class ImportPlan:
    """What import will do with one row, decided before anything is deposited."""

    row: Row
    action: str  # "deposit" the bundle's payload, "recapture" a manual, "solution" via add_solution
    how: str
    verdict: Optional["Verdict"] = None


class Planner:
    """Checks every row against the store and this runtime; collects plans and skips."""

    def __init__(self, memory: "SkillMemory", tar: tarfile.TarFile, allow_foreign: bool, trust_payloads: bool) -> None:
        self.memory, self.tar = memory, tar
        self.allow_foreign, self.trust_payloads = allow_foreign, trust_payloads
        self.runtime = memory.engine.fingerprint
        self.plans: list[ImportPlan] = []
        self.skipped: list[SkippedBlock] = []
        self.local = {b.id: b for b in memory.store.blocks()}
        self.local_names = {b.name: b for b in self.local.values()}
        self.names: set[str] = set()
        self.texts: set[str] = set()
        self.questions: dict[str, str] = {}

    def skip(self, row: Row, reason: str) -> None:
        b = row.block
        self.skipped.append(SkippedBlock(b.id, b.name, b.kind, reason))

    def plan(self, row: Row) -> None:
        block = row.block
        payload(self.tar, row, keep=False)  # every payload is checked, whatever happens to its row
        foreign = row.fingerprint.id != self.runtime.id
        if foreign and not self.allow_foreign:
            return self.skip(row, f"captured under another runtime ({row.fingerprint.id}); pass allow_foreign")
        if block.id in self.local:
            return self.skip(row, "already in the store")
        key = self._question_key(row) if block.kind == "solution" else None
        reason = self._answer_problem(row, key) if key is not None else None
        if reason:
            return self.skip(row, reason)
        taken = self.local_names.get(block.name)
        if taken is not None:
            return self.skip(row, f"the name {block.name!r} is taken by local block {taken.id} of other content")
        if block.name in self.names:
            return self.skip(row, f"an earlier block of the bundle is also named {block.name!r}")
        verdict = None
        if key is not None:
            verdict = self._reverify(row, key)
            if isinstance(verdict, str):
                return self.skip(row, verdict)
        if foreign and (block.kind == "solution" or not self.trust_payloads):
            plan = self._recapture(row, verdict)
        elif foreign:
            plan = ImportPlan(row, "deposit", "kept as captured under another runtime (trust_payloads: size, SHA-256 checked)")
        else:
            plan = self._same_runtime(row, verdict)
        if plan is None:
            return None
        self.names.add(block.name)
        self.plans.append(plan)
        return None

    def _question_key(self, row: Row) -> str:
        """The normalized question of a solution row whose text is its question, answer and method."""
        block = row.block
        question, answer = block.question, block.answer
        if not question or question != question.strip() or not answer or answer != answer.strip():
            raise BundleError(f"bundle block {block.id}: its question and answer must be non-empty and unpadded")
        if block.source != solution_text(question, answer, block.method):
            raise BundleError(
                f"bundle block {block.id}: its source text is not the text of its question, answer and method"
            )
        try:
            key = normalize_question(clean_query(question))
        except SkillgraftError as exc:
            raise BundleError(f"bundle block {block.id}: its question is unusable: {exc}") from None
        if not key:
            raise BundleError(f"bundle block {block.id}: its question {question!r} holds nothing visible to recur by")
        return key

    def _answer_problem(self, row: Row, key: str) -> Optional[str]:
        """Why this solution must not be imported even if verified: a local or earlier answer."""
        local = self.memory.store.solutions_for(key)
        if local:
            other = local[0]
            if other.answer == row.block.answer:
                return f"the question is already answered by local block {other.id}"
            return f"conflicts with local block {other.id}, which answers {other.answer!r}: the local answer is kept"
        if key in self.questions:
            return f"an earlier block of the bundle ({self.questions[key]}) answers the same question"
        return None

    def _reverify(self, row: Row, key: str) -> Union["Verdict", str]:
        """The verdict of re-running a solution's method here, or why it cannot be imported."""
        block = row.block
        if block.verifier != "python" or not (block.method or "").strip():
            return (
                f"verified by {block.verifier or 'nothing'} with no method this store can re-run "
                "(ground truth and callables are not in a bundle): not re-verified, not imported"
            )
        verdict = make_verifier("python").check(block.question, block.answer, block.method)
        if not verdict.ok:
            return f"re-running its method here did not verify it: {verdict.detail}"
        self.questions[key] = block.id
        return verdict

    def _fits(self, tokens: list[int]) -> Optional[str]:
        """Why a block of ``tokens`` cannot be used here, by the memory's own rule for captures."""
        return block_overflow(len(tokens), self.memory.engine.n_ctx)

    def _usable(self, row: Row, tokens: list[int]) -> bool:
        """Whether a block of ``tokens`` fits this runtime and is new here and in the bundle; else skip it."""
        problem = self._fits(tokens)
        same = self.memory.store.find_same(tokens, self.runtime.id)
        if problem or same is not None:
            self.skip(row, problem or f"its text is already stored as local block {same.id} ({same.name})")
            return False
        digest = tokens_sha256(tokens)
        if digest in self.texts:
            self.skip(row, "an earlier block of the bundle has the same text")
            return False
        self.texts.add(digest)
        return True

    def _recapture(self, row: Row, verdict: Optional["Verdict"]) -> Optional[ImportPlan]:
        """A foreign row (or any solution) captured here from its source at deposit time."""
        block = row.block
        if not self._usable(row, block_tokens(self.memory.engine, block.source)):
            return None
        if block.kind == "solution":
            return ImportPlan(row, "solution", "re-verified by its method and re-captured under this runtime", verdict)
        return ImportPlan(row, "recapture", "re-captured under this runtime from its source text")

    def _same_runtime(self, row: Row, verdict: Optional["Verdict"]) -> Optional[ImportPlan]:
        block = row.block
        tokens = block_tokens(self.memory.engine, block.source)
        if tuple(tokens) != block.tokens:
            raise BundleError(
                f"bundle block {block.id} ({block.name}): its tokens are not the tokenization of its source text"
            )
        if not self._usable(row, tokens):
            return None
        how = "payload trusted (trust_payloads: size, SHA-256 and tokens checked)"
        if not self.trust_payloads:
            try:
                state = self.memory.engine.capture(tokens)
            except ContextOverflowError as exc:
                self.skip(row, str(exc))
                return None
            if state.sha256 != block.sha256:
                raise BundleError(
                    f"bundle block {block.id} ({block.name}): its payload does not belong to its source text "
                    f"(captured here it hashes to {state.sha256[:16]})"
                )
            how = "payload recomputed from its source text"
        if block.kind == "solution":
            return ImportPlan(row, "solution", "re-verified by its method; " + how, verdict)
        return ImportPlan(row, "deposit", how)
