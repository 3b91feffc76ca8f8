"""Why a namespace abstains counts the base it reads: an empty namespace store over a base with
routable blocks abstains with the base's nearest miss, and "no routable blocks" is said only
when neither store has any."""

from __future__ import annotations

from skillgraft.memory import SkillMemory
from skillgraft.memory.namespaces import better_recall
from skillgraft.core.recall import Recall
from skillgraft.routing.ranking import NO_ROUTABLE_BLOCKS

from .conftest import GIT_MANUAL, GIT_QUERY, OUT_OF_DOMAIN


def open_at(home, fake_engine, fake_embedder, namespace=None) -> SkillMemory:
    return SkillMemory(home, engine=fake_engine, embedder=fake_embedder, namespace=namespace)


def test_an_empty_namespace_over_a_stocked_base_abstains_with_the_bases_reason(tmp_path, fake_engine, fake_embedder):
    with open_at(tmp_path / "home", fake_engine, fake_embedder) as base:
        base.add_manual("git-squash", GIT_MANUAL)
        alone = base.route(OUT_OF_DOMAIN)
    with open_at(tmp_path / "home", fake_engine, fake_embedder, "team-a") as team:
        assert team.route(GIT_QUERY).decision == "graft"
        recall = team.route(OUT_OF_DOMAIN)
    assert recall.decision == "abstain" and "no routable blocks" not in recall.reason
    assert alone.reason in recall.reason and "this namespace's own store is empty" in recall.reason
    assert (recall.score, recall.runner_up) == (alone.score, "git-squash")


def test_no_routable_blocks_only_when_neither_store_has_any(tmp_path, fake_engine, fake_embedder):
    open_at(tmp_path / "home", fake_engine, fake_embedder).close()
    with open_at(tmp_path / "home", fake_engine, fake_embedder, "team-a") as team:
        recall = team.route(OUT_OF_DOMAIN)
    assert recall.decision == "abstain" and recall.score == 0.0
    assert "no routable blocks" in recall.reason and "base" in recall.reason


def test_a_store_whose_blocks_cannot_be_offered_is_not_called_empty(tmp_path, fake_engine, fake_embedder):
    with open_at(tmp_path / "home", fake_engine, fake_embedder) as memory:
        memory.add_manual("git-squash", GIT_MANUAL)
        memory.expiry.set("git-squash", "2001-01-01")
        recall = memory.route(GIT_QUERY)
    assert recall.decision == "abstain" and "no routable blocks" not in recall.reason
    assert "1 routable block " in recall.reason and "expiry" in recall.reason


def test_a_namespace_that_ranks_its_own_blocks_keeps_its_own_abstain():
    own = Recall("abstain", None, 0.2, 0.5, "own miss", "mine", [("b1", 0.2)])
    base = Recall("abstain", None, 0.4, 0.5, "base miss", "theirs", [("b2", 0.4)])
    assert better_recall(own, base) is own
    empty = Recall("abstain", None, 0.0, 0.5, NO_ROUTABLE_BLOCKS)
    assert better_recall(empty, base).runner_up == "theirs" and "base miss" in better_recall(empty, base).reason
    assert better_recall(empty, empty).reason != NO_ROUTABLE_BLOCKS and "neither" in better_recall(empty, empty).reason
