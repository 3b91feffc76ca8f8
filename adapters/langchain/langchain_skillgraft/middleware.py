"""SkillGraftMiddleware: ask a skillgraft memory before each model call of a LangChain agent.

The latest user message is recalled against the memory:

- ``exact``: a verified question recurs, so its verified answer is returned and the model
  is not called;
- ``graft``: one block is relevant, so the call goes to a :class:`ChatSkillGraft` with that
  block grafted;
- ``abstain``: nothing is close enough, so the call passes through unchanged.

The answer's ``response_metadata["skillgraft"]`` carries the decision, block id and name,
score, threshold and reason. With ``gate=True`` a graft whose first tokens are not
confident is retried plainly, as :meth:`skillgraft.SkillMemory.generate` does.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional, Union

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage
from langchain_core.runnables.config import run_in_executor
from skillgraft import Recall, SkillMemory

from .chat_models import PROVIDER, ChatSkillGraft
from .messages import last_user_text
from .shared import memory_lock, open_memory, store_key

Handler = Callable[[ModelRequest], ModelResponse]
AsyncHandler = Callable[[ModelRequest], Awaitable[ModelResponse]]


class SkillGraftMiddleware(AgentMiddleware):
    """Answers recurring verified questions, grafts relevant blocks, abstains otherwise.

    ``memory`` is the memory to recall from; without it, the memory of ``chat_model``, else
    the shared memory of the store folder ``home`` (``$SKILLGRAFT_HOME``). ``chat_model`` is
    the grafting model for agents whose own model is not a :class:`ChatSkillGraft`: graft
    decisions are routed to it. With ``gate=True`` a grafted answer whose first tokens are
    not confident is generated again plainly (as :meth:`skillgraft.SkillMemory.generate`
    does); the decision then reads ``abstain``, with the verdict under ``gate``. The tokens
    of a streamed graft that is retried will already have been emitted.

    Example::

        agent = create_agent(
            model=ChatSkillGraft(memory=memory),
            tools=[],
            middleware=[SkillGraftMiddleware(memory)],
        )
    """

    def __init__(
        self,
        memory: Optional[SkillMemory] = None,
        *,
        home: Union[str, Path, None] = None,
        chat_model: Optional[ChatSkillGraft] = None,
        gate: bool = False,
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

    def _fallback(self, response: Any, recall: Recall) -> Optional[dict]:
        """With the gate on, the metadata of a plain retry when the graft was not confident."""
        if not self.gate:
            return None
        message = _ai_message(response)
        confidence = (message.response_metadata.get(PROVIDER) or {}).get("confidence") if message else None
        if not confidence or confidence["confident"]:
            return None
        reason = f"graft not confident: {confidence['reason']}; generated plainly"
        gate = {**confidence, "fell_back": True, "reason": reason}
        return {**recall.as_dict(), "decision": "abstain", "block_id": None, "block_name": None, "gate": gate}

    # -- hooks -----------------------------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest, handler: Handler) -> Any:
        recall = self.recall(request)
        if recall is None:
            return handler(request)
        if recall.decision == "exact":
            return self._verified_answer(recall)
        if recall.decision == "abstain":
            return _annotate(handler(request), recall.as_dict())
        response = handler(self._grafting(request, recall))
        fallback = self._fallback(response, recall)
        if fallback is not None:
            return _annotate(handler(request), fallback)
        return _annotate(response, recall.as_dict())

    async def awrap_model_call(self, request: ModelRequest, handler: AsyncHandler) -> Any:
        recall = await run_in_executor(None, self.recall, request)
        if recall is None:
            return await handler(request)
        if recall.decision == "exact":
            return self._verified_answer(recall)
        if recall.decision == "abstain":
            return _annotate(await handler(request), recall.as_dict())
        response = await handler(self._grafting(request, recall))
        fallback = self._fallback(response, recall)
        if fallback is not None:
            return _annotate(await handler(request), fallback)
        return _annotate(response, recall.as_dict())


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
