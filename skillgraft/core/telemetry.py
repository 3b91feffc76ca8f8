"""Opt-in OpenTelemetry spans for recall, answers and deposits, in the ``gen_ai.*`` conventions.

Off unless enabled, by ``$SKILLGRAFT_OTEL=1`` or :func:`configure` (``enabled=True``); off, a
span costs one flag check. Enabled, it needs ``opentelemetry-api`` (``pip install
'skillgraft[otel]'``), else a :class:`~skillgraft.errors.ConfigError`; spans go to the global
tracer provider (or the one given to :func:`configure`), whose exporter the application sets up.

Every door gets the same spans, made where the memory decides:

- ``search_memory`` (:meth:`~skillgraft.memory.SkillMemory.recall`): the decision, its score and
  threshold (``gen_ai.memory.search.similarity.threshold``), the block found (``gen_ai.skill.name``,
  ``skillgraft.block.id``);
- ``chat {model}`` (every answer of the pipeline): ``gen_ai.request.model``, the
  ``gen_ai.usage.input_tokens`` / ``output_tokens``, the prompt cells reused instead of
  evaluated (``gen_ai.usage.cache_read.input_tokens``: a graft's block among them), the finish
  reason, and for a graft the skill whose state was used (``gen_ai.skill.name``,
  ``gen_ai.skills``) and the prefill it saved;
- ``update_memory`` (a deposit or an import): the block or skills stored (``gen_ai.memory.record.id``,
  ``gen_ai.skill.name``, ``gen_ai.skills``).

Each carries ``gen_ai.operation.name``, ``gen_ai.provider.name`` and ``gen_ai.memory.store.id``
(the namespace) where it has one. Content (the query, the chat, the answer, a skill's text) is
recorded only with ``$SKILLGRAFT_OTEL_CONTENT=1`` or ``configure(content=True)``, as
``gen_ai.memory.query.text``, ``gen_ai.memory.records``, ``gen_ai.input.messages`` and
``gen_ai.output.messages``. Without it no attribute holds text of a question, a skill or an
answer: ``gen_ai.skill.name`` and ``gen_ai.skills`` name a skill by its block's id (a name may
be made from a question: a verified solution's is), and a failed operation's span says only
its error's type (``error.type``), not its message.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Optional, Sequence

from ..errors import ConfigError
from .answer import AnswerEnd, AnswerNote
from .recall import Recall

__all__ = [
    "CONTENT_ENV", "ENV", "PROVIDER", "answered", "check", "configure", "content_enabled", "deposited", "enabled",
    "recalled", "skill_label", "span",
]

ENV, CONTENT_ENV = "SKILLGRAFT_OTEL", "SKILLGRAFT_OTEL_CONTENT"
PROVIDER = "skillgraft"  # the memory's own operations; an answer's is the engine's, llama.cpp
ENGINE_PROVIDER = "llama.cpp"
TRUE = ("1", "true", "yes", "on")


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in TRUE


class _Settings:
    def __init__(self) -> None:
        self.on = _flag(ENV)
        self.content = _flag(CONTENT_ENV)
        self.provider = None
        self.tracer = None


_settings = _Settings()


def configure(*, enabled: Optional[bool] = None, content: Optional[bool] = None, tracer_provider=None) -> None:
    """Turn the spans on or off, content with them or not, and choose the tracer provider (the
    global one by default). What is not given keeps its setting (first read from the environment)."""
    if enabled is not None:
        _settings.on = bool(enabled)
    if content is not None:
        _settings.content = bool(content)
    if tracer_provider is not None or enabled is not None:
        _settings.provider, _settings.tracer = tracer_provider or _settings.provider, None
    check()


def enabled() -> bool:
    return _settings.on


def content_enabled() -> bool:
    return _settings.on and _settings.content


def check() -> None:
    """:class:`ConfigError` when spans are on and ``opentelemetry-api`` is missing."""
    if _settings.on:
        _tracer()


def _tracer():
    if _settings.tracer is None:
        try:
            from opentelemetry import trace
        except ImportError:
            raise ConfigError(f"${ENV} asks for OpenTelemetry spans, which need opentelemetry-api: "
                              "pip install 'skillgraft[otel]' (or unset it)") from None
        provider = _settings.provider or trace.get_tracer_provider()
        _settings.tracer = provider.get_tracer("skillgraft")
    return _settings.tracer


class Span:
    """One span, current while its ``with`` block runs; ``set`` adds attributes (those None left
    out), ``content`` adds them only when content is on."""

    def __init__(self, name: str, attributes: dict, start_ns: Optional[int] = None) -> None:
        self._span = _tracer().start_span(name, attributes=_clean(attributes), start_time=start_ns)
        self._scope = None

    def set(self, attributes: dict) -> "Span":
        self._span.set_attributes(_clean(attributes))
        return self

    def content(self, attributes: dict) -> "Span":
        if _settings.content:
            self._span.set_attributes(_clean(attributes))
        return self

    def end(self) -> None:
        self._span.end()

    def __enter__(self) -> "Span":
        from opentelemetry import trace

        told = _settings.content  # an error's message may quote a question or a skill: content
        self._scope = trace.use_span(self._span, end_on_exit=True, record_exception=told, set_status_on_exception=told)
        self._scope.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:
            self._span.set_attribute("error.type", exc[0].__name__)
            if not _settings.content:
                from opentelemetry.trace import Status, StatusCode

                self._span.set_status(Status(StatusCode.ERROR))  # failed, without the message
        self._scope.__exit__(*exc)


class _Off:
    """The span of telemetry that is off: does nothing, allocates nothing."""

    def set(self, attributes: dict) -> "_Off":
        return self

    content = set

    def end(self) -> None:
        pass

    def __enter__(self) -> "_Off":
        return self

    def __exit__(self, *exc) -> None:
        pass


OFF = _Off()


def span(operation: str, name: str = "", attributes: Optional[dict] = None, *, provider: str = PROVIDER,
         start_ns: Optional[int] = None) -> Any:
    """A span ``"{operation} {name}"`` with ``gen_ai.operation.name``, ``gen_ai.provider.name`` and
    ``attributes``, or :data:`OFF` when telemetry is off."""
    if not _settings.on:
        return OFF
    return Span(f"{operation} {name}".strip(), {"gen_ai.operation.name": operation, "gen_ai.provider.name": provider,
                                                **(attributes or {})}, start_ns)


def since(seconds: Optional[float]) -> int:
    """The wall-clock start, in nanoseconds, of what has run ``seconds`` until now."""
    return time.time_ns() - int((seconds or 0.0) * 1e9)


def messages(turns) -> str:
    """``[(role, text), ...]`` as the JSON of ``gen_ai.input.messages`` / ``gen_ai.output.messages``."""
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]} for role, text in turns])


def records(rows) -> str:
    """``[(id, text, score), ...]`` as the JSON of ``gen_ai.memory.records``."""
    return json.dumps([{"id": ident, "content": text, **({"score": score} if score is not None else {})}
                       for ident, text, score in rows])


def skill_label(ident: Optional[str], name: Optional[str]) -> Optional[str]:
    """How ``gen_ai.skill.name`` and ``gen_ai.skills`` name a skill: by ``name`` with content on,
    else by its block's id ``ident`` (a name is text: a verified solution's is made from its question)."""
    return name if _settings.content else ident


def _clean(attributes: dict) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in attributes.items() if v is not None}


def recalled(store: str, query: str, run: Callable[[], Recall]) -> tuple[Recall, float]:
    """``run()`` (a recall of ``query`` in memory ``store``) under a ``search_memory`` span: the
    recall and the seconds it took."""
    started = time.perf_counter()
    with span("search_memory", store, {"gen_ai.memory.store.id": store}) as current:
        recall = run()
        if current is OFF:  # off: nothing more than the flag check
            return recall, time.perf_counter() - started
        current.set({"gen_ai.memory.search.similarity.threshold": recall.threshold, "skillgraft.decision": recall.decision,
                     "skillgraft.score": recall.score, "gen_ai.skill.name": skill_label(recall.block_id, recall.block_name),
                     "skillgraft.block.id": recall.block_id})
        block = recall.block
        current.content({"gen_ai.memory.query.text": query,
                         "gen_ai.memory.records": records([(block.id, block.source, recall.score)]) if block else None})
    return recall, time.perf_counter() - started


def answered(model: str, chat, note: AnswerNote, end: AnswerEnd) -> None:
    """The ``chat {model}`` span of an answer that has ended (started ``end.timings.total_s`` ago)."""
    if not _settings.on:
        return
    grafted = skill_label(note.block_id, note.block_name) if note.decision == "graft" else None
    with span("chat", model, {
        "gen_ai.request.model": model, "gen_ai.usage.input_tokens": end.prompt_tokens,
        "gen_ai.usage.output_tokens": end.completion_tokens, "gen_ai.usage.cache_read.input_tokens": note.cache_n,
        "gen_ai.response.finish_reasons": [end.finish_reason],
        "gen_ai.skill.name": grafted, "gen_ai.skills": [grafted] if grafted else [], "skillgraft.decision": note.decision,
        "skillgraft.block.id": note.block_id, "skillgraft.prefill_tokens_avoided": note.prefill_tokens_avoided,
    }, provider=ENGINE_PROVIDER, start_ns=since(end.timings.total_s)) as current:
        current.content({"gen_ai.input.messages": messages(chat),
                         "gen_ai.output.messages": messages([("assistant", "".join(s.piece for s in end.steps))])})


def deposited(store: str, run: Callable[[], Any], stored: Callable[[Any], Sequence[tuple[Optional[str], str]]], *,
              text: Optional[str] = None) -> Any:
    """``run()`` (a deposit into memory ``store``; ``text`` what it stores) under an ``update_memory``
    span; what it returned, whose skills ``stored(result)`` gives as ``(block id, name)`` (a block's
    id is recorded)."""
    with span("update_memory", store, {"gen_ai.memory.store.id": store}) as current:
        result = run()
        if current is not OFF:
            skills = [label for label in (skill_label(*skill) for skill in stored(result)) if label is not None]
            ident = getattr(result, "id", None)
            current.set({"gen_ai.skills": skills, "gen_ai.skill.name": skills[0] if len(skills) == 1 else None,
                         "gen_ai.memory.record.id": ident})
            current.content({"gen_ai.memory.records": records([(ident, text, None)]) if text is not None else None})
    return result
