"""Hex digest and id patterns shared by the store modules and the gateway."""

import re

__all__ = ["BLOCK_ID", "HEX", "ID_LIKE", "SHA256_HEX", "SKILL_ID", "SKILL_ID_DIGITS"]

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
HEX = re.compile(r"[0-9a-f]+")
BLOCK_ID = re.compile(r"[0-9a-f]{16}")  # the first 16 hex digits of a payload's SHA-256
# What a lookup could read as an id or an id's prefix (4 hex digits or more, in either case):
# no block may be named so, or its name would shadow another block's id in lookups and deletes.
ID_LIKE = re.compile(r"[0-9a-fA-F]{4,}")
# An OpenAI Skills API skill id: ``skill_`` and the first 32 hex digits of the SHA-256 of the
# skill's name; the gateway's ``skill_id`` path converter matches exactly this.
SKILL_ID_DIGITS = 32
SKILL_ID = re.compile(f"skill_[0-9a-f]{{{SKILL_ID_DIGITS}}}")
