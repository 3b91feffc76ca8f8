"""What the gateway does with one chat: the memory's plan, then the one answer pipeline
(:mod:`skillgraft.core.pipeline`) in a leased llama-server slot.

:meth:`Gateway.prepare` checks the chat and recalls (the last user message is the query);
:meth:`Gateway.stream` runs the pipeline's steps — exact, graft (the server must report
that it reused exactly the block's kept cells, ``cache_n``), fallback or abstain — the same
steps :class:`~skillgraft.memory.SkillMemory` runs in-process, so the same request gets the
same answer through either door. A server that dies under a request that has sent nothing
to its client yet is restarted by the pool and the request answered again afresh, once (on
another server when there is one).

The store, router and embedder are used under one lock (a catalog connection serves one
thread at a time); deposits and routing corrections use a second memory with its own
connection, so a long capture never stalls recalls. The API routes call the gateway's verbs
(answers, skills, skill texts, routing corrections), which take the right lock.

Each namespace has a gateway of its own (:meth:`Gateway.tenant`: its memory, writer, locks
and derived states, over the same pool), opened on its first request: the namespace's store
over the home's store as a read-only base (:mod:`skillgraft.memory.namespaces`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence, Union

from ..core.answer import Answer, AnswerEnd, AnswerNote, AnswerOptions, AnswerPlan
from ..core.blocks import Block
from ..core.deadline import GENERATION_TIMEOUT_S, REQUEST_TIMEOUT_S, Deadline
from ..core.pipeline import AnswerPipeline, Event, Prompt, collect_choices
from ..core.planning import DEFAULT_CONVERSATION_POLICY
from ..core.skill_text import SkillRecall, SkillText, recall_text, skill_text
from ..core.tools import OutputFormat
from ..errors import DeadlineError, ServerError, SlotReuseError
from ..memory import SkillMemory
from ..memory.namespaces import DEFAULT_NAMESPACE, check_namespace
from ..store.derived_budget import shared_bytes
from ..routing.feedback import Correction, FeedbackResult, give_feedback, list_corrections, remove_correction
from .captures import BackgroundCaptures, CaptureStatus
from .metrics import GatewayMetrics
from .pool import Lease, ServerPool
from .pooled_engine import PooledEngine

logger = logging.getLogger("skillgraft.gateway")

DEATH_GRACE_S = 1.0


class AnsweredAgain:
    """An event of a buffered stream: the events before it are void (a server died under them)."""


ANSWERED_AGAIN = AnsweredAgain()


def whole_answer(events: Iterable[Event]) -> list[Event]:
    """The events of a buffered :meth:`Gateway.stream` that count: those after its last
    :data:`ANSWERED_AGAIN`."""
    kept: list[Event] = []
    for event in events:
        if isinstance(event, AnsweredAgain):
            kept = []
        else:
            kept.append(event)
    return kept


def _server_died(lease: Lease, generation: int) -> bool:
    """Whether the leased server died under the request (it is restarted if not yet),
    rather than refusing it: only then is the request worth retrying elsewhere. A dropped
    connection can arrive before the process is reaped, so its end is awaited briefly."""
    engine = lease.engine
    if engine.restarts == generation and not engine.exited_within(DEATH_GRACE_S):
        return False
    engine.ensure_running()
    return True


class Gateway:
    """Plans and answers chat requests over a :class:`ServerPool`."""

    def __init__(
        self,
        home: Union[str, Path],
        pool: ServerPool,
        *,
        embedder=None,
        gate: Union[str, bool, None] = None,
        metrics: Optional[GatewayMetrics] = None,
        catalog: Optional[str] = None,
        blocks: Optional[str] = None,
        derived_bytes: Optional[int] = None,
        conversations: str = DEFAULT_CONVERSATION_POLICY,
        generation_timeout_s: float = GENERATION_TIMEOUT_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> None:
        self.pool = pool
        self.generation_timeout_s, self.request_timeout_s = generation_timeout_s, request_timeout_s
        self.metrics = metrics or GatewayMetrics()
        self.namespace = check_namespace(namespace)
        derived_bytes = shared_bytes(derived_bytes)  # one bound for the base and every namespace (a tenant's: the same)
        engine = PooledEngine(pool)
        self.memory = SkillMemory(home, engine=engine, embedder=embedder, catalog=catalog, blocks=blocks, gate=gate,
                                  derived_bytes=derived_bytes, conversations=conversations, namespace=namespace)
        self.writer = SkillMemory(home, engine=engine, embedder=self.memory.router.embedder, catalog=catalog, blocks=blocks,
                                  namespace=namespace)
        self._tenant_options = dict(
            home=home, pool=pool, embedder=self.memory.router.embedder, gate=gate, metrics=self.metrics,
            catalog=catalog, blocks=blocks, derived_bytes=derived_bytes, conversations=conversations,
            generation_timeout_s=generation_timeout_s, request_timeout_s=request_timeout_s,
        )
        self._tenants: dict[str, "Gateway"] = {}
        self._tenants_lock = threading.Lock()
        self.pipeline = AnswerPipeline(engine, gate=self.memory.gate, record=self._record)
        self.model_name = engine.model_name
        self.n_ctx = engine.n_ctx
        self.memory_lock = threading.Lock()
        self.writer_lock = threading.Lock()
        self.prefixes = self.memory.states.cache  # derived prefix states, shared by every slot
        self.captures = BackgroundCaptures(self.memory, self.memory_lock)  # the captures clients ask for
        self._warm_routing()

    def _warm_routing(self) -> None:
        """Route one query now, so the first request after a start does not pay for loading the
        encoder and the index."""
        try:
            self.memory.route("warm up")
        except Exception as exc:  # a store that cannot route yet still serves what it can
            logger.info("routing is not warm yet: %s", exc)

    def tenant(self, namespace: str) -> "Gateway":
        """The gateway of ``namespace``'s memory: this one for its own namespace, else one over
        the same pool, metrics and encoder, opened on first use and kept until :meth:`close`."""
        if namespace == self.namespace:
            return self
        with self._tenants_lock:
            found = self._tenants.get(namespace)
            if found is None:
                found = self._tenants[namespace] = Gateway(namespace=namespace, **self._tenant_options)
            return found

    def opened_tenant(self, namespace: str) -> Optional["Gateway"]:
        """The gateway of ``namespace`` if it is open already (None: :meth:`tenant` opens it)."""
        return self if namespace == self.namespace else self._tenants.get(namespace)

    def close(self) -> None:
        with self._tenants_lock:
            tenants, self._tenants = list(self._tenants.values()), {}
        for gateway in [self, *tenants]:
            gateway.captures.close()
        self.pool.settle_captures()  # the derived states the slots still hold reach the store
        for tenant in tenants:
            tenant.memory.close()
            tenant.writer.close()
        self.memory.close()
        self.writer.close()

    def _record(self, plan: AnswerPlan, note: AnswerNote, end: AnswerEnd) -> None:
        with self.memory_lock:
            self.memory.ledger.answered(plan, note, end)
        if end.timings.graft_s is not None:
            self.metrics.graft(end.timings.graft_s)

    # -- answers ---------------------------------------------------------------------------

    def prepare(self, messages: Sequence[tuple[str, str]], format: Optional[OutputFormat] = None, *,
                route: bool = True) -> AnswerPlan:
        """Check the chat (and the grammar of ``format``) and recall for its last user message
        (nothing, with ``route`` False: a plain answer); :class:`InputError` if unusable."""
        with self.memory_lock:
            return self.memory.plan(messages, format=format, route=route)

    def chat(self, plan: AnswerPlan, options: AnswerOptions, n: int = 1) -> list[Answer]:
        """The ``n`` answers (choices) to a chat that :meth:`prepare` planned, not streamed."""
        return collect_choices(plan, iter(whole_answer(self.stream(plan, options, n, buffered=True))))

    def stream(self, plan: AnswerPlan, options: AnswerOptions, n: int = 1,
               deadline: Optional[Deadline] = None, *, scope: str = "", buffered: bool = False) -> Iterator[Event]:
        """The pipeline's events for a chat :meth:`prepare` planned: per choice an
        :class:`AnswerNote`, text deltas (``str``), then an :class:`AnswerEnd`; ``n`` choices
        one after the other (choice ``i`` sampled with ``seed + i``) in one lease. The note
        comes only once the server has answered, so a failure before it is retried or raised
        before anything is sent. Past ``deadline`` (the request's) or
        :attr:`generation_timeout_s` after the lease, :class:`DeadlineError`: the lease is
        returned and the stream to the server closed, which stops it. Prefix reuse stays within
        ``scope`` (:func:`~skillgraft.kv.prefixes.reuse_scope`): no other scope's slot cells or
        derived states are continued. A server that dies under the request before it yielded
        anything is restarted and the request answered again, once; with ``buffered`` (the caller
        sends nothing before the answer is whole: a JSON answer) also after it yielded events:
        then :data:`ANSWERED_AGAIN` voids those before it (:func:`whole_answer`)."""
        started = time.perf_counter()
        if not plan.needs_model:
            return self._metered(self._choices(plan, lambda: None, options, n), started)
        return self._metered(self._leased(plan, options, n, deadline, scope, buffered), started)

    def _choices(self, plan: AnswerPlan, slot, options: AnswerOptions, n: int,
                 prompt: Optional[Prompt] = None) -> Iterator[Event]:
        """The events of ``n`` answers to the same ``prompt``, each in a fresh ``slot()`` of the same lease."""
        for index in range(n):
            seeded = dataclasses.replace(options, seed=(options.seed + index) % 2**31) if index else options
            yield from self.pipeline.events(plan, slot(), seeded, prompt)

    def _metered(self, events: Iterator[Event], started: float) -> Iterator[Event]:
        """The events, the request counted once (by its first choice's decision)."""
        counted = False
        for event in events:
            if isinstance(event, AnswerNote) and not counted:
                self.metrics.request(event.decision, time.perf_counter() - started)
                self.metrics.reused(event.reused_from, event.cache_n)
                counted = True
            yield event

    def _leased(self, plan: AnswerPlan, options: AnswerOptions, n: int, deadline: Optional[Deadline],
                scope: str, buffered: bool) -> Iterator[Event]:
        failed: list[int] = []
        again = False  # the events yielded so far are void: the answer starts again
        prompt = self.pipeline.prompt(plan, options)  # rendered once: it chooses the slot and is prefilled there
        for round_ in range(2):
            with self.pool.lease(avoid=failed, prompt=None if prompt is None else prompt.tokens, scope=scope) as lease:
                until = Deadline(self.generation_timeout_s, "generation").sooner(deadline)
                generation = lease.engine.restarts
                yielded = False
                try:
                    if again:
                        yield ANSWERED_AGAIN
                    slot = lambda: lease.answer_slot(self.prefixes, until)  # noqa: E731
                    for event in self._choices(plan, slot, options, n, prompt):
                        until.check()
                        yielded = True
                        yield event
                    return
                except DeadlineError:
                    raise
                except SlotReuseError as exc:  # the slot did not hold what it was asked to reuse
                    if (yielded and not buffered) or round_ == 1:
                        raise
                    logger.warning("slot %d of server %d did not reuse what it was asked (%s): answered again, "
                                   "evaluated afresh", lease.slot, lease.server, exc)
                    lease.forget_cells()
                except ServerError as exc:
                    if (yielded and not buffered) or round_ == 1 or not _server_died(lease, generation):
                        raise
                    logger.warning("server %d died under a request (%s): answered again afresh", lease.server, exc)
                    failed.append(lease.server)
                again = yielded

    # -- skills ----------------------------------------------------------------------------

    def list_skills(self, kind: Optional[str] = None) -> list[Block]:
        with self.memory_lock:
            return self.memory.blocks.list(kind)

    def add_manual(self, name: str, text: str, *, description: str = "", examples: Sequence[str] = (),
                   expires: Optional[str] = None) -> Block:
        """Store a manual as text: no model runs for it here. Its state is made where it is first
        used, or now in the background (:attr:`captures`)."""
        with self.writer_lock:
            return self.writer.add_manual(name, text, description=description, examples=examples, capture=False,
                                          expires=expires)

    def add_solution(self, question: str, answer: str, method: str, *, name: Optional[str] = None,
                     examples: Sequence[str] = (), expires: Optional[str] = None) -> Block:
        """Verify by running ``method`` here (the python verifier): nothing from the request is trusted."""
        with self.writer_lock:
            return self.writer.add_solution(question, answer, method=method, verifier="python", name=name, examples=examples,
                                            expires=expires)

    def capture_status(self, ref: str) -> Optional[CaptureStatus]:
        """Where the background capture of skill ``ref`` stands (None: none was asked for)."""
        with self.memory_lock:
            block = self.memory.blocks.get(ref)
        return self.captures.status(block.id)

    def delete_skill(self, ref: str) -> Block:
        with self.writer_lock:
            return self.writer.blocks.delete(ref)

    # -- skill texts for a host's own model --------------------------------------------------

    def read_skill(self, ref: str) -> SkillText:
        """The text of the skill ``ref`` (:func:`~skillgraft.core.skill_text.skill_text`)."""
        with self.memory_lock:
            return skill_text(self.memory, ref)

    def recall_skill(self, query: str) -> SkillRecall:
        """What the memory would do for ``query``, with the routed skill's text
        (:func:`~skillgraft.core.skill_text.recall_text`: recorded in the ledger)."""
        with self.memory_lock:
            return recall_text(self.memory, query)

    # -- routing corrections (:mod:`skillgraft.routing.feedback`), written by the writer ----

    def feedback(self, query: str, expected: Optional[str], *, by: str) -> FeedbackResult:
        """Correct the routing of ``query``: it belongs to block ``expected``, or to none."""
        with self.writer_lock:
            return give_feedback(self.writer, query, expected, by=by)

    def corrections(self) -> list[Correction]:
        """Every routing correction, oldest first."""
        with self.writer_lock:
            return list_corrections(self.writer)

    def remove_correction(self, correction_id: int, *, by: str) -> Correction:
        """Remove one routing correction by its id."""
        with self.writer_lock:
            return remove_correction(self.writer, correction_id, by=by)
