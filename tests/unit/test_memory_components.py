"""The memory's components besides ``memory.skills``: ``memory.apps`` and ``memory.expiry``, the
verbs' old names on the memory (one release, warned), and how many verbs the facade keeps."""

from __future__ import annotations

import inspect

import pytest

from skillgraft import SkillMemory
from skillgraft.errors import AppNotFoundError, ExpiredError
from skillgraft.memory.app_prefixes import Apps
from skillgraft.memory.expiry import Expiries
from skillgraft.memory.old_names import MOVED

PAST = "2001-01-01T00:00:00Z"
MANUAL = "Skill manual: to squash the last N commits, run git reset --soft HEAD~N, then commit."


def test_each_old_name_is_a_verb_of_its_component(fake_memory):
    for old, (component, new) in MOVED.items():
        assert callable(getattr(getattr(fake_memory, component), new, None)), (old, component, new)
        assert old not in vars(SkillMemory), f"{old} is still defined on SkillMemory"


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
    block = fake_memory.get("git-squash")
    with pytest.raises(ExpiredError):
        fake_memory.expiry.live(block)
    assert fake_memory.expiry.visible([block]) == [] and fake_memory.list() == []
    assert [r.name for r in fake_memory.expiry.prune()] == ["git-squash"]
    assert fake_memory.list(include_expired=True) == []


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


def test_the_facade_keeps_few_verbs_of_its_own():
    """The verbs the facade (and its mixins) define, the components aside: the count falls as
    verbs move to components, never rises."""
    own = {name for klass in SkillMemory.__mro__[:-1] for name, _ in inspect.getmembers(klass)
           if not name.startswith("_") and name in vars(klass)}
    assert len(own) <= 31, sorted(own)
