"""SkillGraftMiddleware: ask a skillgraft memory before each model call of a LangChain agent.

The latest user message is recalled against the memory:

- ``exact``: a verified question recurs, so its verified answer is returned and the model
  is not called;
- ``graft``: one block is relevant, so the call goes to a :class:`ChatSkillGraft` with that
  block grafted;
- ``abstain``: nothing is close enough, so the call passes through unchanged.

After a graft the same rules as :meth:`skillgraft.SkillMemory.generate` apply: a grafted
*solution* whose answer repeats its stored answer (a near miss: another question) and,
with the gate on (the default), a graft whose first tokens are not confident are answered
again plainly; the decision then reads ``abstain`` and ``gate`` says why.

The answer's ``response_metadata["skillgraft"]`` carries the decision, block id and name,
score, threshold and reason. The dispatch is written once, as a generator of model
requests (:meth:`SkillGraftMiddleware.dispatch`); the sync and async hooks only drive it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Awaitable, Callable, Generator, Optional, Union

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage
from langchain_core.runnables.config import run_in_executor
from skillgraft import Confidence, GateVerdict, Recall, SkillMemory
from skillgraft.core.gate import FELL_BACK

from .chat_models import PROVIDER, ChatSkillGraft
from .messages import last_user_text
from .shared import memory_lock, open_memory, store_key

Handler = Callable[[ModelRequest], ModelResponse]
AsyncHandler = Callable[[ModelRequest], Awaitable[ModelResponse]]
# Sends model requests out, gets their responses back, returns the answer.
Dispatch = Generator[ModelRequest, Any, Any]


class SkillGraftMiddleware(AgentMiddleware):
    """Answers recurring verified questions, grafts relevant blocks, abstains otherwise.

    ``memory`` is the memory to recall from; without it, the memory of ``chat_model``, else
    the shared memory of the store folder ``home`` (``$SKILLGRAFT_HOME``). ``chat_model`` is
    the grafting model for agents whose own model is not a :class:`ChatSkillGraft`: graft
    decisions are routed to it. ``gate`` (on by default, as in
    :meth:`skillgraft.SkillMemory.generate`) answers a graft again plainly when its first
    tokens are not confident; a near miss that repeats a stored answer is answered plainly
    whatever ``gate`` says. The tokens of a streamed graft that is answered again will
    already have been emitted.

    Example::

        agent = create_agent(
            model=ChatSkillGraft(memory=memory),
            tools=[],
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
        gate: bool = True,
    ) -> None:
        super().__init__()
        if memory is None:
            memory = chat_model.skill_memory if chat_model is not None else open_memory(home)
        self.memory = memory
        self.chat_model = chat_model
        self.gate = gate

    # -- decisions -------------------------------------------------------------------------

    def recall(self, request: ModelRequest) -> Optional[Recall]:
        """The memory's decision for the latest user message, or None when there is none."""
        query = last_user_text(request.messages)
        if not query:
            return None
        with memory_lock(self.memory):
            return self.memory.recall(query)

    def dispatch(self, request: ModelRequest, recall: Optional[Recall]) -> Dispatch:
        """The one exact/graft/abstain dispatch: yields the model requests to make, returns the answer."""
        if recall is None:
            return (yield request)
        if recall.decision == "exact":
            return self._verified_answer(recall)
        if recall.decision == "abstain":
            return _annotate((yield request), recall.as_dict())
        grafted = yield self._grafting(request, recall)
        gate = self._verdict(grafted, recall, last_user_text(request.messages) or "")
        if gate.fell_back:
            fallback = {**recall.as_dict(), "decision": FELL_BACK, "block_id": None, "block_name": None}
            return _annotate((yield request), {**fallback, "gate": gate.as_dict()})
        return _annotate(grafted, {**recall.as_dict(), "gate": gate.as_dict()})

    def _verified_answer(self, recall: Recall) -> ModelResponse:
        block = recall.block
        metadata = {**recall.as_dict(), "verifier": block.verifier}
        message = AIMessage(
            content=block.answer,
            response_metadata={"model_provider": PROVIDER, "finish_reason": "stop", PROVIDER: metadata},
            usage_metadata={"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
        )
        return ModelResponse(result=[message])

    def _grafting(self, request: ModelRequest, recall: Recall) -> ModelRequest:
        model = request.model if isinstance(request.model, ChatSkillGraft) else self.chat_model
        if model is None:
            raise TypeError(
                f"SkillGraftMiddleware grafts blocks into a ChatSkillGraft, but the agent's model is "
                f"{type(request.model).__name__}: pass chat_model=ChatSkillGraft(...) to the middleware"
            )
        if store_key(model.home) != store_key(self.memory.store.home):
            raise ValueError(
                f"the grafting model uses the store {model.home}, the middleware recalls from "
                f"{self.memory.store.home}: give both the same memory"
            )
        settings = {**request.model_settings, "block_id": recall.block.id}
        return request.override(model=model, model_settings=settings)

    def _verdict(self, response: Any, recall: Recall, query: str) -> GateVerdict:
        """The gate's verdict on a grafted answer, as :meth:`SkillMemory.generate` reports it.

        ``fell_back`` is set when the answer must be made again plainly: a solution's stored
        answer repeated for another question (a near miss), or, with the gate on, first
        tokens that are not confident.
        """
        message = _ai_message(response)
        produced = (message.response_metadata.get(PROVIDER) or {}) if message else {}
        reported = produced.get("confidence")
        if reported is None:  # nothing was decoded
            with memory_lock(self.memory):
                confidence = self.memory.confidence([])
        else:
            confidence = Confidence(**reported)
        text = message.text if message is not None else ""
        return self.memory.graft_verdict(recall.block, text, confidence, gate=self.gate, query=query)

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
