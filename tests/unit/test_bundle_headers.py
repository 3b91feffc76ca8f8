"""Tar headers of a bundle that chain without end are a BundleError, never a crash."""

from __future__ import annotations

import tarfile

import pytest

from skillgraft.bundles.transfer import import_bundle
from skillgraft.errors import BundleError


def _header(name: str, kind: bytes, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, len(data)
    return info.tobuf(format=tarfile.USTAR_FORMAT) + data + b"\0" * (-len(data) % 512)


@pytest.mark.parametrize(
    "kind, data",
    [(tarfile.XHDTYPE, b"17 comment=chain\n"), (tarfile.GNUTYPE_LONGNAME, b"manifest.json\0")],
    ids=["pax-headers", "gnu-long-names"],
)
def test_a_chain_of_thousands_of_extended_headers_is_refused(fake_memory, tmp_path, kind, data):
    chain = b"".join(_header("././@chain", kind, data) for _ in range(3_000))
    path = tmp_path / "chain.tar"
    path.write_bytes(chain + _header("manifest.json", tarfile.REGTYPE, b"{}") + b"\0" * 1024)
    with pytest.raises(BundleError, match="not a readable"):
        import_bundle(fake_memory, path)
    assert fake_memory.blocks.list() == []
