"""Text recall places a conversation's skills by the one rule, on the fakes: the first turn's
skill at the end of the system message, a skill a later turn needs in front of that user
message, and what an earlier request held stays where it was (a provider's cached prefix)."""

from __future__ import annotations

from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from langchain_skillgraft import SkillGraftMiddleware
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

SYSTEM = "You are a terse assistant."
GIT = "Skill manual: squashing commits with git. Run git rebase -i HEAD~N and mark the others squash."
BREAD = "Skill manual: baking sourdough bread. Feed the starter, fold, proof overnight and bake covered."
GIT_QUESTION, BREAD_QUESTION = "how do I squash my last commits?", "how long should sourdough bread proof?"


class Seen(BaseCallbackHandler):
    def __init__(self) -> None:
        self.messages = []

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:
        self.messages.append(messages[0])


def test_a_later_skill_leads_its_turn_and_the_first_stays_in_the_system_message(tmp_path):
    with SkillMemory(tmp_path / "store", engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        memory.add_manual("git-squash", GIT, examples=[GIT_QUESTION, "combine commits into one"])
        memory.add_manual("sourdough", BREAD, examples=[BREAD_QUESTION, "bake sourdough bread"])
        other = GenericFakeChatModel(messages=iter([AIMessage("first"), AIMessage("second")]))
        agent = create_agent(model=other, tools=[], middleware=[SkillGraftMiddleware(memory)], system_prompt=SYSTEM)
        seen = Seen()
        state = agent.invoke({"messages": [HumanMessage(GIT_QUESTION)]}, {"callbacks": [seen]})
        state["messages"].append(HumanMessage(BREAD_QUESTION))
        reply = agent.invoke(state, {"callbacks": [seen]})["messages"][-1]
        first, second = seen.messages
        assert isinstance(first[0], SystemMessage) and first[0].text == second[0].text  # the prefix a provider cached
        assert first[0].text.startswith(SYSTEM) and GIT in first[0].text and BREAD not in first[0].text
        assert [m.text for m in first[1:]] == [GIT_QUESTION]
        humans = [m for m in second if isinstance(m, HumanMessage)]
        assert humans[0].text == GIT_QUESTION and humans[1].text.endswith(BREAD_QUESTION) and BREAD in humans[1].text
        assert second[1].text == first[1].text
        meta = reply.response_metadata["skillgraft"]
        assert meta["decision"] == "text" and meta["block_name"] == "sourdough"
        assert [(s["block_name"], s["turn"]) for s in meta["skills"]] == [("git-squash", 0), ("sourdough", 1)]


def test_a_user_message_of_parts_gets_the_skill_as_its_first_part(tmp_path):
    from langchain_skillgraft.middleware import _led_by

    led = _led_by(HumanMessage([{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "x"}}]), "SKILL")
    assert led.content[0] == {"type": "text", "text": "SKILL"} and led.content[1] == {"type": "text", "text": "hi"}
    assert _led_by(HumanMessage("hi"), "SKILL").content == "SKILL\n\nhi"
