"""One bound on the derived states of a whole gateway: the base and every namespace share
``--derived-mib`` (and the in-memory bound), each namespace within its fair share keeping its
states however another floods."""

from __future__ import annotations

from collections import OrderedDict

import pytest

from tests.required import need

need("fastapi", "skillgraft[serve]")

from fastapi.testclient import TestClient  # noqa: E402

from skillgraft.gateway.app import create_app  # noqa: E402
from skillgraft.gateway.keys import ApiKeys, Principal  # noqa: E402
from skillgraft.gateway.service import Gateway  # noqa: E402
from skillgraft.store.derived_budget import SharedBytes, shared_bytes  # noqa: E402
from skillgraft.testing import FakeEmbedder, FakeEngine, FakePool  # noqa: E402

from .test_prefix_reuse import open_memory  # noqa: E402
from .test_reuse_scopes import RULES, ask  # noqa: E402

TEAMS = {"key-of-team-a-0001": "team-a", "key-of-team-b-0002": "team-b", "key-of-team-c-0003": "team-c"}
ADMIN_KEY = "the-admin-key-0004"
KEYS = ApiKeys({**{key: Principal(team) for key, team in TEAMS.items()}, ADMIN_KEY: Principal(admin=True)})
FLOODER = "key-of-team-a-0001"
QUESTIONS = ("Open the front door please.", "Log my visit for today.", "Any mail for me?")


class Member:
    """A folder of derived states as a budget sees it: sizes, oldest first."""

    def __init__(self, *sizes: int) -> None:
        self.files, self.memory = OrderedDict(enumerate(sizes)), OrderedDict(enumerate(sizes))

    n_bytes = property(lambda self: sum(self.files.values()))
    memory_n_bytes = property(lambda self: sum(self.memory.values()))

    def evict_oldest(self) -> bool:
        if not self.files:
            return False
        key, _ = self.files.popitem(last=False)
        self.memory.pop(key, None)
        return True

    def drop_oldest_memory(self) -> bool:
        return bool(self.memory) and self.memory.popitem(last=False) is not None


def test_past_the_bound_the_folder_furthest_over_its_share_gives_way():
    budget = SharedBytes(100, memory_bytes=60)
    quiet, flood = Member(20), Member(*[10] * 12)
    budget.join(quiet)
    budget.join(flood)
    assert budget.usage() == (100, 60) and quiet.n_bytes == 20 and quiet.memory_n_bytes == 20
    assert budget == 100 and shared_bytes(budget) is budget and shared_bytes(None) > 0 and not shared_bytes(0)
    alone = SharedBytes(100)
    solo = Member(60, 30, 30)
    alone.join(solo)  # a folder alone may use the whole bound
    assert solo.n_bytes == 60 and list(solo.files) == [1, 2]


def gateway_sizes(home, gateway) -> dict:
    gateway.pool.settle_captures()
    held: dict = {}
    for path in home.rglob("*.state"):
        parts = path.relative_to(home).parts
        who = parts[1] if parts[0] == "namespaces" else "base"
        held[who] = held.get(who, 0) + path.stat().st_size
    return held


@pytest.fixture
def gateway(tmp_path):
    open_memory(tmp_path / "home").close()
    made = []

    def make(derived_bytes):
        made.append(Gateway(tmp_path / "home", FakePool(FakeEngine()), embedder=FakeEmbedder(),
                            derived_bytes=derived_bytes))
        return made[-1], TestClient(create_app(made[-1], keys=KEYS), base_url="http://127.0.0.1")

    yield make
    for opened in made:
        opened.close()


def each_team_once(http) -> None:
    for key, team in [(ADMIN_KEY, "base"), *TEAMS.items()]:
        for question in QUESTIONS:
            ask(http, key, f"You are the {team} desk. {RULES}", question)


def test_the_bound_holds_for_the_whole_gateway_and_a_flood_evicts_only_its_own(gateway, tmp_path):
    home = tmp_path / "home"
    roomy, http = gateway(1 << 30)
    with http:
        each_team_once(http)
        one = gateway_sizes(home, roomy)
    assert sorted(one) == ["base", "team-a", "team-b", "team-c"]
    shared = roomy.memory.derived_bytes  # --derived-mib in bytes, made one budget for every namespace
    assert isinstance(shared, SharedBytes) and shared == 1 << 30
    assert all(roomy.tenant(team).memory.derived_bytes is shared for team in TEAMS.values())
    state = max(one.values())  # one agent prompt's state each
    roomy.close()
    for path in home.rglob("*.state"):
        path.unlink()

    bound = SharedBytes(int(state * 5.2), memory_bytes=int(state * 4.5))
    bounded, http = gateway(bound)
    with http:
        each_team_once(http)
        for i in range(8):  # team-a's flood of new agent prompts
            for question in QUESTIONS[:2]:
                ask(http, FLOODER, f"You are flood agent {i}. {RULES}", question)
        held = gateway_sizes(home, bounded)
        disk, memory = bound.usage()
    assert sum(held.values()) <= bound and disk <= bound and memory <= bound.memory_bytes
    assert all(held.get(team) == one[team] for team in ("base", "team-b", "team-c"))  # kept, within their share
    assert held["team-a"] >= one["team-a"]  # the flood used what the others left, no more
