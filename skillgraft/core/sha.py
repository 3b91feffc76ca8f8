"""Hex digest patterns shared by the store modules."""

import re

__all__ = ["BLOCK_ID", "HEX", "ID_LIKE", "SHA256_HEX"]

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
HEX = re.compile(r"[0-9a-f]+")
BLOCK_ID = re.compile(r"[0-9a-f]{16}")  # the first 16 hex digits of a payload's SHA-256
# What a lookup could read as an id or an id's prefix (4 hex digits or more, in either case):
# no block may be named so, or its name would shadow another block's id in lookups and deletes.
ID_LIKE = re.compile(r"[0-9a-fA-F]{4,}")
