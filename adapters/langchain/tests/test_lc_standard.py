"""The langchain-tests standard suites, run on the real embedded model and router.

Capabilities a 135M local model without tool calling, structured output or media input
does not have are switched off through the suites' documented properties; the tests that
remain apply and pass.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from langchain_tests.integration_tests import ChatModelIntegrationTests, RetrieversIntegrationTests
from langchain_tests.unit_tests import ChatModelUnitTests

import lc_store
from langchain_skillgraft import ChatSkillGraft, SkillGraftRetriever

# Unit tests never generate: their store folder is never opened.
UNIT_HOME = str(Path(tempfile.gettempdir()) / "langchain-skillgraft-unit-never-opened")


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
        return False

    @property
    def has_structured_output(self) -> bool:
        return False


class TestChatSkillGraftIntegration(ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[ChatSkillGraft]:
        return ChatSkillGraft

    @property
    def chat_model_params(self) -> dict:
        return {"home": str(lc_store.store_home()), "max_tokens": lc_store.MAX_TOKENS}

    @property
    def has_tool_calling(self) -> bool:
        return False  # SmolLM2-135M has no tool-calling format

    @property
    def has_structured_output(self) -> bool:
        return False  # no tool calling, no JSON mode

    @property
    def supports_json_mode(self) -> bool:
        return False  # no grammar-constrained decoding

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
