"""Shared fixtures: one real engine per model per session, temp stores, the CLI runner; and the
markers of the real parts each test uses."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def smollm2():
    from skillgraft.engine.llama import Engine

    with Engine("smollm2-135m") as engine:
        yield engine


@pytest.fixture(scope="session")
def gemma3():
    from skillgraft.engine.llama import Engine

    with Engine("gemma3-270m") as engine:
        yield engine


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh store folder, also exported as SKILLGRAFT_HOME for the CLI."""
    folder = tmp_path / "store"
    monkeypatch.setenv("SKILLGRAFT_HOME", str(folder))
    return folder


@pytest.fixture(scope="session")
def embedder():
    from skillgraft.routing.router import Embedder

    return Embedder()


@pytest.fixture
def memory(request, tmp_path, smollm2, embedder):
    """A SkillMemory on a fresh store, sharing the session's engine and embedder; for a test
    that uses ``stocked``, the store is a copy of the session's stocked store."""
    from skillgraft.memory import SkillMemory

    if "stocked" in request.fixturenames:
        shutil.copytree(request.getfixturevalue("stocked_store"), tmp_path / "store")
        smollm2.reset()  # nothing held from an earlier test: a block of the copy is read from its file
    with SkillMemory(tmp_path / "store", engine=smollm2, embedder=embedder) as mem:
        yield mem


@pytest.fixture(scope="session")
def postgres():
    """One real PostgreSQL server for the session (each test takes a new database of it)."""
    from tests.shared_servers import PostgresServer, start

    server = start(PostgresServer)
    yield server
    server.close()


@pytest.fixture(scope="session")
def s3():
    """One real S3-API server for the session (each test takes a fresh prefix of its bucket)."""
    from tests.shared_servers import S3Server, start

    server = start(S3Server)
    yield server
    server.close()


GIT_MANUAL = (
    "Skill manual: squashing commits with git. Run git rebase -i HEAD~N, keep the first line as pick "
    "and change the others to squash. Push with git push --force-with-lease."
)
SOURDOUGH_MANUAL = (
    "Skill manual: baking sourdough bread. Feed the starter, mix flour and water, rest, add salt, "
    "fold every half hour, shape, proof overnight in the fridge and bake covered at 250 C."
)


DOCS = Path(__file__).resolve().parents[1] / "docs"


def doc_block(page: str, heading: str) -> str:
    """The first Python block under ``heading`` in ``docs/<page>``: a test runs it as written."""
    text = (DOCS / page).read_text(encoding="utf-8")
    section = text.split(f"\n{heading}\n", 1)[1]
    return re.search(r"^```python\n(.*?)^```", section, re.M | re.S).group(1)


def stock(memory) -> None:
    """Two manuals (captured by the model) and one solution (checked by the python verifier)."""
    memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?", "combine commits into one"])
    memory.add_manual("sourdough", SOURDOUGH_MANUAL, examples=["how do I bake sourdough bread?", "my loaf is too dense"])
    memory.add_solution("What is 17 * 23?", "391", method="print(17 * 23)", verifier="python")


@pytest.fixture(scope="session")
def stocked_store(tmp_path_factory, smollm2, embedder):
    """The folder of a store stocked once per session (closed): ``memory`` copies it for each
    test that uses ``stocked``, so a test may change its copy freely."""
    from skillgraft.memory import SkillMemory

    home = tmp_path_factory.mktemp("stocked") / "store"
    with SkillMemory(home, engine=smollm2, embedder=embedder) as memory:
        stock(memory)
    return home


@pytest.fixture
def stocked(memory):
    """A memory with two manuals and one verified solution: a copy of the session's stocked store."""
    assert len(memory.blocks.list()) == 3
    return memory


# -- markers: the real parts a test uses (registered in pyproject.toml) -----------------------
#
# A test gets a part's marker from the fixtures it uses, directly or through other fixtures
# (``memory`` and ``stocked`` load the model through ``smollm2`` and ``embedder``): the
# fixtures of this file by name, each module's own fixtures by module (their names mean other
# things elsewhere). What a test runs without such a fixture (the CLI or a subprocess on the
# real model, a server it starts itself) its module marks with ``pytestmark`` or a decorator.
# Nothing is skipped or deselected by a marker: ``-m`` selects.

HERE = Path(__file__).resolve().parent
SHARED_FIXTURES = {
    "smollm2": ("model",),
    "gemma3": ("model",),
    "embedder": ("model",),
    "stocked": ("sandbox",),  # its solution is checked by the python verifier
    "stocked_store": ("sandbox",),
    "postgres": ("server",),
    "s3": ("server",),
}
MODULE_FIXTURES = {
    "test_conformance.py": {"doors": ("server", "sandbox")},
    "test_embedding_endpoint.py": {"endpoint": ("server",)},
    "test_gateway.py": {"store": ("sandbox",)},
    "test_gateway_hardening.py": {"home": ("sandbox",), "gateway": ("server",)},
    "test_gateway_tools.py": {"store": ("sandbox",), "gateway": ("server",)},
    "test_inspector_browser.py": {"store": ("sandbox",), "gateway": ("server",), "browser": ("browser",)},
    "test_mcp.py": {"mcp_home": ("sandbox",)},
    "test_own_model.py": {"own_gguf": ("model",)},
    "test_routing_learning.py": {"mpnet": ("model",)},
    "test_server_engine.py": {"server": ("server",)},
    "hostile/test_bundles.py": {"source": ("sandbox",)},
}


def parts_of(module: str, fixturenames) -> set[str]:
    """The parts a test of ``module`` (a path under tests/) uses through ``fixturenames``."""
    own = MODULE_FIXTURES.get(module, {})
    return {part for name in fixturenames for part in (*own.get(name, ()), *SHARED_FIXTURES.get(name, ()))}


# -- two workers (``make test``: ``pytest -n 2 --dist loadfile``) ----------------------------
#
# A worker takes a test module whole (its module-scoped servers start once), and the modules on
# PostgreSQL and the S3-API server together, so those start once for the run.
SHARED_SERVER_FIXTURES = {"postgres", "s3"}
SHARED_SERVER_MODULES = {"tests/test_shared_store.py", "tests/test_expiry_stores.py"}


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own; absent without xdist
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModulesWhole(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return "shared-servers" if module in SHARED_SERVER_MODULES else module

    return ModulesWhole(config, log)


def unlisted_shared_server_modules(items) -> set[str]:
    """Modules whose tests use PostgreSQL or S3 but that :data:`SHARED_SERVER_MODULES` lacks."""
    used = {Path(item.path).resolve() for item in items if SHARED_SERVER_FIXTURES & set(getattr(item, "fixturenames", ()))}
    return {path.relative_to(HERE.parent).as_posix() for path in used if path.is_relative_to(HERE.parent)} - SHARED_SERVER_MODULES


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects
def pytest_collection_modifyitems(items):
    unlisted = unlisted_shared_server_modules(items)
    if unlisted:
        raise pytest.UsageError(f"tests/conftest.py: add {sorted(unlisted)} to SHARED_SERVER_MODULES "
                                "(a worker runs every module on PostgreSQL and S3)")
    for item in items:
        path = Path(item.path).resolve()
        if not path.is_relative_to(HERE) or path.is_relative_to(HERE / "unit"):
            continue  # the fast suite uses none; other projects' tests are theirs to mark
        for part in sorted(parts_of(path.relative_to(HERE).as_posix(), getattr(item, "fixturenames", ()))):
            item.add_marker(part)
