"""The langchain-tests standard suites, run on the real embedded model and router.

Tool calling and structured output are on: the answer pipeline holds the model to a grammar
of tool calls or of the schema, so even the 135M model answers in the right shape (their
tests get room for a whole JSON answer: :data:`FORMAT_MAX_TOKENS`). Capabilities the local
model does not have (media input, another model per call) are switched off through the
suites' documented properties; what it cannot pass is marked ``xfail`` with the reason (strict:
the pytest configs set ``xfail_strict``, so a mark that starts passing fails the run and goes).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from langchain_core.exceptions import OutputParserException
from pydantic import ValidationError

from langchain_tests.integration_tests import ChatModelIntegrationTests, RetrieversIntegrationTests
from langchain_tests.unit_tests import ChatModelUnitTests

import lc_store
from langchain_skillgraft import ChatSkillGraft, SkillGraftRetriever

# Unit tests never generate: their store folder is never opened.
UNIT_HOME = str(Path(tempfile.gettempdir()) / "langchain-skillgraft-unit-never-opened")
# Enough for a whole tool call or JSON object (the other tests keep lc_store.MAX_TOKENS).
FORMAT_MAX_TOKENS = 96
FORMAT_TESTS = ("tool", "structured", "json_mode", "agent_loop")
# The response format is described at the end of the app's system prompt (a system turn of its own
# here), where the tools are too: the prefix a context keeps, skills after it.
JOKE_LOOP = ("the answer is held to the Joke's schema (described in the system turn), but SmolLM2-135M repeats "
             "itself inside the first string ('setup') until max_tokens, so the 'punchline' is never written")


class TestChatSkillGraftUnit(ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[ChatSkillGraft]:
        return ChatSkillGraft

    @property
    def chat_model_params(self) -> dict:
        return {"home": UNIT_HOME}

    @property
    def init_from_env_params(self) -> tuple[dict, dict, dict]:
        env = {"SKILLGRAFT_HOME": UNIT_HOME, "SKILLGRAFT_MODEL": "gemma3-270m"}
        return env, {}, {"home": UNIT_HOME, "model": "gemma3-270m"}

    @property
    def has_tool_calling(self) -> bool:
        return True

    @property
    def has_structured_output(self) -> bool:
        return True


class TestChatSkillGraftIntegration(ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[ChatSkillGraft]:
        return ChatSkillGraft

    @property
    def chat_model_params(self) -> dict:
        return {"home": str(lc_store.store_home()), "max_tokens": lc_store.MAX_TOKENS}

    @pytest.fixture
    def model(self, request):
        """The suite's model; a tool or structured-output test gets room for a whole answer."""
        params = {**self.standard_chat_model_params, **self.chat_model_params, **(getattr(request, "param", None) or {})}
        if any(word in request.node.name for word in FORMAT_TESTS):
            params["max_tokens"] = FORMAT_MAX_TOKENS
        return self.chat_model_class(**params)

    @property
    def has_tool_calling(self) -> bool:
        return True  # a grammar of calls: every door's tool calling

    @property
    def has_tool_choice(self) -> bool:
        return True

    @property
    def has_structured_output(self) -> bool:
        return True  # a grammar of the schema

    @property
    def supports_json_mode(self) -> bool:
        return True

    @pytest.mark.xfail(reason="json_mode holds the answer to any JSON object; SmolLM2-135M repeats itself inside "
                              "the first string ('setup') until max_tokens, so the Joke's 'punchline' is never written")
    def test_json_mode(self, model) -> None:
        super().test_json_mode(model)

    # Marked on the method (the suite's own check asks for it there): only the pydantic variant
    # fails, with the parser's error; the others pass (strict off for them alone), any other error fails.
    @pytest.mark.xfail(reason=JOKE_LOOP, strict=False, raises=(OutputParserException, ValidationError))
    @pytest.mark.parametrize("schema_type", ["pydantic", "typeddict", "json_schema"])
    def test_structured_output(self, model, schema_type) -> None:
        super().test_structured_output(model, schema_type)

    @pytest.mark.xfail(reason=JOKE_LOOP, strict=False, raises=(OutputParserException, ValidationError))
    @pytest.mark.parametrize("schema_type", ["pydantic", "typeddict", "json_schema"])
    async def test_structured_output_async(self, model, schema_type) -> None:
        await super().test_structured_output_async(model, schema_type)

    @pytest.mark.xfail(reason=JOKE_LOOP)
    def test_structured_output_pydantic_2_v1(self, model) -> None:
        super().test_structured_output_pydantic_2_v1(model)

    # The suite's own advice for a model that does not call tools consistently when it may choose.
    @pytest.mark.xfail(reason="offered the choice (tool_choice auto), SmolLM2-135M replies in text, as it does under "
                              "plain llama-server; the suite's tool-calling tests, which require a call, pass")
    @pytest.mark.parametrize("model", [{}, {"output_version": "v1"}], indirect=True)
    def test_agent_loop(self, model) -> None:
        super().test_agent_loop(model)

    @property
    def supports_model_override(self) -> bool:
        return False  # one pinned llama.cpp context per model; blocks are bound to it

    @property
    def returns_usage_metadata(self) -> bool:
        return True


class TestSkillGraftRetriever(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[SkillGraftRetriever]:
        return SkillGraftRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"home": str(lc_store.store_home())}

    @property
    def retriever_query_example(self) -> str:
        return lc_store.GIT_EXAMPLES[0]  # reaches the three git manuals: k=3 gives three Documents
