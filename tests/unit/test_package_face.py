"""The package's face: a sorted, public ``__all__`` that stays small, errors that are all
``SkillgraftError``s named ``...Error``, and a library that never prints."""

import skillgraft


def test_all_is_sorted_and_public():
    assert skillgraft.__all__ == sorted(skillgraft.__all__)
    for name in skillgraft.__all__:
        assert hasattr(skillgraft, name), name
    public = {n for n in vars(skillgraft) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(skillgraft, n)).__name__ == "module"}
    assert public - modules - {"__version__"} == set(skillgraft.__all__)


def test_the_top_level_is_a_small_face():
    """The facade, its results and the base errors; the rest lives in documented subpackages."""
    assert len(skillgraft.__all__) <= 24
    assert {"SkillMemory", "Answer", "AnswerNote", "AnswerEnd", "AnswerOptions", "SkillgraftError"} <= set(skillgraft.__all__)


def test_every_error_is_a_skillgraft_error_and_named_error():
    from skillgraft import errors

    for name in dir(errors):
        value = getattr(errors, name)
        if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == errors.__name__:
            assert issubclass(value, skillgraft.SkillgraftError)
            assert name.endswith("Error")
            assert name in errors.__doc__
            assert name in errors.__all__


def test_library_never_prints():
    import pathlib
    import re

    root = pathlib.Path(skillgraft.__file__).parent
    for path in root.rglob("*.py"):
        if path.name in {"cli.py"}:
            continue
        text = path.read_text()
        assert not re.search(r"^\s*print\(", text, re.M), path.name
        assert "basicConfig" not in text, path.name


def documented_modules() -> list[str]:
    """The modules docs/api.md says have an ``__all__`` of their own."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    sentence = re.split(r"\.\s", text.split("each with its own `__all__`:", 1)[1], maxsplit=1)[0]
    return re.findall(r"`(skillgraft\.[a-z_.]+)`", sentence)


def top_level_names(module) -> tuple[set[str], set[str]]:
    """The names a module's source binds at its top level: ``(defined there, imported)``.

    Read from the source, so a lazy ``__getattr__`` (``skillgraft.engine``) loads nothing."""
    import ast
    import inspect

    defined, imported = set(), set()
    body = list(ast.parse(inspect.getsource(module)).body)
    while body:
        node = body.pop()
        if isinstance(node, ast.If):
            body += node.body + node.orelse
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imported.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return defined, imported


def test_every_module_the_api_page_names_has_an_all_of_its_public_names():
    import importlib

    modules = documented_modules()
    assert {"skillgraft.errors", "skillgraft.config", "skillgraft.store", "skillgraft.adapter"} <= set(modules)
    for name in modules:
        module = importlib.import_module(name)
        assert "__all__" in vars(module), f"docs/api.md says {name} has an __all__"
        assert len(set(module.__all__)) == len(module.__all__), name
        defined, imported = top_level_names(module)
        unbound = set(module.__all__) - defined - imported
        assert not unbound, f"{name}.__all__ names {sorted(unbound)}, which it lacks"
        missing = {n for n in defined if not n.startswith("_")} - set(module.__all__)
        assert not missing, f"{name} defines {sorted(missing)} but its __all__ leaves them out"
