"""The markers of the real parts: registered, strict, and marking by fixtures that exist.

tests/conftest.py marks a test ``model``, ``server``, ``sandbox`` or ``browser`` by the
fixtures it uses; a fixture renamed or moved would silently stop marking, so the tables are
checked here against the test modules' source.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import MODULE_FIXTURES, SHARED_FIXTURES, parts_of

TESTS = Path(__file__).resolve().parents[1]
PARTS = {"model", "server", "sandbox", "browser"}


def fixtures_of(path: Path) -> set[str]:
    """The names of the functions ``path`` decorates with ``pytest.fixture``."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if ast.unparse(target) == "pytest.fixture":
                    found.add(node.name)
    return found


def test_the_parts_are_registered_markers_and_unknown_markers_are_errors(pytestconfig):
    registered = {line.split(":")[0].strip() for line in pytestconfig.getini("markers")}
    assert PARTS <= registered
    assert "--strict-markers" in pytestconfig.getini("addopts")


def test_every_fixture_the_tables_name_is_a_fixture_of_its_module():
    assert set(SHARED_FIXTURES) <= fixtures_of(TESTS / "conftest.py")
    for module, fixtures in MODULE_FIXTURES.items():
        assert (TESTS / module).is_file(), module
        missing = set(fixtures) - fixtures_of(TESTS / module)
        assert not missing, f"{module} has no fixture {sorted(missing)}"
    named = {part for table in [SHARED_FIXTURES, *MODULE_FIXTURES.values()] for parts in table.values() for part in parts}
    assert named <= PARTS


def test_a_module_fixture_marks_only_in_its_own_module():
    assert parts_of("test_gateway_hardening.py", ["home", "tmp_path"]) == {"sandbox"}
    assert parts_of("test_cli.py", ["home", "tmp_path"]) == set()  # the shared ``home`` is a bare folder
    assert parts_of("test_memory.py", ["memory", "smollm2", "embedder"]) == {"model"}
    assert parts_of("test_gateway_tools.py", ["client", "gateway", "store", "smollm2"]) == {"model", "server", "sandbox"}


def test_a_warning_is_an_error_in_both_projects(pytestconfig):
    try:
        import tomllib
    except ImportError:  # Python 3.10; the dev extra installs tomli there
        import tomli as tomllib

    assert pytestconfig.getini("filterwarnings")[0] == "error"
    for folder in (TESTS.parent, TESTS.parent / "adapters" / "langchain"):
        settings = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
        assert settings["filterwarnings"][0] == "error", folder
