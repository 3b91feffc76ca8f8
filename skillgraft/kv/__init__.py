"""The KV house: one context over one KV backend, every state found by key.

- :mod:`.context` — :class:`AnswerContext`, where every reuse and capture decision is made, with
  the derived states pending on its cells; the in-process backend (:class:`LocalBackend`);
- :mod:`.backend` — :class:`KVBackend`, the cells a context drives (a llama-server slot's:
  :class:`~skillgraft.server.slot.SlotBackend`);
- :mod:`.prefixes` — which beginning of a prompt is reused, the derived prefix states
  (:class:`PrefixCache`) and the chained block keys that find them (:class:`PrefixIndex`).
"""

from .backend import KVBackend
from .context import AnswerContext, LocalBackend
from .prefixes import BLOCK_TOKENS, DerivedStore, PrefixCache, PrefixIndex, chain_keys, state_key

__all__ = [
    "BLOCK_TOKENS", "AnswerContext", "DerivedStore", "KVBackend", "LocalBackend", "PrefixCache", "PrefixIndex",
    "chain_keys", "state_key",
]
