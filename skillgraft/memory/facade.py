"""SkillMemory: the facade an agent calls before each generation.

``recall(query)`` says what to do — ``exact`` (a verified answer to this very question),
``graft`` (one relevant block) or ``abstain`` — and ``generate(query)`` / ``answer(chat)`` /
``stream(chat)`` do it through the one answer pipeline (:mod:`skillgraft.core.pipeline`),
the same steps the gateway and the LangChain adapter run: the verified answer, the block's
KV state restored at its own position and the answer generated after it (no re-prefill),
or a plain answer. Every recall and answer writes a ledger row.

Deposits (:mod:`skillgraft.memory.deposits`) and learning from verified answers (:mod:`.learning`)
are mixed in; the blocks (``memory.blocks``, :class:`~.blocks.Blocks`), the imported Agent Skills
(``memory.skills``, :class:`~skillgraft.skills.component.Skills`), apps' prefixes (``memory.apps``,
:class:`~.app_prefixes.Apps`) and expiry (``memory.expiry``, :class:`~.expiry.Expiries`) are
components; this module holds recall and answers.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional, Sequence, Union

from ..config import EngineSettings, default_home, default_model
from ..core import telemetry
from ..core.answer import Answer, AnswerOptions, AnswerPlan
from ..core.blocks import Block
from ..core.chat_layout import with_system
from ..core.gate import gate_policy
from ..core.pipeline import AnswerPipeline, Event
from ..core.planning import CONVERSATION_POLICIES, DEFAULT_CONVERSATION_POLICY, chat_recall, near_miss, plan_answer
from ..core.questions import normalize_question
from ..core.recall import Recall
from ..core.text_checks import clean_query
from ..core.timings import Timings
from ..core.tools import OutputFormat
from ..errors import InputError
from ..routing.calibration import RouterCalibration
from ..routing.router import Router
from ..skills.component import Skills
from ..store.derived_states import DEFAULT_DERIVED_BYTES
from .answer_records import Ledger
from .app_prefixes import Apps
from .blocks import Blocks
from .confidence_gate import ConfidenceGate
from .deposits import Deposits
from .expiry import Expiries
from .learning import Learning
from .old_names import MOVED, moved_verb
from .prefix_states import PrefixStates
from .namespaces import better_recall, check_namespace, namespace_backends, namespace_home, open_base
from .planning_view import PlanningView

if TYPE_CHECKING:
    from ..engine.llama import Engine
    from ..protocols import CaptureEngine, TextEmbedder
    from ..routing.feedback import FeedbackResult


class SkillMemory(Deposits, Learning):
    """A block store, its router and (lazily) one engine.

    ``reprefill_foreign=True`` lets a routed block captured under another runtime (other
    model file, context size, build ...) be answered by prefilling its stored source text
    instead of raising :class:`FingerprintMismatchError`; no prefill is then avoided.
    ``catalog`` and ``blocks`` are the store's URLs (see :mod:`skillgraft.store.backends`).
    ``gate`` is the confidence gate's policy after a graft: ``"advisory"`` (the default:
    report it, never discard) or ``"enforce"`` (answer plainly when not confident).
    ``read_only=True`` opens the store without writing anything (see :class:`BlockStore`).
    ``conversations``: ``"keep"`` (the default) keeps a conversation's skills where they entered
    and lets a skill a later turn needs enter after the turns so far; ``"switch"`` answers each
    turn behind its own block alone (:func:`~skillgraft.core.planning.conversation_recall`).
    ``embedder`` is a spec (``minilm``, ``mpnet``, a folder, an ``http(s)://`` embeddings
    endpoint) or an object with ``name`` and ``encode``; by default ``$SKILLGRAFT_EMBEDDER``,
    else the encoder the store records, else MiniLM (:mod:`skillgraft.routing.encoders`).
    ``namespace`` (default ``default``: the home's own store) opens a namespace's memory: its
    own store in the home, over the home's store as a read-only base
    (:mod:`skillgraft.memory.namespaces`).

    Its components: ``blocks`` (list, get, delete, rename, update, recapture, check:
    :class:`~skillgraft.memory.blocks.Blocks`), ``skills`` (the imported Agent Skills: import,
    versions, warm, pins, evals: :class:`~skillgraft.skills.Skills`), ``apps`` (apps' own
    prefixes by name: :class:`~skillgraft.memory.app_prefixes.Apps`), ``expiry`` (set, list,
    prune, and what expiries hide now: :class:`~skillgraft.memory.expiry.Expiries`), ``states``
    (the prefix states of this runtime: :class:`~skillgraft.memory.prefix_states.PrefixStates`),
    ``ledger`` (the rows of recalls and answers: :class:`~skillgraft.memory.answer_records.Ledger`)
    and ``confidence_gate`` (the gate's threshold and its calibration:
    :class:`~skillgraft.memory.confidence_gate.ConfidenceGate`).
    """

    def __init__(
        self,
        home: Union[str, Path, None] = None,
        *,
        model: Union[str, Path, None] = None,
        settings: Optional[EngineSettings] = None,
        embedder: Union[str, Path, TextEmbedder, None] = None,
        engine: Optional[CaptureEngine] = None,
        reprefill_foreign: bool = False,
        catalog: Optional[str] = None,
        blocks: Optional[str] = None,
        gate: Union[str, bool, None] = None,
        read_only: Optional[bool] = None,
        derived_bytes: Optional[int] = None,
        conversations: str = DEFAULT_CONVERSATION_POLICY,
        namespace: Optional[str] = None,
    ) -> None:
        from ..routing.encoders import choose_embedder

        if conversations not in CONVERSATION_POLICIES:
            raise InputError(f"conversations must be one of {', '.join(CONVERSATION_POLICIES)}, got {conversations!r}")
        from ..store.block_store import BlockStore

        if embedder is not None and not isinstance(embedder, (str, Path)):
            embedder = choose_embedder(embedder)  # checked before the store is opened
        self.namespace = check_namespace(namespace)
        telemetry.check()  # spans asked for without opentelemetry: a ConfigError now, not at the first recall
        home = Path(home or default_home()).expanduser()
        own_home = namespace_home(home, self.namespace)
        self.base: Optional[BlockStore] = open_base(home, self.namespace, catalog, blocks)  # None but for a namespace
        try:
            own_catalog, own_blocks = namespace_backends(self.namespace, catalog, blocks, read_only=bool(read_only))
            self.store = BlockStore(own_home, read_only=read_only, catalog=own_catalog, blocks=own_blocks)
        except BaseException:
            self._close_base()
            raise
        self.model = model or default_model()
        self.settings = settings
        self._engine = engine
        self._owns_engine = engine is None
        self.reprefill_foreign = reprefill_foreign
        self.conversations = conversations
        try:
            self.router = Router(self.store, choose_embedder(embedder, self.base or self.store))
            self.base_router = None if self.base is None else Router(self.base, self.router.embedder)
        except BaseException:
            self.store.close()
            self._close_base()
            raise
        self.gate = gate_policy(gate)
        self.derived_bytes = DEFAULT_DERIVED_BYTES if derived_bytes is None else derived_bytes
        self.blocks, self.skills, self.apps, self.expiry = Blocks(self), Skills(self), Apps(self), Expiries(self)
        self.states, self.ledger, self.confidence_gate = PrefixStates(self), Ledger(self), ConfidenceGate(self)

    @classmethod
    def open(cls, home: Union[str, Path, None] = None, **options) -> "SkillMemory":
        """Open (creating if needed) the store at ``home`` or ``$SKILLGRAFT_HOME``, or with
        ``namespace`` that namespace's store in it."""
        return cls(home, **options)

    @property
    def engine(self) -> "Engine":
        """The engine, loaded on first use (routing alone never loads the model)."""
        if self._engine is None:
            from ..engine.llama import Engine

            self._engine = Engine(self.model, self.settings)
        return self._engine

    def close(self) -> None:
        self.skills.stop_warming()
        self.states.flush()  # the derived states the context still holds reach the store
        if self._engine is not None and self._owns_engine:
            self._engine.close()
            self._engine = None
        self.store.close()
        self._close_base()

    def __getattr__(self, name: str):
        """The verbs by their names before the components held them (:data:`~.old_names.MOVED`),
        for one release: each call warns."""
        if name in MOVED and MOVED[name][0] in self.__dict__:
            return moved_verb(self.__dict__[MOVED[name][0]], MOVED[name][0], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _stores(self) -> list:
        """The stores this memory reads, its own first: with a namespace, then the base."""
        return [self.store] if self.base is None else [self.store, self.base]

    def _close_base(self) -> None:
        if self.base is not None:
            self.base.close()

    def __enter__(self) -> "SkillMemory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- recall ----------------------------------------------------------------------------

    def route(self, query) -> Recall:
        """The routing decision alone: ``graft`` one block or ``abstain``.

        Only blocks this runtime can graft (and text blocks) are candidates when the store
        holds blocks of several runtimes, say two models, unless ``reprefill_foreign`` is set."""
        accept = None
        runtimes = set(self.store.fingerprint_ids()) | set(self.base.fingerprint_ids() if self.base else ())
        if not self.reprefill_foreign and len(runtimes) > 1:
            runtime = self.engine.fingerprint.id
            accept = lambda block: block.text_only or block.fingerprint_id == runtime  # noqa: E731
        recall = self.router.route(query, accept=accept)
        if self.base_router is not None:
            recall = better_recall(recall, self.base_router.route(query, accept=accept))
        return near_miss(recall, query)

    def recall(self, query, *, log: bool = True, earlier: Sequence[str] = ()) -> Recall:
        """``exact`` when the normalized query is a verified question, else :meth:`route`; with
        ``earlier`` (the chat's user turns before ``query``) judged after them as :meth:`answer`
        judges a chat (:func:`~skillgraft.core.planning.chat_recall`)."""
        query = clean_query(query)
        if isinstance(earlier, (str, bytes)):
            raise InputError("earlier must be a list of the chat's earlier user turns, not one text")
        recall, took = telemetry.recalled(self.namespace, query, lambda: chat_recall(PlanningView(self), [*earlier, query])
                                          if earlier else self._recalled(query))
        if log:
            self.ledger.recalled("recall", query, recall, timings=Timings(recall_s=took))
        return recall

    def _recalled(self, query: str) -> Recall:
        """The recall of one clean query, alone: its verified answer, else :meth:`route`."""
        key = normalize_question(query)
        for store in self._stores():
            matches = self.expiry.visible(store.solutions_for(key))  # an expired solution answers nothing
            if matches:
                block = matches[0]
                return Recall("exact", block, 1.0, 1.0, f"the question recurs: verified answer in block {block.id}")
        return self.route(query)

    def calibrate(self, in_domain, out_of_domain, **options) -> RouterCalibration:
        """Choose and store the abstain threshold; see :meth:`Router.calibrate`."""
        return self.router.calibrate(in_domain, out_of_domain, **options)

    # -- answers ---------------------------------------------------------------------------

    def plan(self, messages: Sequence[tuple[str, str]], *, voice: bool = False, recall: Optional[Recall] = None,
             format: Optional[OutputFormat] = None, route: bool = True) -> AnswerPlan:
        """The pipeline's plan for a chat (:func:`~skillgraft.core.planning.plan_answer`):
        checked, recalled for its last user message unless ``recall`` is given or ``route`` is
        False, the block's state read and verified for a graft."""
        return plan_answer(PlanningView(self), messages, voice=voice, recall=recall, format=format, route=route)

    def pipeline(self, gate: Union[str, bool, None] = None) -> AnswerPipeline:
        """The answer pipeline over this memory's engine, recording answers in the ledger."""
        return AnswerPipeline(self.engine, gate=self.gate if gate is None else gate, record=self.ledger.answered)

    def answer(self, messages: Sequence[tuple[str, str]], options: Optional[AnswerOptions] = None, *,
               gate: Union[str, bool, None] = None, recall: Optional[Recall] = None,
               block: Union[Block, str, None] = None, route: bool = True) -> Answer:
        """Answer a chat of ``[(role, content), ...]`` (the last message the user's or a tool's
        result) through the answer pipeline: exact, graft, fallback or abstain, as every door
        does. ``block`` (a :class:`Block`, id or name) is grafted whatever routing would say (a
        forced recall); ``recall`` is a recall made beforehand; ``route=False`` answers plainly
        (the model alone: no skill, no verified answer; the note's reason says it was asked)."""
        options = options or AnswerOptions()
        plan = self.plan(messages, voice=options.voice, recall=self._given(recall, block), format=options.format,
                         route=route)
        with self._slot(plan, options) as slot:
            return self.pipeline(gate).answer(plan, slot, options)

    def stream(self, messages: Sequence[tuple[str, str]], options: Optional[AnswerOptions] = None, *,
               gate: Union[str, bool, None] = None, recall: Optional[Recall] = None,
               block: Union[Block, str, None] = None, route: bool = True) -> Iterator[Event]:
        """The answer as events: an :class:`AnswerNote`, text deltas (``str``), then an
        ``AnswerEnd``. The chat is checked and recalled before this returns; ``recall``,
        ``block`` and ``route`` as for :meth:`answer`."""
        options = options or AnswerOptions()
        plan = self.plan(messages, voice=options.voice, recall=self._given(recall, block), format=options.format,
                         route=route)
        pipeline = self.pipeline(gate)

        def events() -> Iterator[Event]:
            with self._slot(plan, options) as slot:
                yield from pipeline.events(plan, slot, options)

        return events()

    def _given(self, recall: Optional[Recall], block: Union[Block, str, None]) -> Optional[Recall]:
        """The recall a caller made: ``recall`` itself, or a forced graft of ``block``."""
        if block is None:
            return recall
        if recall is not None:
            raise InputError("give a recall or a block to graft, not both")
        return self.blocks.forced_graft(block)

    def _forced(self, block: Union[Block, str], messages, options: AnswerOptions) -> Answer:
        """``block`` grafted for ``messages`` through the pipeline, the gate advisory, nothing recorded."""
        plan = self.plan(messages, recall=self._given(None, block))
        with self._slot(plan, options) as slot:
            return AnswerPipeline(self.engine, gate="advisory").answer(plan, slot, options)

    def _slot(self, plan: AnswerPlan, options: AnswerOptions):
        if not (plan.needs_model or options.voice):
            return nullcontext(None)
        return self.engine.answer_slot(self.states.cache)

    def generate(
        self,
        query,
        *,
        system: Optional[str] = None,
        max_tokens: int = 128,
        temperature: float = 0.0,
        seed: int = 0,
        voice: bool = False,
        gate: Union[str, bool, None] = None,
        recall: Optional[Recall] = None,
        stop: Sequence[str] = (),
        route: bool = True,
    ) -> Answer:
        """Answer one question (see :meth:`answer`), with the app's ``system`` prompt: a grafted
        skill follows it (the app's prefix first); it never changes what the query recalls.
        ``route=False`` answers plainly, as for :meth:`answer`."""
        query = clean_query(query)
        options = AnswerOptions(max_tokens=max_tokens, temperature=temperature, seed=seed, voice=voice, stop=tuple(stop))
        return self.answer(with_system(system, [("user", query)]), options, gate=gate, recall=recall, route=route)

    def feedback(self, query: str, expected: Optional[str]) -> "FeedbackResult":
        """Correct the routing of ``query``: it belongs to block ``expected`` (name or id), or
        to no block with ``None`` (see :mod:`skillgraft.routing.feedback`)."""
        from ..routing.feedback import give_feedback

        return give_feedback(self, query, expected)
