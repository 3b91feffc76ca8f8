"""A home that became a store through namespace imports (``--namespace NAME skills import``,
nothing added to its base) is served without ``--create``, and each key sees its namespace's
skills; a folder that holds no store at all is still refused."""

from __future__ import annotations

import pytest

from tests.required import need

need("fastapi", "skillgraft[serve]")

from click.testing import CliRunner  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from skillgraft.cli.main import cli  # noqa: E402
from skillgraft.gateway import pool, runner, service  # noqa: E402
from skillgraft.memory import SkillMemory  # noqa: E402
from skillgraft.testing import FakeEmbedder, FakeEngine, FakePool  # noqa: E402

from .skill_folders import git_skill, pdf_skill  # noqa: E402

KEY_A, KEY_B, ADMIN_KEY = "key-of-team-a-0001", "key-of-team-b-0002", "the-admin-key-0003"


@pytest.fixture
def served(monkeypatch):
    """``serve`` on the fake pool and embedder: what each key lists once it would listen."""
    monkeypatch.setattr(SkillMemory, "open", classmethod(
        lambda cls, home, derived_bytes=None, namespace=None, **options: cls(
            home, embedder=FakeEmbedder(), derived_bytes=derived_bytes, namespace=namespace)))
    monkeypatch.setattr(pool, "ServerPool", lambda *args, **kwargs: FakePool(FakeEngine()))

    class FakeEmbedded(service.Gateway):
        def __init__(self, *args, **options):
            super().__init__(*args, **{**options, "embedder": options.get("embedder") or FakeEmbedder()})

    monkeypatch.setattr(service, "Gateway", FakeEmbedded)
    seen = {}

    def listen(app, host, port, ready=None, http=None):
        with TestClient(app, base_url="http://127.0.0.1") as client:
            for key in (KEY_A, KEY_B, ADMIN_KEY):
                listed = client.get("/v1/skillgraft/skills", headers={"Authorization": f"Bearer {key}"})
                assert listed.status_code == 200, listed.text
                seen[key] = sorted(row["name"] for row in listed.json()["data"])

    monkeypatch.setattr(runner, "run_app", listen)
    return seen


def invoke(*args):
    return CliRunner().invoke(cli, list(args))


def test_a_home_made_by_namespace_imports_is_served_without_create(tmp_path, served):
    home = str(tmp_path / "home")
    for namespace, skill in (("team-a", pdf_skill), ("team-b", git_skill)):
        imported = invoke("--home", home, "--namespace", namespace, "skills", "import", str(skill(tmp_path / namespace)))
        assert imported.exit_code == 0, imported.output
    assert not (tmp_path / "home" / "catalog.db").exists()  # nothing was added to the base
    keys = tmp_path / "keys"
    keys.write_text(f"team-a {KEY_A}\nteam-b {KEY_B}\nadmin {ADMIN_KEY}\n")
    keys.chmod(0o600)
    result = invoke("--home", home, "serve", "--port", "0", "--keys", str(keys))
    assert result.exit_code == 0, result.output
    assert served == {KEY_A: ["pdf", "pdf/references/forms.md"], KEY_B: ["git-squash"], ADMIN_KEY: []}


def test_a_folder_holding_no_store_is_still_refused(tmp_path, served):
    (tmp_path / "home" / "namespaces" / "team-a").mkdir(parents=True)  # a folder, no catalog in it
    result = invoke("--home", str(tmp_path / "home"), "serve", "--port", "0")
    assert result.exit_code == 1 and "no skillgraft store" in result.stderr and served == {}
