"""Hex digest patterns shared by the store modules."""

import re

__all__ = ["HEX", "SHA256_HEX"]

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
HEX = re.compile(r"[0-9a-f]+")
