"""A store folder that cannot be written is a clear error, before anything is stored."""

from __future__ import annotations

import pytest

from skillgraft.errors import StoreError
from skillgraft.store.block_store import BlockStore


def test_unwritable_store_folder_is_a_clear_error():
    with pytest.raises(StoreError, match="cannot write to the store folder"):
        BlockStore("/proc/skillgraft-store")
