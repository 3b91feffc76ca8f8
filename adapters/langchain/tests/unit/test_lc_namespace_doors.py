"""The LangChain doors on a namespace and with expiry, on the fakes: the retriever serves the
base's candidates when the base wins the route, and a model's ``block_id`` is the memory's own
forced graft (an expired skill refused, a quarantined one answered plainly, a base block read),
exactly what ``SkillMemory.answer(block=...)`` does."""

from __future__ import annotations

import pytest

from langchain_skillgraft import ChatSkillGraft, SkillGraftRetriever
from skillgraft import AnswerOptions
from skillgraft.core.answer import decision_of
from skillgraft.errors import ExpiredError
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

GIT_MANUAL = "Skill manual: squashing commits with git. Run git rebase -i HEAD~N and mark the others squash."
REBASE_MANUAL = "Skill manual: rebasing a git branch. Run git rebase main and settle each conflict in turn."
BREAD_MANUAL = "Skill manual: baking sourdough bread. Feed the starter, fold, proof overnight and bake covered."
GIT_QUERY = "how do I squash my last git commits?"
BREAD_QUERY = "how long should sourdough bread proof?"
PAST = "2001-01-01T00:00:00Z"


@pytest.fixture
def homes(tmp_path):
    """``(base, team)``: the home's memory holding two git manuals, and namespace team-a's holding
    a bread manual over it; one fake engine and embedder for both."""
    engine, embedder = FakeEngine(), FakeEmbedder()
    base = SkillMemory(tmp_path / "home", engine=engine, embedder=embedder)
    base.add_manual("git-squash", GIT_MANUAL, examples=[GIT_QUERY, "squash my git commits into one"])
    base.add_manual("git-rebase", REBASE_MANUAL, examples=["how do I rebase my git branch?", "git commits rebase"])
    team = SkillMemory(tmp_path / "home", engine=engine, embedder=embedder, namespace="team-a")
    team.add_manual("sourdough", BREAD_MANUAL, examples=[BREAD_QUERY, "how do I bake sourdough bread?"])
    yield base, team
    team.close()
    base.close()


def meta(message) -> dict:
    return message.response_metadata["skillgraft"]


def test_the_retriever_serves_the_bases_candidates_when_the_base_wins_the_route(homes):
    base, team = homes
    recall = team.route(GIT_QUERY)
    assert recall.decision == "graft" and team.blocks.store_of(recall.block) is team.base  # the base won
    docs = SkillGraftRetriever(memory=team, k=5).invoke(GIT_QUERY)
    served = [(recall.block.id, recall.score)] + [(b, float(s)) for b, s in recall.candidates
                                                  if b != recall.block.id and s >= recall.threshold]
    assert [(d.metadata["block_id"], d.metadata["score"]) for d in docs] == served[:5]
    assert docs[0].metadata["name"] == "git-squash" and docs[0].page_content == GIT_MANUAL
    assert {d.metadata["name"] for d in docs} <= {"git-squash", "git-rebase"}
    assert docs == SkillGraftRetriever(memory=base, k=5).invoke(GIT_QUERY)  # as the home's own memory serves them


def test_the_retriever_still_serves_a_namespaces_own_block(homes):
    _, team = homes
    (doc,) = SkillGraftRetriever(memory=team).invoke(BREAD_QUERY)
    assert doc.metadata["name"] == "sourdough" and team.blocks.store_of(team.blocks.get(doc.id)) is team.store


def test_a_block_id_of_the_base_grafts_it_as_the_memory_does(homes):
    _, team = homes
    chat = ChatSkillGraft(memory=team, max_tokens=6, block_id="git-squash")
    answer = chat.invoke("Who won the 1998 world cup?")
    core = team.answer([("user", "Who won the 1998 world cup?")], AnswerOptions(max_tokens=6), block="git-squash")
    assert meta(answer)["block_name"] == "git-squash" and meta(answer)["routed"] == "graft"
    assert answer.content == core.text and meta(answer)["decision"] == core.note.decision
    assert "named by block_id" in meta(answer)["reason"]


@pytest.mark.parametrize("where", ["own", "base"])
def test_a_block_id_of_an_expired_block_is_refused_as_the_memory_refuses_it(homes, where):
    base, team = homes
    owner, name = (team, "sourdough") if where == "own" else (base, "git-squash")
    owner.expiry.set(name, PAST)
    with pytest.raises(ExpiredError) as refused_by_memory:
        team.answer([("user", GIT_QUERY)], AnswerOptions(max_tokens=4), block=name)
    for chat in (ChatSkillGraft(memory=team, max_tokens=4, block_id=name), ChatSkillGraft(memory=team, max_tokens=4)):
        with pytest.raises(ExpiredError) as refused:
            chat.invoke(GIT_QUERY, **({} if chat.block_id else {"block_id": name}))
        assert refused.value.name == refused_by_memory.value.name == name
        with pytest.raises(ExpiredError):
            list(chat.stream(GIT_QUERY, **({} if chat.block_id else {"block_id": name})))


def test_a_block_id_of_a_part_of_an_expired_skill_is_refused(homes, tmp_path):
    _, team = homes
    folder = tmp_path / "skills" / "note-taking"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: note-taking\ndescription: Taking notes in meetings.\n---\n"
                                     "Write the decisions first, then the owners.\n", encoding="utf-8")
    (imported,) = team.skills.import_folders(folder).imported
    team.expiry.set("note-taking", PAST)
    with pytest.raises(ExpiredError):
        team.answer([("user", "how do I take notes?")], block=imported.blocks[0])
    with pytest.raises(ExpiredError, match="note-taking"):
        ChatSkillGraft(memory=team, max_tokens=4).invoke("how do I take notes?", block_id=imported.blocks[0])


def test_a_block_id_of_a_quarantined_block_is_answered_as_the_memory_answers_it(homes):
    _, team = homes
    block = team.blocks.get("sourdough")
    team.store.mark_quarantined(block)
    core = team.answer([("user", BREAD_QUERY)], AnswerOptions(max_tokens=6), block="sourdough")
    answer = ChatSkillGraft(memory=team, max_tokens=6, block_id="sourdough").invoke(BREAD_QUERY)
    assert core.note.decision != "graft" and meta(answer)["decision"] == core.note.decision
    assert {k: v for k, v in decision_of(meta(answer)).items() if k in decision_of(core.note)} == decision_of(core.note)
    assert answer.content == core.text
