"""What the gateway does with one chat: recall, then answer, graft or generate plainly.

The last user message is the query. ``exact``: the verified answer, no model call.
``graft``: the routed block's state — read and verified by the store — is restored into a
leased slot at its own positions, the rest of the chat is prefilled after the cells kept
(:mod:`skillgraft.core.chat_layout`), and the server must report that it reused exactly those
cells (``cache_n``) or the request fails; the confidence gate and the near-miss rule then
decide whether the answer stands (:mod:`skillgraft.core.gate`), else it is generated plainly.
``abstain``: the chat is prefilled afresh. A server that dies under a request that has sent
nothing yet is retried once on another lease.

The store, router and embedder are used under one lock (a catalog connection serves one
thread at a time); deposits use a second memory with its own connection, so a long
capture never stalls recalls.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from pathlib import Path
from typing import Iterator, Optional, Sequence, Union

from ..core.blocks import Block
from ..core.chat_layout import continuation
from ..errors import ContextOverflowError, FingerprintMismatchError, InputError, ServerError, StoreError
from ..core.gate import GATE_TOKENS, confidence, graft_verdict
from ..memory import SkillMemory
from ..routing.router import Recall
from ..server.records import ServerStep, StreamChunk, reusable_cells, token_steps
from .metrics import GatewayMetrics
from .records import ChatAnswer, GenerationOptions, MemoryNote, AnswerPlan, PreparedChat, StreamEnd, chat_messages
from .pool import Lease, ServerPool
from .pooled_engine import PooledEngine

logger = logging.getLogger("skillgraft.gateway")

DEATH_GRACE_S = 1.0


def _finish_reason(stopped_by: Optional[str], n_tokens: int, max_tokens: int) -> str:
    if stopped_by == "limit" or (stopped_by is None and n_tokens >= max_tokens):
        return "length"
    return "stop"


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
    """Recall and generation for chat requests, over a :class:`ServerPool`."""

    def __init__(
        self,
        home: Union[str, Path],
        pool: ServerPool,
        *,
        embedder=None,
        gate: bool = True,
        metrics: Optional[GatewayMetrics] = None,
        catalog: Optional[str] = None,
        blocks: Optional[str] = None,
    ) -> None:
        self.pool = pool
        self.gate = gate
        self.metrics = metrics or GatewayMetrics()
        engine = PooledEngine(pool)
        self.memory = SkillMemory(home, engine=engine, embedder=embedder, catalog=catalog, blocks=blocks)
        self.writer = SkillMemory(home, engine=engine, embedder=self.memory.router.embedder, catalog=catalog, blocks=blocks)
        self.model_name = engine.model_name
        self.n_ctx = engine.n_ctx
        self.memory_lock = threading.Lock()
        self.writer_lock = threading.Lock()

    def close(self) -> None:
        self.memory.close()
        self.writer.close()

    # -- planning --------------------------------------------------------------------------

    def _plan(self, query: str) -> AnswerPlan:
        with self.memory_lock:
            recall = self.memory.recall(query)
            state = None
            if recall.decision == "graft":
                try:
                    state = self.memory.store.load_state(recall.block).state
                except StoreError as exc:  # a damaged block is quarantined by the store: generate plainly
                    logger.warning("block %s cannot be grafted: %s", recall.block.id, exc)
                    recall = Recall("abstain", None, recall.score, recall.threshold, f"the routed block cannot be read: {exc}")
            return AnswerPlan(query, recall, state, self.memory.gate_threshold)

    def _note(self, plan: AnswerPlan, decision: str, cache_n: int = 0, gate: Optional[dict] = None, reason: str = "") -> MemoryNote:
        recall = plan.recall
        block = recall.block if decision != "abstain" or recall.decision == "graft" else None
        return MemoryNote(
            decision=decision,
            block_id=block.id if block else None,
            block_name=block.name if block else None,
            score=round(float(recall.score), 6),
            threshold=float(recall.threshold),
            cache_n=cache_n,
            reason=reason or recall.reason,
            gate=gate,
        )

    # -- one answer ------------------------------------------------------------------------

    def prepare(self, messages: Sequence[tuple[str, str]]) -> PreparedChat:
        """Check the chat and recall for its last user message; :class:`InputError` if unusable."""
        started = time.perf_counter()
        chat, query = chat_messages(messages)
        return PreparedChat(chat, self._plan(query), started)

    def chat(self, prepared: PreparedChat, options: GenerationOptions) -> ChatAnswer:
        """Answer a chat (not streamed) that :meth:`prepare` checked."""
        chat, plan, started = prepared.chat, prepared.plan, prepared.started
        if plan.recall.decision == "exact":
            answer = ChatAnswer(plan.recall.block.answer, "stop", self._note(plan, "exact"), 0, 0)
        else:
            answer = self._with_retry(lambda lease: self._answer(lease, chat, plan, options))
        self.metrics.request(answer.note.decision, time.perf_counter() - started)
        return answer

    def _with_retry(self, attempt):
        failed: list[int] = []
        for round_ in range(2):
            with self.pool.lease(avoid=failed) as lease:
                generation = lease.engine.restarts
                try:
                    return attempt(lease)
                except ServerError as exc:
                    if round_ == 1 or not _server_died(lease, generation):
                        raise
                    logger.warning("server %d failed under a request (%s): retrying on another", lease.server, exc)
                    failed.append(lease.server)
        raise AssertionError("unreachable")

    def _answer(self, lease: Lease, chat: list, plan: AnswerPlan, options: GenerationOptions) -> ChatAnswer:
        note = self._note(plan, "abstain")
        if plan.recall.decision == "graft":
            grafted = self._graft(lease, chat, plan, options)
            if isinstance(grafted, ChatAnswer):
                return grafted
            note = grafted
        return self._plain(lease, chat, plan, options, note)

    def _restore(self, lease: Lease, chat: list, plan: AnswerPlan) -> Union[tuple[int, list[int]], MemoryNote]:
        """Restore the routed block into the lease: ``(cells kept, tokens after)``, or the
        abstain note when the block cannot lead this chat."""
        block = plan.recall.block
        try:
            keep, after = self._layout(lease.engine, block, chat)
            restored = lease.engine.restore(plan.state, block.id, slot=lease.slot, verify_hash=False)
        except (InputError, FingerprintMismatchError) as exc:
            return self._note(plan, "abstain", reason=f"the routed block {block.id} cannot lead this chat: {exc}")
        self.metrics.restore(restored.restore_ms / 1000.0)
        return keep, after

    def _graft(self, lease: Lease, chat: list, plan: AnswerPlan, options: GenerationOptions) -> Union[ChatAnswer, MemoryNote]:
        """The grafted answer, or the abstain note when it does not stand."""
        engine, block, state = lease.engine, plan.recall.block, plan.state
        started = time.perf_counter()
        restored = self._restore(lease, chat, plan)
        if isinstance(restored, MemoryNote):
            return restored
        keep, after = restored
        max_tokens = self._room(keep + len(after), options.max_tokens)
        completion = engine.continue_restored(
            state, after, block.id, slot=lease.slot, keep=keep, n_predict=max_tokens, n_probs=1,
            temperature=options.temperature, seed=options.seed, stop=options.stop,
        )
        self.metrics.graft(time.perf_counter() - started)
        verdict = graft_verdict(
            block, completion.text, confidence(token_steps(completion.steps), plan.gate_threshold),
            gate=self.gate, query=plan.query,
        )
        if verdict.fell_back:
            return self._note(plan, "abstain", gate=verdict.as_dict(), reason=verdict.reason)
        note = self._note(plan, "graft", cache_n=completion.cache_n, gate=verdict.as_dict())
        finish = _finish_reason(completion.stopped_by, len(completion.steps), max_tokens)
        return ChatAnswer(completion.text, finish, note, keep + len(after), len(completion.steps))

    def _layout(self, engine, block: Block, chat: list) -> tuple[int, list[int]]:
        keep, text = continuation(engine, block, chat)
        after = engine.tokenize(text, add_bos=False)
        if keep + len(after) >= self.n_ctx:
            raise ContextOverflowError(keep + len(after), self.n_ctx - 1, "the block plus the chat")
        return keep, after

    def _room(self, n_prompt: int, max_tokens: int) -> int:
        return max(1, min(max_tokens, self.n_ctx - n_prompt))

    def _prompt(self, engine, chat: list) -> list[int]:
        tokens = engine.tokenize(engine.chat_prompt(chat))
        if len(tokens) >= self.n_ctx:
            raise ContextOverflowError(len(tokens), self.n_ctx - 1, "the chat")
        return tokens

    def _plain(self, lease: Lease, chat: list, plan: AnswerPlan, options: GenerationOptions, note: MemoryNote) -> ChatAnswer:
        tokens = self._prompt(lease.engine, chat)
        max_tokens = self._room(len(tokens), options.max_tokens)
        completion = lease.engine.complete(
            tokens, slot=lease.slot, n_predict=max_tokens, cache_prompt=False,
            temperature=options.temperature, seed=options.seed, stop=options.stop,
        )
        finish = _finish_reason(completion.stopped_by, len(completion.steps), max_tokens)
        return ChatAnswer(completion.text, finish, note, len(tokens), len(completion.steps))

    # -- streaming -------------------------------------------------------------------------

    def stream(self, prepared: PreparedChat, options: GenerationOptions) -> Iterator[object]:
        """For a chat :meth:`prepare` checked: a :class:`MemoryNote`, then text deltas (``str``),
        then a :class:`StreamEnd`.

        After a graft the first tokens are held back until the gate has judged them (and a
        solution block's whole answer until the near-miss rule has), so what is streamed is
        never taken back; the note comes only once the server has answered, so a failure
        before it is retried or raised before anything is sent. Input errors are raised
        before the generator is returned.
        """
        if not prepared.needs_model:
            return self._stream_exact(prepared.plan, prepared.started)
        return self._stream_generated(prepared.chat, prepared.plan, options, prepared.started)

    def _stream_exact(self, plan: AnswerPlan, started: float) -> Iterator[object]:
        self.metrics.request("exact", time.perf_counter() - started)
        yield self._note(plan, "exact")
        yield plan.recall.block.answer
        yield StreamEnd("stop", 0)

    def _stream_generated(self, chat: list, plan: AnswerPlan, options: GenerationOptions, started: float) -> Iterator[object]:
        failed: list[int] = []
        for round_ in range(2):
            with self.pool.lease(avoid=failed) as lease:
                generation = lease.engine.restarts
                sent = False
                try:
                    for event in self._stream_on(lease, chat, plan, options):
                        if isinstance(event, MemoryNote):
                            self.metrics.request(event.decision, time.perf_counter() - started)
                        sent = True
                        yield event
                    return
                except ServerError as exc:
                    if sent or round_ == 1 or not _server_died(lease, generation):
                        raise
                    logger.warning("server %d failed under a stream (%s): retrying on another", lease.server, exc)
                    failed.append(lease.server)

    def _stream_on(self, lease: Lease, chat: list, plan: AnswerPlan, options: GenerationOptions) -> Iterator[object]:
        note = self._note(plan, "abstain")
        if plan.recall.decision == "graft":
            held = self._held_graft(lease, chat, plan, options)
            if not isinstance(held, MemoryNote):
                note, chunks, max_tokens, n_prompt = held
                yield note
                yield from self._relay(chunks, max_tokens, n_prompt)
                return
            note = held
        tokens = self._prompt(lease.engine, chat)
        max_tokens = self._room(len(tokens), options.max_tokens)
        chunks = lease.engine.stream(
            tokens, slot=lease.slot, max_tokens=max_tokens, temperature=options.temperature,
            seed=options.seed, stop=options.stop,
        )
        first = next(chunks, None)  # the server has answered before anything is sent: a failure is retried
        yield note
        yield from self._relay(itertools.chain([first] if first else [], chunks), max_tokens, len(tokens))

    def _held_graft(self, lease: Lease, chat: list, plan: AnswerPlan, options: GenerationOptions):
        """Restore and stream until the answer can be judged: ``(note, chunks, max_tokens,
        prompt tokens)``, or the abstain note when the graft does not stand."""
        engine, block, state = lease.engine, plan.recall.block, plan.state
        restored = self._restore(lease, chat, plan)
        if isinstance(restored, MemoryNote):
            return restored
        keep, after = restored
        max_tokens = self._room(keep + len(after), options.max_tokens)
        started = time.perf_counter()
        source = engine.stream_restored(
            state, after, block.id, slot=lease.slot, keep=keep, max_tokens=max_tokens,
            temperature=options.temperature, seed=options.seed, stop=options.stop,
        )
        held: list[StreamChunk] = []
        steps: list[ServerStep] = []
        whole = block.kind == "solution"  # the near-miss rule reads the whole answer
        for chunk in source:
            held.append(chunk)
            steps.extend(chunk.steps)
            if chunk.stopped_by is not None or (not whole and len(steps) >= GATE_TOKENS):
                break
        self.metrics.graft(time.perf_counter() - started)
        text = "".join(chunk.text for chunk in held)
        verdict = graft_verdict(
            block, text, confidence(token_steps(steps), plan.gate_threshold), gate=self.gate, query=plan.query
        )
        if verdict.fell_back:
            source.close()
            return self._note(plan, "abstain", gate=verdict.as_dict(), reason=verdict.reason)
        reused = reusable_cells(state.tokens, list(state.tokens[:keep]) + after)
        note = self._note(plan, "graft", cache_n=reused, gate=verdict.as_dict())

        def chunks() -> Iterator[StreamChunk]:
            yield from held
            if held and held[-1].stopped_by is None:
                yield from source

        return note, chunks(), max_tokens, keep + len(after)

    @staticmethod
    def _relay(chunks: Iterator[StreamChunk], max_tokens: int, n_prompt: int) -> Iterator[object]:
        n_tokens = 0
        stopped_by = None
        for chunk in chunks:
            n_tokens += len(chunk.steps)
            if chunk.text:
                yield chunk.text
            if chunk.stopped_by is not None:
                stopped_by = chunk.stopped_by
        yield StreamEnd(_finish_reason(stopped_by, n_tokens, max_tokens), n_tokens, n_prompt)

    # -- skills ----------------------------------------------------------------------------

    def list_skills(self, kind: Optional[str] = None) -> list[Block]:
        with self.memory_lock:
            return self.memory.list(kind)

    def add_manual(self, name: str, text: str, *, description: str = "", examples: Sequence[str] = ()) -> Block:
        with self.writer_lock:
            return self.writer.add_manual(name, text, description=description, examples=examples)

    def add_solution(self, question: str, answer: str, method: str, *, name: Optional[str] = None,
                     examples: Sequence[str] = ()) -> Block:
        """Verify by running ``method`` here (the python verifier): nothing from the request is trusted."""
        with self.writer_lock:
            return self.writer.add_solution(question, answer, method=method, verifier="python", name=name, examples=examples)

    def delete_skill(self, ref: str) -> Block:
        with self.writer_lock:
            return self.writer.delete(ref)
