"""The gateway's inspector per namespace, on the fakes: a namespace's key (as a bearer token or
signed in) sees its own skills and the base's on /ui, never another namespace's; an admin key
sees the base and may pick a namespace of the key file; other keys see nothing."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from skillgraft.gateway.app import create_app
from skillgraft.gateway.keys import ApiKeys, Principal
from skillgraft.gateway.service import Gateway
from skillgraft.inspector.pages import COOKIE
from skillgraft.testing import FakePool

from .test_tenants import BREAD_QUERY, KEY_A, KEY_B, opened, tenants  # noqa: F401  (fixtures)

ADMIN = "the-admin-key-0004"
KEYS = ApiKeys({KEY_A: Principal("team-a"), KEY_B: Principal("team-b"), ADMIN: Principal(admin=True)})


@pytest.fixture
def ui(tenants, fake_engine, fake_embedder):
    base, _, b = tenants
    b.add_manual("kettle", "Skill manual: descaling a kettle. Boil water with citric acid, rinse twice.")
    gateway = Gateway(base.store.home, FakePool(fake_engine), embedder=fake_embedder)
    with TestClient(create_app(gateway, keys=KEYS), base_url="http://127.0.0.1") as client:
        def page(path: str, key: str = None, **options):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            return client.get("/ui" + path, headers=headers, **options)

        page.client = client
        yield page
    gateway.close()


def shown(response) -> set[str]:
    assert response.status_code == 200, response.text
    return {name for name in ("git-squash", "sourdough", "kettle") if f">{name}<" in response.text}


def test_a_namespaces_key_sees_its_skills_and_the_base_never_anothers(ui):
    assert shown(ui("", KEY_A)) == {"git-squash", "sourdough"}
    assert shown(ui("", KEY_B)) == {"git-squash", "kettle"}
    assert shown(ui("?namespace=team-b", KEY_A)) == {"git-squash", "sourdough"}  # only an admin picks
    assert ui("/skills/sourdough", KEY_A).status_code == 200 and ui("/skills/git-squash", KEY_A).status_code == 200
    assert ui("/skills/kettle", KEY_A).status_code == 404
    assert ">sourdough<" in ui("/route", KEY_A, params={"q": BREAD_QUERY}).text  # a candidate of A's
    assert ">sourdough<" not in ui("/route", KEY_B, params={"q": BREAD_QUERY}).text


def test_an_admin_sees_the_base_and_picks_a_namespace_of_the_key_file(ui):
    assert shown(ui("", ADMIN)) == {"git-squash"}
    assert shown(ui("?namespace=team-a", ADMIN)) == {"git-squash", "sourdough"}
    assert ui("?namespace=team-c", ADMIN).status_code == 400  # no key opens it: nothing is made
    assert ui("?namespace=../etc", ADMIN).status_code == 400
    assert ui("", "not-a-key-of-this-gateway").status_code == 401 and ui("").status_code == 401


def test_signing_in_with_a_namespaces_key_shows_that_namespace(ui):
    client = ui.client
    refused = client.post("/ui/login", data={"key": "not-a-key-of-this-gateway"}, follow_redirects=False)
    assert refused.status_code == 401
    signed = client.post("/ui/login", data={"key": KEY_B}, follow_redirects=False)
    assert signed.status_code == 303 and COOKIE in signed.cookies
    assert shown(client.get("/ui")) == {"git-squash", "kettle"}  # the client keeps the cookie
    client.cookies.clear()
    assert client.get("/ui").status_code == 401


def test_a_namespaces_runtime_page_leaves_out_the_shared_pool(ui):
    assert 'id="slots"' in ui("/runtime", ADMIN).text
    page = ui("/runtime", KEY_A)
    assert page.status_code == 200 and "fake-chatml" in page.text and 'id="slots"' not in page.text


def test_a_local_namespaces_inspector_shows_its_skills_then_the_bases(tenants):
    from fastapi import FastAPI

    from skillgraft.inspector import LocalSource, mount_inspector

    _, a, _ = tenants
    app = FastAPI()
    mount_inspector(app, LocalSource(a))
    client = TestClient(app)
    assert shown(client.get("/ui")) == {"git-squash", "sourdough"}
    assert client.get("/ui/skills/git-squash").status_code == 200  # a base skill's page
    assert client.get("/ui?namespace=team-b").status_code == 400  # one store's inspector shows that one


def test_the_skill_list_marks_what_has_expired(tenants):
    from fastapi import FastAPI

    from skillgraft.inspector import LocalSource, mount_inspector

    _, a, _ = tenants
    app = FastAPI()
    mount_inspector(app, LocalSource(a))
    client = TestClient(app)
    assert ">expired<" not in client.get("/ui").text
    a.expiry.set("sourdough", "2001-01-01")
    page = client.get("/ui").text
    assert page.count(">expired<") == 1 and ">sourdough<" in page  # shown, marked
