"""Deterministic fakes of the engine, the embedder, the server pool and the storage, for fast
tests without models, servers or files.

- :class:`FakeEngine` keeps the contracts of :class:`~skillgraft.protocols.GraftEngine` with
  no llama.cpp: a byte-level tokenizer, a ChatML template and a "KV cache" that is a hash
  chain over tokens and positions, so a wrong, shifted or tampered restore changes the logits
  as a real one does (:mod:`skillgraft.testing.engine`).
- :class:`FakeEmbedder` hashes lowercased words and character trigrams into 384 dimensions,
  so texts that share words score higher.
- :class:`FakePool` leases one fake engine, as the gateway's server pool leases slots.
- :class:`MemoryCatalog` and :class:`MemoryBlocks` keep a store's catalog and payloads in
  memory (:class:`~skillgraft.protocols.Catalog`, :class:`~skillgraft.protocols.BlockStorage`).

None of them imports llama.cpp or torch::

    memory = SkillMemory(home, engine=FakeEngine(reply="391"), embedder=FakeEmbedder())
"""

from .embedder import FakeEmbedder
from .engine import (
    BOS, END_OF_GENERATION, EOS, IM_END, IM_START, N_VOCAB, PAYLOAD_CELL, PAYLOAD_HEADER, PAYLOAD_MAGIC, SCRIPT_BIAS,
    SPECIAL_TEXT, SPECIAL_TOKENS, FakeEngine, Reply,
)
from .pool import FakeLease, FakePool
from .storage import MemoryBlocks, MemoryCatalog

__all__ = [
    "BOS", "END_OF_GENERATION", "EOS", "FakeEmbedder", "FakeEngine", "FakeLease", "FakePool", "IM_END", "IM_START",
    "MemoryBlocks", "MemoryCatalog", "N_VOCAB", "PAYLOAD_CELL", "PAYLOAD_HEADER", "PAYLOAD_MAGIC", "Reply",
    "SCRIPT_BIAS", "SPECIAL_TEXT", "SPECIAL_TOKENS",
]
