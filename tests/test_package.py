import skillgraft


def test_all_is_sorted_and_public():
    assert skillgraft.__all__ == sorted(skillgraft.__all__)
    for name in skillgraft.__all__:
        assert hasattr(skillgraft, name), name
    public = {n for n in vars(skillgraft) if not n.startswith("_")} | set(skillgraft._LAZY)
    modules = {n for n in public if type(getattr(skillgraft, n)).__name__ == "module"}
    assert public - modules - {"__version__"} == set(skillgraft.__all__)


def test_every_error_is_a_skillgraft_error_and_named_error():
    from skillgraft import errors

    for name in dir(errors):
        value = getattr(errors, name)
        if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == errors.__name__:
            assert issubclass(value, skillgraft.SkillgraftError)
            assert name.endswith("Error")
            assert name in errors.__doc__


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


DOCUMENTED_MODULES = {
    "skillgraft": None,
    "skillgraft.errors": None,
    "skillgraft.protocols": ["AnswerSlot", "BlockStorage", "CaptureEngine", "Catalog", "ChatText", "GraftEngine",
                             "TextEmbedder"],
    "skillgraft.testing": ["FakeEmbedder", "FakeEngine", "FakePool", "MemoryBlocks", "MemoryCatalog"],
    "skillgraft.cli": ["cli"],
    "skillgraft.engine": ["Engine"],
    "skillgraft.config": ["EngineSettings", "default_home", "default_model"],
    "skillgraft.memory": ["Generation", "SkillMemory"],
    "skillgraft.core.pipeline": ["AnswerPipeline", "answer_note"],
    "skillgraft.core.answer": ["Answer", "AnswerEnd", "AnswerNote", "AnswerOptions", "AnswerPlan"],
    "skillgraft.server.engine": ["LlamaServerEngine"],
    "skillgraft.gateway": ["GatewayConfig", "serve"],
    "langchain_skillgraft": ["ChatSkillGraft", "SkillGraftMiddleware", "SkillGraftRetriever", "open_memory"],
}


def test_the_public_modules_import_with_their_names():
    import importlib

    for module, names in DOCUMENTED_MODULES.items():
        loaded = importlib.import_module(module)
        for name in names if names is not None else getattr(loaded, "__all__", []):
            assert getattr(loaded, name) is not None, f"{module}.{name}"
