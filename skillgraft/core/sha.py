"""Hex digest patterns shared by the store modules."""

import re

__all__ = ["BLOCK_ID", "HEX", "SHA256_HEX"]

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
HEX = re.compile(r"[0-9a-f]+")
BLOCK_ID = re.compile(r"[0-9a-f]{16}")  # the first 16 hex digits of a payload's SHA-256
