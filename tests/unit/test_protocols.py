"""The real engine and embedder fit the protocols the memory is written against.

The engine's module needs llama.cpp, so its class is read from the source (no import): every
protocol method must exist with the same parameters (names, kinds and defaults), and every
protocol attribute must be set on ``self``.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import skillgraft
from skillgraft.protocols import GraftEngine, TextEmbedder
from skillgraft.routing.router import Embedder

PACKAGE = Path(skillgraft.__file__).parent


def _members(protocol) -> tuple[dict, set]:
    methods = {
        name: inspect.signature(value)
        for name, value in vars(protocol).items()
        if callable(value) and not name.startswith("_")
    }
    return methods, set(protocol.__annotations__)


def _class_source(name: str) -> ast.ClassDef:
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node
    raise AssertionError(f"no class {name} in the package")


def _parameters(function: ast.FunctionDef) -> list[tuple[str, str, object]]:
    args = function.args
    positional = args.posonlyargs + args.args
    defaults = [inspect.Parameter.empty] * (len(positional) - len(args.defaults)) + [
        ast.literal_eval(d) for d in args.defaults
    ]
    rows = [(a.arg, "positional", d) for a, d in zip(positional, defaults)]
    rows += [
        (a.arg, "keyword", inspect.Parameter.empty if d is None else ast.literal_eval(d))
        for a, d in zip(args.kwonlyargs, args.kw_defaults)
    ]
    return rows


def _signature_rows(signature: inspect.Signature) -> list[tuple[str, str, object]]:
    kinds = {inspect.Parameter.KEYWORD_ONLY: "keyword"}
    return [(p.name, kinds.get(p.kind, "positional"), p.default) for p in signature.parameters.values()]


def test_the_llama_cpp_engine_has_every_member_of_the_engine_protocol():
    engine = _class_source("Engine")
    functions = {node.name: node for node in engine.body if isinstance(node, ast.FunctionDef)}
    assigned = {
        target.attr
        for node in ast.walk(engine)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        for target in (target.elts if isinstance(target, ast.Tuple) else [target])
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
    }
    methods, attributes = _members(GraftEngine)
    assert attributes <= assigned, attributes - assigned
    for name, signature in methods.items():
        assert name in functions, f"Engine has no {name}"
        assert _parameters(functions[name]) == _signature_rows(signature), name


@pytest.mark.parametrize("protocol", [GraftEngine, TextEmbedder])
def test_the_fakes_have_the_same_signatures(protocol):
    from skillgraft.testing import FakeEmbedder, FakeEngine

    fake = {GraftEngine: FakeEngine, TextEmbedder: FakeEmbedder}[protocol]
    methods, _ = _members(protocol)
    for name, signature in methods.items():
        assert _signature_rows(inspect.signature(getattr(fake, name))) == _signature_rows(signature), name


def test_the_sentence_transformers_embedder_fits_the_embedder_protocol():
    embedder = Embedder()  # loads nothing until it encodes
    assert isinstance(embedder, TextEmbedder)
    rows = _signature_rows(inspect.signature(Embedder.encode))
    assert rows[:2] == _signature_rows(inspect.signature(TextEmbedder.encode))
    assert all(default is not inspect.Parameter.empty for _, _, default in rows[2:])


def test_an_unknown_embedder_runtime_is_a_config_error(monkeypatch):
    from skillgraft.errors import ConfigError

    with pytest.raises(ConfigError, match="runtime"):
        Embedder(runtime="gpu-magic")
    monkeypatch.setenv("SKILLGRAFT_EMBEDDER_RUNTIME", "nope")
    with pytest.raises(ConfigError, match="nope"):
        Embedder()
