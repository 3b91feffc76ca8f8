"""An OpenAI-compatible embeddings endpoint as the router's text encoder.

``EndpointEmbedder("http://127.0.0.1:8081/v1", model="all-minilm")`` posts texts to
``<base>/embeddings`` (``/v1`` is added to a base without it) in batches and returns the
vectors made unit length. Without ``model`` it asks ``<base>/models`` and takes the one
model served there (llama-server with ``--embeddings`` serves one). The name recorded
with every vector is ``openai:<model id>``, without the URL, so each host of a shared store
may run its own endpoint; the record's digest is the model id.
``$SKILLGRAFT_EMBEDDER_API_KEY``, when set, is sent as a bearer token.

Everything an endpoint answers is checked: one finite, non-zero vector per text, all of
one dimension, in the order asked (by ``index``); anything else is an :class:`EmbedderError`
that names the endpoint and what was wrong, as are a timeout and a refused connection.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from typing import Optional, Sequence
from urllib.parse import urlsplit

import numpy as np

from ..errors import ConfigError, EmbedderError

__all__ = ["EndpointEmbedder", "ENDPOINT_PREFIX"]

ENDPOINT_PREFIX = "openai:"
API_KEY_ENV = "SKILLGRAFT_EMBEDDER_API_KEY"
BATCH = 64
TIMEOUT_S = 60.0
MAX_RESPONSE_BYTES = 64 << 20


class EndpointEmbedder:
    """Texts to unit vectors through an OpenAI-compatible ``/v1/embeddings`` endpoint."""

    def __init__(self, url: str, model: Optional[str] = None, *, timeout_s: float = TIMEOUT_S) -> None:
        """``timeout_s`` bounds each answer whole (connecting, and every byte of it)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"an embeddings endpoint is an http(s):// URL, got {url!r}")
        path = parts.path.rstrip("/")
        if path.endswith("/embeddings"):
            path = path[: -len("/embeddings")]
        if not path.endswith("/v1"):
            path += "/v1"
        self.base = f"{parts.scheme}://{parts.netloc}{path}"
        self.spec = url
        self.timeout_s = timeout_s
        self._model = model
        self._dimension: Optional[int] = None
        self._client = None
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        """The model id: the one given, else the only one the endpoint lists."""
        if self._model is None:
            data = self._request("GET", "/models")
            models = data.get("data") if isinstance(data, dict) else None
            ids = [m.get("id") for m in models if isinstance(m, dict)] if isinstance(models, list) else []
            ids = [i for i in ids if isinstance(i, str) and i]
            if len(ids) != 1:
                raise EmbedderError(
                    f"the embeddings endpoint {self.base} lists {len(ids)} models ({', '.join(ids[:5])}): name one"
                    " (model=...)"
                )
            self._model = ids[0]
        return self._model

    @property
    def name(self) -> str:
        return ENDPOINT_PREFIX + self.model

    def record(self) -> dict:
        """What the store records: ``openai:<model>``, the URL given, dimension, the model id."""
        if self._dimension is None:
            self.encode(["dimension"])
        return {"name": self.name, "spec": self.spec, "dimension": self._dimension, "digest": self.model}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text, in order."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dimension or 0), np.float32)
        rows = []
        for start in range(0, len(texts), BATCH):
            rows.append(self._batch(texts[start:start + BATCH]))
        vectors = np.concatenate(rows)
        return np.ascontiguousarray(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), dtype=np.float32)

    def _batch(self, texts: list[str]) -> np.ndarray:
        data = self._request("POST", "/embeddings", {"model": self.model, "input": texts, "encoding_format": "float"})
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list) or len(items) != len(texts):
            raise EmbedderError(
                f"the embeddings endpoint {self.base} answered {len(items) if isinstance(items, list) else 'no'} "
                f"vectors for {len(texts)} texts"
            )
        ordered: list = [None] * len(texts)
        for position, item in enumerate(items):
            index = item.get("index", position) if isinstance(item, dict) else None
            vector = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(index, int) or not 0 <= index < len(texts) or ordered[index] is not None:
                raise EmbedderError(f"the embeddings endpoint {self.base} answered a bad or repeated index {index!r}")
            ordered[index] = _vector(vector, self.base, index)
        dimensions = {len(v) for v in ordered}
        if len(dimensions) != 1 or (self._dimension is not None and dimensions != {self._dimension}):
            raise EmbedderError(
                f"the embeddings endpoint {self.base} answered vectors of {sorted(dimensions)} dimensions"
                + (f" (earlier {self._dimension})" if self._dimension else "")
            )
        with np.errstate(over="ignore"):
            vectors = np.array(ordered, dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1)
        if not np.isfinite(vectors).all() or not (np.isfinite(norms) & (norms > 0)).all():
            raise EmbedderError(f"the embeddings endpoint {self.base} answered a vector that is not finite or zero as "
                                "float32 (a value beyond 3.4e38, or all tiny)")
        self._dimension = dimensions.pop()
        return vectors

    def _request(self, method: str, path: str, body: Optional[dict] = None) -> object:
        import httpx

        headers = {}
        key = os.environ.get(API_KEY_ENV)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout_s, trust_env=False)
            deadline = time.monotonic() + self.timeout_s  # for the whole answer: a dripped one is cut off too
            try:
                with self._client.stream(method, self.base + path, json=body, headers=headers) as response:
                    content = bytearray()
                    for chunk in response.iter_bytes():
                        content += chunk
                        if len(content) > MAX_RESPONSE_BYTES:
                            raise EmbedderError(f"the embeddings endpoint {self.base} answered over {MAX_RESPONSE_BYTES} bytes")
                        if time.monotonic() > deadline:
                            raise EmbedderError(f"the embeddings endpoint {self.base} took over {self.timeout_s:g} s to answer")
            except httpx.HTTPError as exc:
                raise EmbedderError(f"the embeddings endpoint {self.base} cannot be reached: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            text = bytes(content[:200]).decode("utf-8", "replace")
            raise EmbedderError(f"the embeddings endpoint {self.base}{path} answered HTTP {response.status_code}: {text}")
        try:
            return json.loads(bytes(content))
        except (ValueError, RecursionError):  # RecursionError: deeply nested arrays
            raise EmbedderError(f"the embeddings endpoint {self.base}{path} answered something that is not JSON") from None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _vector(value: object, where: str, index: int) -> list[float]:
    if not isinstance(value, list) or not value or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
        raise EmbedderError(f"the embeddings endpoint {where} answered no list of numbers for text {index}")
    if not all(math.isfinite(x) for x in value) or not any(value):
        raise EmbedderError(f"the embeddings endpoint {where} answered a non-finite or zero vector for text {index}")
    return value
