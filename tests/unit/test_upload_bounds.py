"""What unpacking an uploaded zip may cost: bounded by the limits, whatever its headers say."""

from __future__ import annotations

import tracemalloc
import zipfile

import pytest

from skillgraft.errors import SkillUploadError
from skillgraft.gateway.uploads import read_upload, unzip

from .skill_uploads import lying


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_an_entry_packed_so_that_its_bound_cannot_hold_is_refused_before_it_is_unpacked(method):
    name, data = lying(method, size=8 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(SkillUploadError) as refused:
            unzip(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.value.code == "invalid_zip" and refused.value.path.endswith("big.bin")
    assert peak < 1 << 20  # 8 MiB of zeros declared as 100 bytes: never unpacked


def test_a_deflated_entry_that_lies_about_its_size_is_never_unpacked_past_it():
    part = lying(zipfile.ZIP_DEFLATED, size=8 << 20)
    tracemalloc.start()
    try:
        upload = read_upload([part])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(upload.files["assets/big.bin"]) == 100
    assert peak < 1 << 20
