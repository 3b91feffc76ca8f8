"""SkillGraftMiddleware: ask a skillgraft memory before each model call of a LangChain agent.

The latest user message is recalled against the memory, judged after the conversation's
earlier user messages by the one conversation rule (:meth:`skillgraft.SkillMemory.recall`
with ``earlier``, the recall the answer pipeline makes for the chat):

- ``exact``: a verified question recurs, so its verified answer is returned (a plain
  message, whatever tools the request carries) and the model is not called;
- ``graft`` (and ``abstain``) with a :class:`ChatSkillGraft` model (the agent's own, or
  ``chat_model`` for grafts): the call goes to it with the recall and the request's tools,
  and it answers through the memory's one answer pipeline — the same steps, gate and
  near-miss rule as :meth:`skillgraft.SkillMemory.generate` and the gateway (a graft that
  does not stand is answered plainly and reads ``fallback``);
- ``graft`` with any other model: *text recall* — the chat's skills' texts (a manual, or a
  verified solution's question, answer and method) are placed by the one rule
  (:func:`skillgraft.adapter.skill_places`): those of the first user turn at the end of the
  request's system message, one a later turn needed in front of that user message (where it
  entered, so what a provider cached of the conversation stays its prefix), and the model
  answers with its own tools (``text``); with ``text_recall=False``
  the request is passed on unchanged (``delegated``: for a model that serves this memory
  itself, such as ``ChatOpenAI`` on ``skillgraft serve``, which grafts on its own; the
  gateway's own decision, read from its response headers, is added as ``served``);
- ``abstain`` with another model: the call passes through unchanged.

The answer's ``response_metadata["skillgraft"]`` carries the decision in every case (the
pipeline's note: decision, block id and name, score, threshold, reason, gate). The dispatch
is written once, as a generator of model requests (:meth:`SkillGraftMiddleware.dispatch`);
the sync and async hooks only drive it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Awaitable, Callable, Generator, Optional, Union
from urllib.parse import unquote

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.runnables.config import run_in_executor
from skillgraft.adapter import Recall, SkillMemory, answer_note, skill_context, skill_places

from .chat_models import PROVIDER, ChatSkillGraft
from .messages import to_chat, user_indices, user_texts
from .shared import memory_lock, open_memory, store_key

Handler = Callable[[ModelRequest], ModelResponse]
AsyncHandler = Callable[[ModelRequest], Awaitable[ModelResponse]]
# Sends model requests out, gets their responses back, returns the answer.
Dispatch = Generator[ModelRequest, Any, Any]
TEXT_RECALL = "text recall: the skills' texts were placed in the request of a model skillgraft does not run"
DELEGATED = "delegated: the request was passed on unchanged to a model that recalls from this memory itself"
SERVED_PREFIX = "x-skillgraft-"  # a skillgraft gateway's decision headers


class SkillGraftMiddleware(AgentMiddleware):
    """Answers recurring verified questions, grafts relevant blocks, abstains otherwise.

    ``memory`` is the memory to recall from; without it, the memory of ``chat_model``, else
    the shared memory of the store folder ``home`` (``$SKILLGRAFT_HOME``). ``chat_model`` is
    the grafting model for agents whose own model is not a :class:`ChatSkillGraft`: graft
    decisions are routed to it; without one, such agents get the routed skill's text
    (``text_recall``, on by default). ``gate`` is the confidence gate's policy (the memory's by
    default: ``"advisory"`` reports it, ``"enforce"`` answers a graft whose first tokens are
    not confident plainly); a near miss that repeats a stored answer is answered plainly
    whatever ``gate`` says. A streamed answer holds its first tokens back until they are
    judged, so nothing streamed is taken back.

    Example::

        agent = create_agent(
            model=ChatSkillGraft(memory=memory),
            tools=[calculator],
            middleware=[SkillGraftMiddleware(memory)],
            system_prompt="You are a terse assistant",
        )
    """

    def __init__(
        self,
        memory: Optional[SkillMemory] = None,
        *,
        home: Union[str, Path, None] = None,
        chat_model: Optional[ChatSkillGraft] = None,
        gate: Union[str, bool, None] = None,
        text_recall: bool = True,
    ) -> None:
        super().__init__()
        if memory is None:
            memory = chat_model.skill_memory if chat_model is not None else open_memory(home)
        self.memory = memory
        self.chat_model = chat_model
        self.gate = gate
        self.text_recall = text_recall

    # -- decisions -------------------------------------------------------------------------

    def recall(self, request: ModelRequest) -> Optional[Recall]:
        """The memory's decision for the latest user message, judged after the conversation's
        earlier user messages as every door judges a chat, or None when there is none."""
        texts = user_texts(request.messages)
        if not texts or not texts[-1]:
            return None
        with memory_lock(self.memory):
            return self.memory.recall(texts[-1], earlier=[text for text in texts[:-1] if text])

    def dispatch(self, request: ModelRequest, recall: Optional[Recall]) -> Dispatch:
        """The one exact/graft/abstain dispatch: yields the model requests to make, returns the answer."""
        if recall is None:
            return (yield request)
        if recall.decision == "exact":
            return self._verified_answer(request, recall)
        if isinstance(request.model, ChatSkillGraft):
            return (yield self._answering(request, recall, request.model))
        if recall.decision == "graft" and self.chat_model is not None:
            return (yield self._answering(request, recall, self.chat_model))
        if recall.decision == "graft" and self.text_recall:
            note = answer_note(recall, "text", reason=f"{recall.reason}; {TEXT_RECALL}")
            return _annotate((yield _with_skill_texts(request, recall)), note.as_dict())
        if recall.decision == "graft":
            note = answer_note(recall, "delegated", reason=f"{recall.reason}; {DELEGATED}").as_dict()
            response = yield request
            served = _served_decision(response)
            return _annotate(response, {**note, "served": served} if served else note)
        return _annotate((yield request), answer_note(recall, "abstain").as_dict())  # answered plainly

    def _verified_answer(self, request: ModelRequest, recall: Recall) -> ModelResponse:
        """The verified answer, through the answer pipeline's exact step (no model call)."""
        with memory_lock(self.memory):
            answer = self.memory.answer(to_chat(_with_system(request)), recall=recall)
        metadata = {**answer.note.as_dict(), "verifier": recall.block.verifier}
        message = AIMessage(
            content=answer.text,
            response_metadata={"model_provider": PROVIDER, "finish_reason": "stop", PROVIDER: metadata},
            usage_metadata={"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
        )
        return ModelResponse(result=[message])

    def _answering(self, request: ModelRequest, recall: Recall, model: ChatSkillGraft) -> ModelRequest:
        """The request handed to the grafting model (tools kept), which answers through the pipeline."""
        if store_key(model.home) != store_key(self.memory.store.home):
            raise ValueError(
                f"the grafting model uses the store {model.home}, the middleware recalls from "
                f"{self.memory.store.home}: give both the same memory"
            )
        settings = {**request.model_settings, "recall": recall, "gate": self.gate}
        return request.override(model=model, model_settings=settings)

    # -- hooks -----------------------------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest, handler: Handler) -> Any:
        steps = self.dispatch(request, self.recall(request))
        try:
            sent = next(steps)
            while True:
                sent = steps.send(handler(sent))
        except StopIteration as done:
            return done.value

    async def awrap_model_call(self, request: ModelRequest, handler: AsyncHandler) -> Any:
        steps = self.dispatch(request, await run_in_executor(None, self.recall, request))
        try:
            sent = next(steps)
            while True:
                sent = steps.send(await handler(sent))
        except StopIteration as done:
            return done.value


def _served_decision(response: Any) -> dict:
    """A skillgraft gateway's own decision, from the ``x-skillgraft-*`` response headers the
    model kept (``ChatOpenAI(include_response_headers=True)``): ``decision``, ``score``,
    ``block``, ``block_name``, ``cache_n``; empty when there are none."""
    message = _ai_message(response)
    headers = (message.response_metadata.get("headers") or {}) if message is not None else {}
    served = {}
    for name, value in headers.items():
        if name.lower().startswith(SERVED_PREFIX):
            served[name[len(SERVED_PREFIX):].lower().replace("-", "_")] = unquote(str(value))
    return served


def _with_skill_texts(request: ModelRequest, recall: Recall) -> ModelRequest:
    """``request`` with the chat's skills placed as every door places them: those that entered
    at the first user turn at the end of its system message, a later one in front of the text
    of the user message it entered before (every provider takes a user message; not all take a
    system message within the conversation)."""
    messages = list(request.messages)
    indices, texts = user_indices(messages), user_texts(messages)
    turns = [i for i, text in zip(indices[:-1], texts[:-1]) if text] + indices[-1:]  # as recall() counts them
    front: list[str] = []
    later: dict[int, list[str]] = {}
    for place in skill_places(recall):
        text = skill_context(place.block, near_miss=recall.near_miss and place.block.id == recall.block_id)
        if 0 < place.turn < len(turns):
            later.setdefault(turns[place.turn], []).append(text)
        else:
            front.append(text)
    for index, entering in later.items():
        messages[index] = _led_by(messages[index], "\n\n".join(entering))
    system = request.system_message
    text = "\n\n".join([system.text, *front] if system is not None and system.text else front)
    return request.override(system_message=SystemMessage(text) if text else system, messages=messages)


def _led_by(message, text: str):
    """``message`` with ``text`` in front of its own (a text part first where it holds parts)."""
    content = message.content
    led = f"{text}\n\n{content}" if isinstance(content, str) else [{"type": "text", "text": text}, *content]
    return message.model_copy(update={"content": led})


def _with_system(request: ModelRequest) -> list:
    """The request's messages with the agent's system prompt in front, as the model sees them."""
    system = request.system_message
    return [system, *request.messages] if system is not None else list(request.messages)


def _ai_message(response: Any) -> Optional[AIMessage]:
    """The AI message a model call returned (the last one of a ModelResponse)."""
    if isinstance(response, AIMessage):
        return response
    if isinstance(response, ModelResponse):
        return next((m for m in reversed(response.result) if isinstance(m, AIMessage)), None)
    return None


def _annotate(response: Any, metadata: dict) -> Any:
    """``response`` with ``metadata`` merged into its AI message's ``response_metadata["skillgraft"]``."""
    message = _ai_message(response)
    if message is None:
        return response
    produced = message.response_metadata.get(PROVIDER) or {}
    updated = message.model_copy(
        update={"response_metadata": {**message.response_metadata, PROVIDER: {**produced, **metadata}}}
    )
    if isinstance(response, AIMessage):
        return updated
    result = [updated if m is message else m for m in response.result]
    return dataclasses.replace(response, result=result)
