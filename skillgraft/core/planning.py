"""The plan of an answer: what the memory recalled for a chat, turned into what the pipeline
(:mod:`skillgraft.core.pipeline`) will do — the one owner of these decisions, whichever door asks:

- **near miss**: a graft of a verified solution whose question is not this query's is a worked
  example only; its stored answer is never reused (:func:`near_miss`);
- **format**: a verified answer is returned as it is (``exact``) unless the answer must be JSON
  or a tool call: the solution is then grafted and the model writes it so (:func:`held_to_format`);
- **forced**: a door that names the block to graft (or none: an eval's baseline) hands the
  pipeline a forced recall (:func:`forced_recall`), and the same steps run;
- **not routed**: a caller that asks for a plain answer (``route=False``) gets one: nothing is
  recalled, no skill and no verified answer, and the note's reason says the caller asked
  (:data:`NOT_ROUTED`);
- **conversation**: the skills already in a conversation stay where they entered; a skill a
  later user turn needs enters before that turn, after the turns so far, so what a context
  computed for the conversation is never computed again (the default policy, ``keep``); under
  ``switch`` each turn is answered behind its own routed block, placed after the app's prefix
  (:func:`conversation_recall`; the policy is the memory's). A chat's recall is
  :func:`chat_recall`, whether the pipeline makes it or a door that decides before it answers
  asks for it (:meth:`~skillgraft.SkillMemory.recall` with ``earlier``) and hands it on; the
  skills it places are :func:`~skillgraft.core.placement.skill_places`;
- **foreign**: a block captured under another runtime is prefilled from its text when the memory
  allows it, else refused (:class:`~skillgraft.errors.FingerprintMismatchError`);
- **unusable**: a block whose state cannot be read is answered plainly, reported as a fallback
  (its row is checked here; its payload is read only where the cells do not hold it already,
  and a payload found damaged then is a fallback too: :mod:`skillgraft.core.pipeline`);
- **text**: a text block (an imported skill's part) has no state to read: any runtime uses it,
  the pipeline places its text after the app's own prompt.

:func:`plan_answer` needs only a :class:`PlanMemory` of the memory.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Optional, Protocol, Sequence

from ..errors import InputError, StoreError
from .answer import AnswerPlan, check_chat, user_turn_indices
from .questions import is_its_question
from .recall import Recall, SkillPlace
from .timings import Timings
from .tools import OutputFormat

if TYPE_CHECKING:
    from .blocks import Block
    from .fingerprint import RuntimeFingerprint
    from .states import KVState

FORCED_SCORE = 1.0
CONVERSATION_POLICIES = ("keep", "switch")
DEFAULT_CONVERSATION_POLICY = "keep"
NOT_ROUTED = "the caller turned routing off (route=False): answered plainly, nothing recalled"


class LoadedState(Protocol):
    """A block's state as a store finds it: its payload read (and verified) when first asked
    for, unless ``from_cache``."""

    state: "KVState"
    from_cache: bool
    read_s: float


class PlanMemory(Protocol):
    """What planning an answer needs of a memory (:class:`~skillgraft.memory.SkillMemory`
    hands the pipeline one)."""

    reprefill_foreign: bool
    conversation_policy: str

    @property
    def threshold(self) -> float: ...

    @property
    def gate_threshold(self) -> float: ...

    @property
    def runtime(self) -> "RuntimeFingerprint": ...

    def recall(self, query: str, *, log: bool = True) -> Recall: ...

    def check_grammar(self, grammar: str) -> None: ...

    def state_of(self, block: "Block") -> LoadedState: ...


def near_miss(recall: Recall, query: str) -> Recall:
    """``recall`` marked as a near miss when it grafts the verified solution of another question."""
    block = recall.block
    if recall.near_miss or recall.decision != "graft" or block.kind != "solution":
        return recall
    if is_its_question(block, query):
        return recall
    reason = (
        f"{recall.reason}; near miss: block {block.name!r} is the verified solution of another "
        f"question ({block.question!r}), grafted as a worked example only: its answer is not reused"
    )
    return dataclasses.replace(recall, reason=reason, near_miss=True)


def held_to_format(recall: Recall, format: Optional[OutputFormat]) -> Recall:
    """An exact recall turned into a graft of its solution when ``format`` demands structure."""
    if recall.decision != "exact" or format is None or not format.demands_structure:
        return recall
    shape = "JSON" if format.schema is not None else "a tool call"
    return dataclasses.replace(recall, decision="graft", reason=(
        f"{recall.reason}; the answer must be {shape}: the verified solution is grafted and the model writes it so"))


def forced_recall(block: Optional["Block"], threshold: float, reason: str) -> Recall:
    """A recall the door decided itself: graft ``block``, or abstain (``block`` None)."""
    if block is None:
        return Recall("abstain", None, 0.0, threshold, reason)
    return Recall("graft", block, FORCED_SCORE, threshold, reason)


def _switched(memory: PlanMemory, earlier: Sequence[str], recall: Recall) -> Recall:
    """Under the policy ``switch``: the turn is answered behind its own routed block, placed
    after the app's prefix (the conversation is prefilled again behind a new one)."""
    before = memory.recall(earlier[-1], log=False)
    held = before.block if before.decision == "graft" else None
    if held is None or held.id == recall.block.id:
        return recall
    return dataclasses.replace(recall, conversation="switched", reason=(
        f"{recall.reason}; the conversation was answered behind block {held.name!r}: switched"))


def conversation_recall(memory: PlanMemory, earlier: Sequence[str], recall: Recall) -> Recall:
    """``recall`` for a chat's last user turn, given its ``earlier`` user turns (each judged by
    this same rule, so every door and every turn agree).

    Under the policy ``keep`` (the default) the skills already in the conversation stay: each
    turn's routed block (and the set routed with it) enters before that turn unless the
    conversation holds it already, so a
    skill a later turn needs comes after the turns so far and nothing computed is computed
    again; a turn that needs none adds none. :attr:`Recall.skills` lists every skill of the
    chat and where it entered; :attr:`Recall.conversation` says ``entered`` or ``kept`` for the
    turn's own block. Under ``switch`` each turn is answered behind its own block alone.
    """
    if memory.conversation_policy == "switch":
        return _switched(memory, earlier, recall) if earlier and recall.decision == "graft" else recall
    places: list[SkillPlace] = []

    def enter(blocks, turn: int) -> None:
        """Place those of ``blocks`` the conversation does not hold yet before user turn ``turn``."""
        held = {place.block.id for place in places}
        places.extend(SkillPlace(block, turn) for block in blocks if block.id not in held)

    for turn, text in enumerate(earlier):
        enter(memory.recall(text, log=False).members, turn)
    if recall.decision != "graft":
        return dataclasses.replace(recall, skills=tuple(places)) if places else recall
    block = recall.block
    held = any(place.block.id == block.id for place in places)
    enter(recall.members, len(earlier))  # the set routed with it enters with it (what is not held yet)
    if held:
        return dataclasses.replace(recall, skills=tuple(places), conversation="kept", reason=(
            f"{recall.reason}; the conversation holds block {block.name!r} already: its place is kept"))
    if not earlier:
        return dataclasses.replace(recall, skills=tuple(places))
    return dataclasses.replace(recall, skills=tuple(places), conversation="entered", reason=(
        f"{recall.reason}; block {block.name!r} entered at user turn {len(earlier) + 1}, after the turns so far"))


def chat_recall(memory: PlanMemory, user_turns: Sequence[str]) -> Recall:
    """The recall for the last of a chat's ``user_turns``, judged after the earlier ones by the
    conversation rule (:func:`conversation_recall`)."""
    *earlier, query = user_turns
    return conversation_recall(memory, earlier, memory.recall(query, log=False))


def plan_answer(memory: PlanMemory, messages: Sequence[tuple[str, str]], *, voice: bool = False,
                recall: Optional[Recall] = None, format: Optional[OutputFormat] = None, route: bool = True) -> AnswerPlan:
    """Check a chat and recall for its last user message (unless ``recall`` is given, or
    ``route`` is False: a plain answer, nothing recalled); for a graft, find the block's state
    (its payload read when first used). :class:`InputError` for an unusable chat or a ``recall`` with ``route``
    False, :class:`FormatError` for a ``format`` this model cannot be held to."""
    chat, query = check_chat(messages)
    if format is not None:
        memory.check_grammar(format.grammar)
    started = time.perf_counter()
    if not route:
        if recall is not None:
            raise InputError("route=False answers plainly: give it no recall and no block to graft")
        recall = forced_recall(None, memory.threshold, NOT_ROUTED)
    elif recall is None:
        recall = chat_recall(memory, [content for role, content in messages if role == "user"])
    recall = near_miss(held_to_format(recall, format), query)
    timings = Timings(recall_s=time.perf_counter() - started)
    plan = AnswerPlan(chat, query, recall, memory.gate_threshold, timings=timings,
                      user_turns=user_turn_indices([(role, "") for role, _ in messages]))
    if not (recall.decision == "graft" or (voice and recall.decision == "exact")):
        return plan
    block, runtime = recall.block, memory.runtime
    if block.text_only:  # its cells are made where it is used (the pipeline's prompt places it)
        return plan
    if block.fingerprint_id != runtime.id and memory.reprefill_foreign:
        return dataclasses.replace(plan, reprefill=True)
    try:
        loaded = memory.state_of(block)
    except StoreError as exc:  # a damaged block is quarantined by the store: answered plainly
        return dataclasses.replace(plan, unusable=f"the routed block {block.id} cannot be read: {exc}")
    loaded.state.fingerprint.require_equal(runtime, block.id)
    timings.load_s, timings.from_cache = loaded.read_s, loaded.from_cache
    return dataclasses.replace(plan, state=loaded.state)
