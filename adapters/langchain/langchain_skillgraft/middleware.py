"""SkillGraftMiddleware: ask a skillgraft memory before each model call of a LangChain agent.

The latest user message is recalled against the memory:

- ``exact``: a verified question recurs, so its verified answer is returned and the model
  is not called;
- ``graft``: one block is relevant, so the call goes to a :class:`ChatSkillGraft` with that
  block grafted;
- ``abstain``: nothing is close enough, so the call passes through unchanged.

The answer's ``response_metadata["skillgraft"]`` carries the decision, block id and name,
score, threshold and reason.
"""

from __future__ import annotations

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

    Args:
        memory: the memory to recall from; by default the one of ``chat_model``, else the
            shared memory of ``home`` (``$SKILLGRAFT_HOME``).
        home: a store folder, when no ``memory`` is given.
        chat_model: the grafting model for agents whose own model is not a
            :class:`ChatSkillGraft`; graft decisions are routed to it.

    Example:
        ```python
        from langchain.agents import create_agent

        agent = create_agent(
            model=ChatSkillGraft(memory=memory),
            tools=[],
            middleware=[SkillGraftMiddleware(memory)],
        )
        ```
    """

    def __init__(
        self,
        memory: Optional[SkillMemory] = None,
        *,
        home: Union[str, Path, None] = None,
        chat_model: Optional[ChatSkillGraft] = None,
    ) -> None:
        super().__init__()
        if memory is None:
            memory = chat_model.skill_memory if chat_model is not None else open_memory(home)
        self.memory = memory
        self.chat_model = chat_model

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

    @staticmethod
    def _annotate(response: Any, recall: Recall) -> Any:
        """``response`` with the recall written into its AI message's ``response_metadata``."""
        if isinstance(response, AIMessage):
            return _with_recall(response, recall)
        if not isinstance(response, ModelResponse):
            return response
        result = list(response.result)
        for i in range(len(result) - 1, -1, -1):
            if isinstance(result[i], AIMessage):
                result[i] = _with_recall(result[i], recall)
                break
        return ModelResponse(result=result, structured_response=response.structured_response)

    # -- hooks -----------------------------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest, handler: Handler) -> Any:
        recall = self.recall(request)
        if recall is None:
            return handler(request)
        if recall.decision == "exact":
            return self._verified_answer(recall)
        if recall.decision == "graft":
            request = self._grafting(request, recall)
        return self._annotate(handler(request), recall)

    async def awrap_model_call(self, request: ModelRequest, handler: AsyncHandler) -> Any:
        recall = await run_in_executor(None, self.recall, request)
        if recall is None:
            return await handler(request)
        if recall.decision == "exact":
            return self._verified_answer(recall)
        if recall.decision == "graft":
            request = self._grafting(request, recall)
        return self._annotate(await handler(request), recall)


def _with_recall(message: AIMessage, recall: Recall) -> AIMessage:
    produced = message.response_metadata.get(PROVIDER) or {}
    metadata = {**message.response_metadata, PROVIDER: {**produced, **recall.as_dict()}}
    return message.model_copy(update={"response_metadata": metadata})
