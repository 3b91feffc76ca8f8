"""The package's layers: who may import whom (module by module and package by package), no
import circle, no function over the size budget (60 lines).

Each file is read and parsed once (cached); a rule is one test over every module it covers,
naming each module that breaks it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "skillgraft"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(path: Path, node: ast.ImportFrom) -> list[str]:
    """The absolute ``skillgraft`` modules an import names (a name may be a module)."""
    if node.level == 0:
        base = node.module or ""
        if not base.startswith("skillgraft"):
            return []
    else:
        package = module_name(path).split(".")
        if path.name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([node.module] if node.module else [])])
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


@functools.lru_cache(maxsize=None)
def _source(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(_source(path))


@functools.lru_cache(maxsize=None)
def _known() -> frozenset[str]:
    return frozenset(module_name(p) for p in PACKAGE.rglob("*.py"))


@functools.lru_cache(maxsize=None)
def imports(path: Path, *, top_level_only: bool = False) -> frozenset[str]:
    """The ``skillgraft`` modules ``path`` imports: anywhere, or only when it is loaded
    (module level, not under ``if TYPE_CHECKING``)."""
    tree = _tree(path)
    if top_level_only:
        nodes = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        nodes += [n for n in tree.body if isinstance(n, ast.Try) for n in n.body if isinstance(n, ast.ImportFrom)]
    else:
        nodes = list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            found.update(_resolve(path, node))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("skillgraft"))
    return frozenset(name for name in found if name in _known())


def modules_under(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


def _named(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def test_the_memory_and_what_it_builds_on_never_call_back_into_the_flywheel():
    paths = [*modules_under("memory"), *modules_under("skills"), *modules_under("core"), *modules_under("store"),
             *modules_under("routing"), *modules_under("verify")]
    assert paths
    calling = [_named(path) for path in paths if "skillgraft.flywheel" in imports(path)]
    assert not calling, f"these import skillgraft.flywheel: {calling}"


def test_what_engines_and_fakes_share_loads_no_engine():
    paths = [*modules_under("core"), PACKAGE / "protocols.py", PACKAGE / "store" / "protocols.py",
             *modules_under("testing")]
    assert all(path.is_file() for path in paths)
    loading = {_named(path): sorted(m for m in imports(path) if m.startswith(("skillgraft.engine", "skillgraft.server")))
               for path in paths}
    assert not {name: engines for name, engines in loading.items() if engines}


def test_the_core_builds_on_nothing_but_itself_and_the_errors():
    paths = modules_under("core")
    assert paths
    outside = {_named(path): sorted({m for m in imports(path) if not m.startswith("skillgraft.core")}
                                    - {"skillgraft", "skillgraft.errors"}) for path in paths}
    assert not {name: found for name, found in outside.items() if found}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (module → the modules it imports), or []."""
    # a package's own __init__ is loaded before its modules: not an edge of a cycle
    graph = {m: {d for d in deps if d != m and not m.startswith(d + ".")} for m, deps in graph.items()}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(module: str, trail: list[str]) -> bool:
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                cycle.extend(trail[trail.index(dep):] + [module, dep] if dep in trail else [module, dep])
                return True
            if dep not in state and visit(dep, trail + [module]):
                return True
        state[module] = 2
        return False

    for module in sorted(graph):
        if module not in state and visit(module, []):
            break
    return cycle


def test_no_module_imports_itself_back_when_loaded():
    cycle = _cycle({module_name(p): imports(p, top_level_only=True) for p in PACKAGE.rglob("*.py")})
    assert not cycle, " -> ".join(cycle)


def test_no_module_imports_itself_back_at_all():
    """Counting imports inside functions and under ``if TYPE_CHECKING`` too: every dependency
    goes one way (the store's facade uses its check, the check only a protocol of the store)."""
    cycle = _cycle({module_name(p): imports(p) for p in PACKAGE.rglob("*.py")})
    assert not cycle, " -> ".join(cycle)


# The packages from the bottom up: each imports only packages of the layers below it (the
# store below routing and verification, Agent Skills above them, the memory above the skills,
# the doors above the memory).
LAYERS = [
    {"errors"},
    {"config", "core", "deposit_policy", "web"},
    {"kv"},
    {"store", "engine"},
    {"protocols", "verify"},
    {"routing", "server"},
    {"skills"},
    {"memory"},
    {"adapter", "bundles", "flywheel", "mcp", "inspector", "demo"},
    {"gateway"},
    {"testing", "bench"},
    {""},  # the package's own __init__
    {"cli"},
    {"__main__"},
]


def package_of(module: str) -> str:
    """``skillgraft.store.catalog`` → ``store``; the package's own ``__init__`` → ``""``."""
    return module.split(".")[1] if "." in module else ""


def layer_of(package: str) -> int:
    found = [i for i, layer in enumerate(LAYERS) if package in layer]
    assert found, f"skillgraft.{package} has no layer: add it to LAYERS"
    return found[0]


def package_imports() -> dict[str, set[str]]:
    """Package → the other packages its modules import (anywhere, TYPE_CHECKING included)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        package = package_of(module_name(path))
        graph.setdefault(package, set()).update(package_of(m) for m in imports(path) if package_of(m) != package)
    return graph


def test_every_package_imports_only_the_layers_below_it():
    upward = sorted(
        f"skillgraft.{package or '__init__'} imports skillgraft.{dep or '__init__'}"
        for package, deps in package_imports().items() for dep in deps if layer_of(dep) >= layer_of(package)
    )
    assert not upward, "; ".join(upward)


def test_no_package_imports_itself_back():
    cycle = _cycle({f"p.{package}": {f"p.{dep}" for dep in deps} for package, deps in package_imports().items()})
    assert not cycle, " -> ".join(cycle)


ADAPTER = PACKAGE.parent / "adapters" / "langchain" / "langchain_skillgraft"


def test_the_langchain_adapter_imports_only_the_public_face_and_the_adapter_module():
    """``skillgraft`` and ``skillgraft.adapter`` are what adapters build on; the rest may move."""
    paths = sorted(ADAPTER.glob("*.py"))
    assert paths
    wrong = {}
    for path in paths:
        tree = _tree(path)
        named = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0}
        named |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        inner = sorted(m for m in named if m and m.startswith("skillgraft.") and m != "skillgraft.adapter")
        if inner:
            wrong[path.name] = inner
    assert not wrong, f"{wrong}: use skillgraft.adapter"


# The size budget: a function, from its ``def`` to its last line, nested functions counted in
# it, is at most this long; a module is as long as the functions its one concern needs.
MAX_FUNCTION_LINES = 60
BUDGETED = (PACKAGE, PACKAGE.parent / "adapters" / "langchain" / "langchain_skillgraft")


def test_no_function_is_over_the_size_budget():
    paths = sorted(path for root in BUDGETED for path in root.rglob("*.py"))
    assert paths
    long = {f"{path.relative_to(PACKAGE.parent)}:{node.name}": lines
            for path in paths for node in ast.walk(_tree(path))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (lines := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES}
    assert not long, f"{long} (lines): split each into functions that own one decision each"
