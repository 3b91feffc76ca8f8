"""Facts read from a GGUF file's metadata without loading the model: its sliding window and
the context length it was trained for."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import EngineError

__all__ = ["GgufFacts", "gguf_facts"]

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING = 8
_ARRAY = 9
_LONGEST_STRING = 1 << 24


@dataclass(frozen=True)
class GgufFacts:
    """``sliding_window``: the model's sliding-window width (0: none); ``context_length``: the
    context it was trained for (0: not recorded)."""

    sliding_window: int = 0
    context_length: int = 0


def gguf_facts(path: Path) -> GgufFacts:
    """The facts ``<arch>.attention.sliding_window`` and ``<arch>.context_length`` of ``path``,
    read once for a file of a given size and modification time."""
    stat = os.stat(path)
    return _read_facts(str(path), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=32)
def _read_facts(path: str, size: int, mtime_ns: int) -> GgufFacts:
    """The facts of ``path`` (``size`` and ``mtime_ns`` key the cache: a rewritten file is read again)."""

    def read(fmt: str):
        need = struct.calcsize(fmt)
        data = handle.read(need)
        if len(data) != need:
            raise EngineError(f"{path} ends inside its GGUF metadata")
        return struct.unpack(fmt, data)[0]

    def read_string() -> str:
        length = read("<Q")
        if length > _LONGEST_STRING:
            raise EngineError(f"{path} has a GGUF string of {length} bytes")
        return handle.read(length).decode("utf-8", "replace")

    def skip(kind: int) -> None:
        if kind in _SCALARS:
            handle.seek(struct.calcsize(_SCALARS[kind]), os.SEEK_CUR)
        elif kind == _STRING:
            handle.seek(read("<Q"), os.SEEK_CUR)
        elif kind == _ARRAY:
            inner, count = read("<I"), read("<Q")
            if inner in _SCALARS:
                handle.seek(count * struct.calcsize(_SCALARS[inner]), os.SEEK_CUR)
            else:
                for _ in range(count):
                    skip(inner)
        else:
            raise EngineError(f"{path} has an unknown GGUF value type {kind}")

    architecture = ""
    found: dict[str, int] = {}
    with open(path, "rb") as handle:
        if handle.read(4) != b"GGUF":
            raise EngineError(f"{path} is not a GGUF file")
        read("<I"), read("<Q")
        for _ in range(read("<Q")):
            key, kind = read_string(), read("<I")
            if key == "general.architecture" and kind == _STRING:
                architecture = read_string()
            elif architecture and kind in _SCALARS and key in (
                f"{architecture}.attention.sliding_window", f"{architecture}.context_length"
            ):
                found[key.rsplit(".", 1)[-1]] = max(0, int(read(_SCALARS[kind])))
            else:
                skip(kind)
            if len(found) == 2:
                break
    return GgufFacts(found.get("sliding_window", 0), found.get("context_length", 0))
