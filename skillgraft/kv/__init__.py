"""The KV house: one context over one KV backend, every state found by key.

- :mod:`.context` — :class:`AnswerContext`, where every reuse and capture decision is made;
- :mod:`.backend` — :class:`KVBackend`, the cells it drives (in-process: :mod:`.local`; a
  llama-server slot: :mod:`skillgraft.server.slot`);
- :mod:`.reuse` — which beginning of a prompt is reused; :mod:`.prefix_cache` — derived prefix
  states; :mod:`.keys` — chained block keys that find them; :mod:`.pending` — captures made
  when the cells are about to go.
"""

from .backend import KVBackend
from .context import AnswerContext
from .keys import BLOCK_TOKENS, PrefixIndex, chain_keys, state_key
from .prefix_cache import DerivedStore, PrefixCache

__all__ = [
    "BLOCK_TOKENS", "AnswerContext", "DerivedStore", "KVBackend", "PrefixCache", "PrefixIndex", "chain_keys",
    "state_key",
]
