"""Ids a client writes into a path are input: one past SQLite's integers (a correction's) is
the same 4xx as any id that names nothing, never a 500 from the driver's overflow."""

from __future__ import annotations

import pytest

from tests.required import need

need("fastapi", "skillgraft[serve]")

from fastapi.testclient import TestClient  # noqa: E402

from skillgraft.deposit_policy import DepositPolicy  # noqa: E402
from skillgraft.errors import InputError  # noqa: E402
from skillgraft.gateway.app import create_app  # noqa: E402
from skillgraft.gateway.service import Gateway  # noqa: E402
from skillgraft.testing import FakePool  # noqa: E402

from .conftest import GIT_MANUAL  # noqa: E402

HUGE = [1 << 63, 99999999999999999999999, -(1 << 63) - 1]


@pytest.mark.parametrize("correction_id", HUGE)
def test_removing_a_correction_of_an_id_past_sqlites_integers_is_a_400(fake_memory, fake_engine, fake_embedder,
                                                                        correction_id):
    fake_memory.add_manual("git-squash", GIT_MANUAL)
    gateway = Gateway(fake_memory.store.home, FakePool(fake_engine), embedder=fake_embedder)
    app = create_app(gateway, deposits=DepositPolicy(allowed=True, per_minute=10_000))
    try:
        with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as http:
            reply = http.delete(f"/v1/skillgraft/skills/feedback/{correction_id}")
            assert reply.status_code == 400, reply.text
            assert "no routing correction" in reply.json()["error"]["message"]
    finally:
        gateway.close()


@pytest.mark.parametrize("correction_id", HUGE)
def test_the_store_names_no_correction_past_sqlites_integers(fake_memory, correction_id):
    with pytest.raises(InputError, match="no routing correction"):
        fake_memory.store.remove_correction(correction_id)
