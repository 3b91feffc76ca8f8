"""The one answer pipeline: what every door does with a chat once the memory has recalled.

``exact`` — the verified answer, no model call (or, with ``voice``, a few tokens of the
model voicing it). ``graft`` — the chat with its skills placed (:mod:`skillgraft.core.placement`:
after the app's system turns and tools, a conversation's where they entered), their cells made
on first use and reused by key; a block captured ahead that is the chat's whole prefix is
restored instead (:func:`~skillgraft.core.chat_layout.continuation`). What the memory adds
must leave the reply its room (:func:`reply_room`), else the chat is answered without it and
the note says why. The first tokens are held back until the near-miss rule and the confidence
gate have judged them, so nothing streamed is taken back; a graft that does not stand is
answered plainly, a ``fallback`` naming the block it tried.
``abstain`` — the chat is prefilled afresh.

With a format (:class:`~skillgraft.core.tools.OutputFormat` in the options) the same steps run
on the chat with the format's instructions at the end of the app's system prompt, the model held
to its grammar; with tools a reply streams as text and a call is held until it ends and read
as the tool calls it makes (:attr:`AnswerEnd.tool_calls`). An exact answer stays the verified answer.

The steps run over an :class:`~skillgraft.protocols.AnswerSlot`, so the memory (an
in-process context), the gateway (a leased llama-server slot) and LangChain all make the
same answer, token for token at temperature 0, and report the same
:class:`~skillgraft.core.answer.AnswerNote`. :meth:`AnswerPipeline.events` yields the note,
then text deltas (``str``), then an :class:`~skillgraft.core.answer.AnswerEnd`; the note
comes only once the context has produced its first token, so a failing server can be
retried before anything is sent. A chat is rendered once per request
(:meth:`AnswerPipeline.prompt`): a door that chooses its context by the prompt (the gateway
leases the slot that holds most of it) passes that :class:`Prompt` on to :meth:`~AnswerPipeline.events`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence, Union

from ..errors import ContextOverflowError, InputError, StoreError
from . import telemetry
from .answer import Answer, AnswerEnd, AnswerNote, AnswerOptions, AnswerPlan
from .chat_layout import chat_tokens, continuation
from .recall import Recall
from .placement import SkillPlace, placed_tokens, restores_ahead, routed_blocks, skill_places, without
from .gate import GATE_TOKENS, GateVerdict, confidence, gate_policy, graft_verdict
from .states import TokenStep
from .stops import StopCutter
from .timings import Timings
from .tools import OutputFormat, opens_a_call

MAX_VOICE_TOKENS = 8
VOICE_PROMPT = "{query}\nReply with the verified answer only."

Event = Union[AnswerNote, str, AnswerEnd]
Record = Callable[[AnswerPlan, AnswerNote, AnswerEnd], None]


@dataclass(frozen=True)
class Prompt:
    """The tokens an answer prompts its context with, rendered once (:meth:`AnswerPipeline.prompt`).

    For a graft (``grafted``) the restored block's first ``keep`` cells then the rest of the
    chat, or (``keep`` 0) the chat with its skills placed, its first ``mark`` tokens the app's
    turns and the skills in front. ``reason`` says why a routed block is not in it.
    """

    tokens: tuple[int, ...]
    keep: int = 0
    grafted: bool = False
    reason: str = ""
    mark: int = 0
    places: Optional[tuple[SkillPlace, ...]] = None  # the skills it holds, where fewer than planned

    @property
    def after(self) -> list[int]:
        """The tokens prefilled after the block's kept cells (the whole prompt when not grafted)."""
        return list(self.tokens[self.keep:])


class AnswerPipeline:
    """The decision steps over one engine's rendering (``engine``: a
    :class:`~skillgraft.protocols.ChatText` with ``n_ctx``). ``gate`` is ``"advisory"``
    (report the confidence, never discard: the default) or ``"enforce"`` (a graft whose
    first tokens are not confident is answered plainly); ``record`` is called with each
    finished answer (the memory writes its ledger row)."""

    def __init__(self, engine, *, gate: Union[str, bool, None] = None, record: Optional[Record] = None) -> None:
        self.engine = engine
        self.gate = gate_policy(gate)
        self.record = record

    @property
    def n_ctx(self) -> int:
        return int(self.engine.n_ctx)

    def prompt(self, plan: AnswerPlan, options: AnswerOptions) -> Optional[Prompt]:
        """The tokens ``plan`` prompts a context with under ``options`` (None for an exact
        answer), rendered once for a pool to lease a slot by and for :meth:`events`; the skills
        are placed by :mod:`skillgraft.core.placement`."""
        recall = plan.recall
        if recall.decision == "exact":
            return None
        chat = _chat(plan, options)
        routed = recall.block if recall.decision == "graft" else None
        places = skill_places(recall)
        if routed is None or plan.unusable:
            return self._unrouted(plan, options, reason=plan.unusable)
        if restores_ahead(routed, places, chat, reprefill=plan.reprefill):
            try:
                keep, after = continuation(self.engine, routed, chat)
            except InputError as exc:
                return Prompt(tuple(chat_tokens(self.engine, chat)), reason=str(exc))
            return self._fitting(Prompt((*routed.tokens[:keep], *after), keep, grafted=True), chat, options, routed.name)
        for shown in range(len(recall.examples), -1, -1):  # worked examples that do not fit go, nearest kept
            tokens, mark = placed_tokens(self.engine, plan, chat, places, examples=recall.examples[:shown])
            if self._fits(tokens, options):
                return Prompt(tuple(tokens), grafted=True, mark=mark)
        return self._fewer_skills(plan, chat, places, options)

    def _unrouted(self, plan: AnswerPlan, options: AnswerOptions, reason: str = "") -> Prompt:
        """The plain prompt: the chat with the skills it held before this turn, less the routed
        block (none routed, one that cannot be read, or a graft that did not stand)."""
        chat = _chat(plan, options)
        prompt = self._fewer_skills(plan, chat, without(skill_places(plan.recall), *routed_blocks(plan.recall)), options)
        return prompt if prompt.reason or not reason else dataclasses.replace(prompt, reason=reason)

    def _fits(self, tokens: Sequence[int], options: AnswerOptions) -> bool:
        return len(tokens) + reply_room(options.max_tokens, self.n_ctx) <= self.n_ctx

    def _fewer_skills(self, plan: AnswerPlan, chat: list, places: Sequence[SkillPlace], options: AnswerOptions) -> Prompt:
        """The chat holding as many of ``places`` as leave the reply its room, those that entered
        last leaving first: what entered earlier, and the turns after it, stay as the context
        holds them (a skill never fails a chat, nor shortens a reply, the model alone could
        give). A graft while the routed block is among them; else the plain prompt, saying why."""
        entered = sorted(places, key=lambda place: place.turn)  # stable: a set keeps its order
        whole, mark = placed_tokens(self.engine, plan, chat, places)
        tokens, count, kept = whole, len(entered), tuple(places)
        while count and not self._fits(tokens, options):
            count -= 1
            kept = tuple(place for place in places if place in entered[:count])
            tokens, mark = placed_tokens(self.engine, plan, chat, kept)
        routed = plan.recall.block
        grafted = bool(kept) and routed is not None and any(place.block.id == routed.id for place in kept)
        if count == len(entered):
            return Prompt(tuple(tokens), grafted=grafted, mark=mark if grafted else 0)
        reason = self._left_out([place.block.name for place in entered[count:]], len(whole) - len(tokens),
                                len(tokens), options)
        return Prompt(tuple(tokens), grafted=grafted, mark=mark if grafted else 0, reason=reason, places=kept)

    def _left_out(self, names: Sequence[str], added: int, chat: int, options: AnswerOptions) -> str:
        """Why skills were left out of a prompt: they would not leave the reply its room."""
        several = len(names) > 1
        return (f"the skill{'s' if several else ''} {', '.join(names)}: {added} tokens beside the chat's {chat} would "
                f"leave the reply fewer than its {reply_room(options.max_tokens, self.n_ctx)} tokens in the "
                f"{self.n_ctx}-token context: answered without {'them' if several else 'it'}")

    def _fitting(self, prompt: Prompt, chat: list, options: AnswerOptions, name: str) -> Prompt:
        """``prompt`` (the block ``name`` restored ahead of the chat) when it leaves the reply its
        room; else the chat alone, with why."""
        if self._fits(prompt.tokens, options):
            return prompt
        plain = tuple(chat_tokens(self.engine, chat))
        if len(plain) >= len(prompt.tokens):  # the skill adds nothing here (a template that drops it)
            return prompt
        return Prompt(plain, reason=self._left_out([name], len(prompt.tokens) - len(plain), len(plain), options))

    def answer(self, plan: AnswerPlan, slot, options: AnswerOptions) -> Answer:
        """The whole answer (the events collected)."""
        return collect(plan, self.events(plan, slot, options))

    def events(self, plan: AnswerPlan, slot, options: AnswerOptions, prompt: Optional[Prompt] = None) -> Iterator[Event]:
        """The note, the text deltas and the end of the answer to ``plan`` in ``slot``
        (None for an exact answer that is not voiced); ``prompt`` is :meth:`prompt` of the
        same plan and options, when the caller has rendered it already."""
        started = time.perf_counter()
        if plan.recall.decision == "exact":
            yield from self._exact(plan, slot, options, started)
            return
        prompt = prompt if prompt is not None else self.prompt(plan, options)
        events = self._generated(plan, slot, options, prompt, started)
        yield from events if options.format is None else _formatted(events, options.format)

    def _generated(self, plan: AnswerPlan, slot, options: AnswerOptions, prompt: Prompt,
                   started: float) -> Iterator[Event]:
        recall = plan.recall
        note = self._note(plan, "abstain", places=prompt.places)
        if recall.decision == "graft":
            if not prompt.grafted:
                note = self._note(plan, "fallback", reason=prompt.reason, places=prompt.places)
            else:
                outcome = yield from self._graft(plan, slot, options, prompt, started)
                if outcome is None:
                    return
                prompt = self._unrouted(plan, options)
                note = outcome if prompt.places is None else dataclasses.replace(
                    outcome, skills=tuple(place.as_dict() for place in prompt.places))
        yield from self._plain(plan, slot, options, prompt.tokens, note, started)

    # -- the three answers ---------------------------------------------------------------

    def _exact(self, plan: AnswerPlan, slot, options: AnswerOptions, started: float) -> Iterator[Event]:
        block = plan.recall.block
        text, steps, timings = block.answer, (), Timings()
        if options.voice:
            keep, after = continuation(self.engine, block, [("user", VOICE_PROMPT.format(query=plan.query))])
            try:
                slot.restore(plan.state, block.id, keep=keep)
                slot.prefill(after)
                steps = tuple(slot.generate(AnswerOptions(max_tokens=MAX_VOICE_TOKENS).sampling(MAX_VOICE_TOKENS)))
            except StoreError:  # its state cannot be read: the verified answer, as stored
                steps = ()
            text = "".join(s.piece for s in steps).strip() or block.answer
        note = self._note(plan, "exact", avoided=block.n_tokens)
        yield note
        yield text
        yield self._end(plan, note, "stop", steps, 0, self._timings(plan, timings, started))

    def _graft(self, plan: AnswerPlan, slot, options: AnswerOptions, prompt: Prompt, started: float):
        """Stream a grafted answer, or return the fallback note when it does not stand."""
        block = plan.recall.block
        n_prompt = len(prompt.tokens)
        sampling = options.sampling(self._room(n_prompt, "the block plus the chat"))
        timings = Timings()
        restore_started = time.perf_counter()
        if not prompt.keep:  # the skills placed as text: prefilled, their prefix states reused by key
            slot.prefill(list(prompt.tokens), mark=prompt.mark, block_id=block.id)
            timings.prefill_s, timings.reprefilled = time.perf_counter() - restore_started, plan.reprefill
        else:  # a block captured ahead leads the chat: its state restored
            try:
                slot.restore(plan.state, block.id, keep=prompt.keep)
                slot.prefill(prompt.after)  # the payload is read here, unless the cells hold the block
            except StoreError as exc:  # damaged (quarantined by its store) or unreachable: answered plainly
                return self._note(plan, "fallback", reason=f"the routed block {block.id} cannot be read: {exc}")
            timings.graft_s = time.perf_counter() - restore_started
        source = slot.generate(sampling)
        cutter, held, pieces = StopCutter(options.stop), [], []
        whole = block.kind == "solution"  # the near-miss rule reads the whole answer
        finished = True
        generate_started = time.perf_counter()
        for step in source:
            held.append(step)
            pieces.append(cutter.feed(step.piece))
            if cutter.stopped:
                break
            if not whole and len(held) >= GATE_TOKENS:
                finished = False
                break
        if finished:
            pieces.append(cutter.flush())
        verdict = graft_verdict(
            block, "".join(pieces), confidence(held, plan.gate_threshold), enforce=self.gate == "enforce",
            query=plan.query,
        )
        if verdict.fell_back:
            _close(source)
            return self._note(plan, "fallback", gate=verdict, reason=verdict.reason)
        note = self._note(
            plan, "graft", cache_n=slot.reused_cells, avoided=slot.reused_cells, gate=verdict,
            reused_from=_reused_from(slot), places=prompt.places,
        )
        yield note
        steps = list(held)
        text = "".join(pieces)
        if text:
            yield text
        if not finished:
            yield from self._relay(source, cutter, steps)
        timings.generate_s = time.perf_counter() - generate_started
        reason = self._finish(cutter, steps, sampling.max_tokens, n_prompt)
        yield self._end(plan, note, reason, steps, n_prompt, self._timings(plan, timings, started))
        return None

    def _plain(self, plan: AnswerPlan, slot, options: AnswerOptions, tokens: Sequence[int], note: AnswerNote,
               started: float) -> Iterator[Event]:
        tokens = list(tokens)
        sampling = options.sampling(self._room(len(tokens), "the chat"))
        prefill_started = time.perf_counter()
        slot.prefill(tokens)
        source = slot.generate(sampling)
        first = next(source, None)  # the context has answered before anything is sent
        generate_started = time.perf_counter()
        if slot.reused_cells:
            note = dataclasses.replace(note, cache_n=slot.reused_cells, prefill_tokens_avoided=slot.reused_cells,
                                       reused_from=_reused_from(slot))
        yield note
        cutter, steps = StopCutter(options.stop), []
        if first is not None:
            steps.append(first)
            text = cutter.feed(first.piece)
            if text:
                yield text
            if not cutter.stopped:
                yield from self._relay(source, cutter, steps)
        else:
            _close(source)
        timings = Timings(plain_prefill_s=generate_started - prefill_started,
                          plain_generate_s=time.perf_counter() - generate_started)
        reason = self._finish(cutter, steps, sampling.max_tokens, len(tokens))
        yield self._end(plan, note, reason, steps, len(tokens), self._timings(plan, timings, started))

    # -- helpers -------------------------------------------------------------------------

    def _relay(self, source: Iterator[TokenStep], cutter: StopCutter, steps: list) -> Iterator[str]:
        for step in source:
            steps.append(step)
            text = cutter.feed(step.piece)
            if text:
                yield text
            if cutter.stopped:
                _close(source)
                return
        rest = cutter.flush()
        if rest:
            yield rest

    def _room(self, n_prompt: int, what: str) -> int:
        if n_prompt >= self.n_ctx:
            raise ContextOverflowError(n_prompt, self.n_ctx - 1, what, hint=CONTEXT_HINT)
        return self.n_ctx - n_prompt

    def _finish(self, cutter: StopCutter, steps: list, max_tokens: int, n_prompt: int) -> str:
        if cutter.stopped:
            return "stop"
        return "length" if len(steps) >= max_tokens or n_prompt + len(steps) >= self.n_ctx else "stop"

    def _timings(self, plan: AnswerPlan, timings: Timings, started: float) -> Timings:
        timings.recall_s = plan.timings.recall_s
        timings.load_s = plan.timings.load_s
        timings.from_cache = plan.timings.from_cache
        timings.total_s = (plan.timings.recall_s or 0.0) + (plan.timings.load_s or 0.0) + time.perf_counter() - started
        return timings

    def _end(self, plan: AnswerPlan, note: AnswerNote, reason: str, steps, n_prompt: int, timings: Timings) -> AnswerEnd:
        end = AnswerEnd(reason, len(steps), n_prompt, tuple(steps), timings)
        telemetry.answered(getattr(self.engine, "model_name", ""), plan.chat, note, end)
        if self.record is not None:
            self.record(plan, note, end)
        return end

    @staticmethod
    def _note(plan: AnswerPlan, decision: str, **details) -> AnswerNote:
        return answer_note(plan.recall, decision, **details)


# What a chat longer than the context can do: the context is a setting of the engine (and its fingerprint).
CONTEXT_HINT = (
    "a larger context holds it: set SKILLGRAFT_N_CTX where the model is run (the default is the model's own "
    "window, at most 32768 tokens)"
)


def reply_room(max_tokens: int, n_ctx: int) -> int:
    """The room a reply is given beside a prompt: what the caller asked for, at most a quarter
    of the context (a skill is not turned away for an ask the window could never hold)."""
    return max(1, min(int(max_tokens), n_ctx // 4))


def answer_note(recall: Recall, decision: str, *, cache_n: int = 0, avoided: int = 0,
                gate: Optional[GateVerdict] = None, reason: str = "", reused_from: str = "",
                places: Optional[Sequence[SkillPlace]] = None) -> AnswerNote:
    """The note of an answer to ``recall`` that ended in ``decision``: the one place its
    fields get their meaning (a door that answers without the pipeline, say a LangChain
    agent's own model on an abstain, reports this too). ``places``: the skills the prompt
    held, where fewer than planned (some left no room for the reply)."""
    block = recall.block if decision != "abstain" else None
    placed = decision in ("graft", "text")  # "text": a door handed the skills' text to a model it does not run
    if places is None:
        places = skill_places(recall) if placed else without(skill_places(recall), *routed_blocks(recall))
    return AnswerNote(
        decision=decision, routed=recall.decision, block_id=block.id if block else None,
        block_name=block.name if block else None, score=round(float(recall.score), 6),
        threshold=float(recall.threshold), reason=reason or recall.reason, cache_n=cache_n, reused_from=reused_from,
        prefill_tokens_avoided=avoided, near_miss=recall.near_miss, gate=gate, conversation=recall.conversation,
        skills=tuple(place.as_dict() for place in places),
    )


def collect(plan: AnswerPlan, events: Iterator[Event]) -> Answer:
    """A whole answer from its events: the note, the text (stripped) and the end."""
    note, pieces, end = None, [], None
    for event in events:
        if isinstance(event, AnswerNote):
            note = event
        elif isinstance(event, AnswerEnd):
            end = event
        else:
            pieces.append(event)
    return Answer("".join(pieces).strip(), note, end, plan.recall)


def collect_choices(plan: AnswerPlan, events: Iterator[Event]) -> list[Answer]:
    """Whole answers from the events of several answers one after the other (each begins
    with its note), as :func:`collect` makes one."""
    answers, current = [], []
    for event in events:
        if isinstance(event, AnswerNote) and current:
            answers.append(collect(plan, current))
            current = []
        current.append(event)
    return [*answers, collect(plan, current)]


def _chat(plan: AnswerPlan, options: AnswerOptions) -> list:
    """The chat the model reads: with a format, its instructions end the app's system prompt."""
    return options.format.lead(plan.chat) if options.format is not None else list(plan.chat)


def _formatted(events: Iterator[Event], form: OutputFormat) -> Iterator[Event]:
    """A generated answer read against its format. JSON is the text as it streams. With tools
    a reply is text as it streams too, from its first character on; a call (text opening with
    ``{``) is held until it ends and is then the tool calls it makes (``finish_reason``
    ``tool_calls``). A call cut short by ``max_tokens`` (``finish_reason`` ``length``) is
    nothing: every door gets no half call and never the envelope's JSON
    (:meth:`~skillgraft.core.tools.OutputFormat.parse`)."""
    if not form.tools:
        yield from events
        return
    held: list[str] = []
    replying = calling = False  # decided by the answer's first character that is not blank
    for event in events:
        if isinstance(event, str):
            if replying:
                yield event
                continue
            held.append(event)
            if not calling and event.strip():
                text = "".join(held)
                calling = opens_a_call(text)
                if not calling:
                    replying = True
                    yield text
        elif isinstance(event, AnswerEnd) and not replying:
            parsed = form.parse("".join(held))
            if parsed.content:
                yield parsed.content
            if parsed.tool_calls:
                event = dataclasses.replace(event, finish_reason="tool_calls", tool_calls=parsed.tool_calls)
            yield event
        else:
            yield event


def _reused_from(slot) -> str:
    """Where a slot's reused cells came from (every :class:`~skillgraft.protocols.AnswerSlot` says)."""
    return slot.reused_from


def _close(source) -> None:
    close = getattr(source, "close", None)
    if close is not None:
        close()
