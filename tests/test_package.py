"""The documented modules import with the names the docs give them (the engine with llama.cpp,
the adapter with LangChain; the package's face is checked in tests/unit/test_package_face.py)."""

DOCUMENTED_MODULES = {
    "skillgraft": None,
    "skillgraft.errors": None,
    "skillgraft.protocols": ["AnswerSlot", "BlockStorage", "CaptureEngine", "Catalog", "ChatText", "GraftEngine",
                             "TextEmbedder"],
    "skillgraft.testing": ["FakeEmbedder", "FakeEngine", "FakePool", "MemoryBlocks", "MemoryCatalog"],
    "skillgraft.core": None,
    "skillgraft.store": None,
    "skillgraft.routing": None,
    "skillgraft.verify": None,
    "skillgraft.adapter": None,
    "skillgraft.cli": ["cli"],
    "skillgraft.engine": ["Engine"],
    "skillgraft.config": ["EngineSettings", "default_home", "default_model"],
    "skillgraft.memory": None,
    "skillgraft.core.pipeline": ["AnswerPipeline", "answer_note"],
    "skillgraft.core.planning": ["PlanMemory", "forced_recall", "near_miss", "plan_answer"],
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
