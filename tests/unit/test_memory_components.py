"""The memory's components besides ``memory.skills`` (blocks, apps, expiry, the confidence gate,
the ledger, the prefix states), the verbs' old names on the memory (one release, warned), and
how many verbs the facade keeps."""

from __future__ import annotations

import inspect

import pytest

from skillgraft import SkillMemory
from skillgraft.errors import AppNotFoundError, ExpiredError
from skillgraft.core.gate import DEFAULT_GATE_LOGPROB
from skillgraft.memory.app_prefixes import Apps
from skillgraft.memory.blocks import Blocks
from skillgraft.memory.expiry import Expiries
from skillgraft.memory.old_names import MOVED

PAST = "2001-01-01T00:00:00Z"
MANUAL = "Skill manual: to squash the last N commits, run git reset --soft HEAD~N, then commit."


def test_each_old_name_is_a_verb_of_its_component(fake_memory):
    for old, (component, new) in MOVED.items():
        assert hasattr(getattr(fake_memory, component), new), (old, component, new)
        assert old not in vars(SkillMemory), f"{old} is still defined on SkillMemory"


def test_blocks_through_their_component(fake_memory):
    assert isinstance(fake_memory.blocks, Blocks) and fake_memory.blocks.memory is fake_memory
    block = fake_memory.add_manual("git-squash", MANUAL, capture=False)
    assert fake_memory.blocks.get("git-squash").id == block.id and fake_memory.blocks.list() == [block]
    assert fake_memory.blocks.store_of(block) is fake_memory.store
    assert fake_memory.blocks.rename("git-squash", "squash").name == "squash"
    assert fake_memory.blocks.forced_graft("squash").block.id == block.id
    assert fake_memory.blocks.check()["ok"]
    assert fake_memory.blocks.delete("squash").id == block.id and fake_memory.blocks.list() == []


def test_apps_through_their_component(fake_memory):
    assert isinstance(fake_memory.apps, Apps) and fake_memory.apps.memory is fake_memory
    assert fake_memory.apps.add("coder", "You write code.").system == "You write code."
    assert [app.name for app in fake_memory.apps.list()] == ["coder"]
    assert fake_memory.apps.get("coder").system == "You write code."
    fake_memory.apps.remove("coder")
    with pytest.raises(AppNotFoundError):
        fake_memory.apps.get("coder")


def test_expiry_through_its_component(fake_memory):
    assert isinstance(fake_memory.expiry, Expiries) and fake_memory.expiry.memory is fake_memory
    block = fake_memory.add_manual("git-squash", MANUAL, capture=False)
    assert fake_memory.expiry.live(block) is block and fake_memory.expiry.visible([block]) == [block]
    record = fake_memory.expiry.set("git-squash", PAST)
    assert record.expired and [r.name for r in fake_memory.expiry.list()] == ["git-squash"]
    block = fake_memory.blocks.get("git-squash")
    with pytest.raises(ExpiredError):
        fake_memory.expiry.live(block)
    assert fake_memory.expiry.visible([block]) == [] and fake_memory.blocks.list() == []
    assert [r.name for r in fake_memory.expiry.prune()] == ["git-squash"]
    assert fake_memory.blocks.list(include_expired=True) == []


def test_the_old_verbs_warn_and_still_work(fake_memory):
    with pytest.deprecated_call(match=r"SkillMemory.add_app is deprecated: use memory.apps.add"):
        fake_memory.add_app("coder", "You write code.")
    with pytest.deprecated_call(match=r"memory.apps.list\(\)"):
        assert [app.name for app in fake_memory.apps()] == ["coder"]
    with pytest.deprecated_call(match=r"memory.apps.get"):
        assert fake_memory.app("coder").system == "You write code."
    with pytest.deprecated_call(match=r"memory.apps.remove"):
        fake_memory.remove_app("coder")
    fake_memory.add_manual("git-squash", MANUAL, capture=False)
    with pytest.deprecated_call(match=r"SkillMemory.expire is deprecated: use memory.expiry.set"):
        assert fake_memory.expire("git-squash", PAST).expired
    with pytest.deprecated_call(match=r"memory.expiry.list"):
        assert [r.name for r in fake_memory.expiries()] == ["git-squash"]
    with pytest.deprecated_call(match=r"memory.expiry.prune"):
        assert [r.name for r in fake_memory.prune_expired()] == ["git-squash"]
    fake_memory.add_manual("sourdough", "Skill manual: feed the starter, then bake at 250 C.", capture=False)
    with pytest.deprecated_call(match=r"SkillMemory.get is deprecated: use memory.blocks.get"):
        assert fake_memory.get("sourdough").name == "sourdough"
    with pytest.deprecated_call(match=r"memory.blocks.list"):
        assert [b.name for b in fake_memory.list()] == ["sourdough"]
    with pytest.deprecated_call(match=r"SkillMemory.gate_threshold is deprecated: use memory.confidence_gate.threshold"):
        assert fake_memory.gate_threshold == fake_memory.confidence_gate.threshold == DEFAULT_GATE_LOGPROB
    with pytest.deprecated_call(match=r"memory.states.cache"):
        assert fake_memory.prefixes is fake_memory.states.cache
    with pytest.deprecated_call(match=r"memory.states.flush"):
        assert fake_memory.flush_derived() == 0


def test_the_facade_keeps_few_verbs_of_its_own():
    """The verbs the facade (and its mixins) define, its components aside: at most 15."""
    own = {name for klass in SkillMemory.__mro__[:-1] for name, _ in inspect.getmembers(klass)
           if not name.startswith("_") and name in vars(klass)}
    assert len(own) <= 15, sorted(own)
