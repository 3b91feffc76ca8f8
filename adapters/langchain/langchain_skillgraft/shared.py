"""One :class:`~skillgraft.SkillMemory` per store and model per process, one lock per memory.

LangChain builds models and retrievers freely (a standard test suite builds one per test),
so opening a store by ``home`` reuses the memory already open for that folder and model:
the llama.cpp context and the embedder are loaded once. A memory's engine is not
thread-safe, so every adapter call on a memory holds that memory's lock.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path
from typing import Optional, Union

from skillgraft.adapter import Embedder, SkillMemory, default_home, default_model

_guard = threading.Lock()
_memories: dict[tuple[Path, str], SkillMemory] = {}
_locks: "weakref.WeakKeyDictionary[SkillMemory, threading.Lock]" = weakref.WeakKeyDictionary()
_embedder: Optional[Embedder] = None


def store_key(home: Union[str, Path, None] = None, model: Union[str, Path, None] = None) -> tuple[Path, str]:
    """The resolved ``(store folder, model)`` that names a shared memory."""
    folder = Path(home if home is not None else default_home()).expanduser().resolve()
    return folder, str(model or default_model())


def open_memory(home: Union[str, Path, None] = None, model: Union[str, Path, None] = None) -> SkillMemory:
    """The process's memory for the store at ``home`` (``$SKILLGRAFT_HOME``) and ``model``."""
    global _embedder
    key = store_key(home, model)
    with _guard:
        memory = _memories.get(key)
        if memory is None:
            _embedder = _embedder or Embedder()
            memory = _memories[key] = SkillMemory(key[0], model=key[1], embedder=_embedder)
        return memory


def memory_lock(memory: SkillMemory) -> threading.Lock:
    """The lock that serialises adapter calls on ``memory`` (its engine is not thread-safe)."""
    with _guard:
        lock = _locks.get(memory)
        if lock is None:
            lock = _locks[memory] = threading.Lock()
        return lock


def close_shared_memories() -> None:
    """Close every memory :func:`open_memory` opened; later calls open them again."""
    with _guard:
        memories = list(_memories.values())
        _memories.clear()
    for memory in memories:
        memory.close()
