"""Reading a bundle without trusting it: bounded tar reads, the manifest, each row checked.

Every entry is checked on its tar header before a byte of it is read (a plain regular file
named ``manifest.json`` or ``blocks/<64 hex>.kv``, the manifest at most
``MAX_MANIFEST_BYTES``, at most ``MAX_MEMBERS`` entries); no header can make the reader take
more than ``MAX_READ_BYTES`` at once. Every manifest row is checked field by field into a
:class:`Row` (a malformed one is a :class:`BundleError`); :func:`payload` checks a payload's
size and SHA-256 against its row; :func:`read_bundle` also checks the routing corrections
(texts of feedback keys and negatives). Imported skills' files (``skills/<64 hex>``) are checked
by :mod:`skillgraft.bundles.skills`. The import itself is :mod:`skillgraft.bundles.transfer`.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Optional

from ..core.blocks import Block, block_id_for, tokens_sha256
from ..store.catalog import utc_now
from ..core.expiry import expiry_stamp, expiry_time
from ..errors import BundleError, ExpiryError
from ..core.fingerprint import RuntimeFingerprint
from ..routing.feedback import MAX_CORRECTIONS
from ..routing.router import MAX_EXAMPLES, MAX_KEYS_PER_BLOCK, MAX_QUERY_CHARS, name_key
from ..core.sha import ID_LIKE

BUNDLE_FORMAT = "skillgraft-bundle"
BUNDLE_VERSION = 1
MAX_MANIFEST_BYTES = 16 << 20
MAX_BLOCKS = 10_000
MAX_SKILL_MEMBERS = 10_000          # distinct files of imported skills (skills/<sha256>)
MAX_MEMBERS = MAX_BLOCKS + 1 + MAX_SKILL_MEMBERS
MAX_FINGERPRINTS = 64
MAX_KEY_CHARS = MAX_QUERY_CHARS
MAX_NAME_CHARS = 200
MAX_TEXT_CHARS = 1_000_000
MAX_PAYLOAD_BYTES = 1 << 34
READ_CHUNK = 1 << 20
MAX_READ_BYTES = 4 * READ_CHUNK
KEY_KINDS = ("name", "description", "example")

_PAYLOAD_NAME = re.compile(r"^blocks/[0-9a-f]{64}\.kv$")
SKILL_FILE_NAME = re.compile(r"^skills/[0-9a-f]{64}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class BoundedFile:
    """A file no single read of which may exceed ``MAX_READ_BYTES``: tar headers claiming
    huge extended headers cannot make the reader allocate or read them."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > MAX_READ_BYTES:
            raise BundleError(f"a bundle header asks to read {size} bytes at once (at most {MAX_READ_BYTES})")
        return self.handle.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.handle.seek(offset, whence)

    def tell(self) -> int:
        return self.handle.tell()


# RecursionError: tarfile reads each extended header (PAX, GNU long name) by recursing into the next.
TAR_ERRORS = (tarfile.TarError, EOFError, ValueError, OverflowError, UnicodeError, OSError, RecursionError)


def _scan(tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
    """The bundle's entries by name, each checked before anything of it is read."""
    members: dict[str, tarfile.TarInfo] = {}
    while True:
        try:
            member = tar.next()
        except TAR_ERRORS as exc:
            raise BundleError(f"the bundle is not a readable tar file: {exc}") from None
        if member is None:
            break
        name = member.name
        if name.startswith("/") or ".." in Path(name).parts or "\\" in name:
            raise BundleError(f"bundle entry {name!r} has an unsafe path")
        if not member.isfile() or member.issparse():
            raise BundleError(
                f"bundle entry {name!r} is not a regular file (links, folders and sparse files are refused)"
            )
        if name != "manifest.json" and not _PAYLOAD_NAME.match(name) and not SKILL_FILE_NAME.match(name):
            raise BundleError(f"bundle entry {name!r} is not part of the bundle format")
        if name in members:
            raise BundleError(f"bundle entry {name!r} appears twice")
        if name == "manifest.json" and member.size > MAX_MANIFEST_BYTES:
            raise BundleError(f"the bundle's manifest.json is {member.size} bytes (at most {MAX_MANIFEST_BYTES})")
        members[name] = member
        if len(members) > MAX_MEMBERS:
            raise BundleError(f"the bundle has more than {MAX_MEMBERS} entries")
    if "manifest.json" not in members:
        raise BundleError("the bundle has no manifest.json")
    return members


def _chunks(tar: tarfile.TarFile, member: tarfile.TarInfo) -> Iterator[bytes]:
    """Exactly ``member.size`` bytes, in chunks of at most ``READ_CHUNK``."""
    left = member.size
    try:
        source = tar.extractfile(member)
        while left > 0:
            chunk = source.read(min(READ_CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
            yield chunk
    except TAR_ERRORS as exc:
        raise BundleError(f"cannot read bundle entry {member.name!r}: {exc}") from None
    if left:
        raise BundleError(f"bundle entry {member.name!r} is truncated ({member.size - left} of {member.size} bytes)")


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    return b"".join(_chunks(tar, member))


def _read_manifest(tar: tarfile.TarFile, member: tarfile.TarInfo) -> dict:
    try:
        manifest = json.loads(_read_member(tar, member))
    except (ValueError, RecursionError) as exc:
        raise BundleError(f"the bundle's manifest.json is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(manifest, dict):
        raise BundleError("the bundle's manifest.json is not a JSON object")
    if manifest.get("format") != BUNDLE_FORMAT or manifest.get("version") != BUNDLE_VERSION:
        raise BundleError(
            f"unsupported bundle format {str(manifest.get('format'))[:40]!r} version {str(manifest.get('version'))[:20]!r}"
        )
    if not isinstance(manifest.get("blocks"), list) or not isinstance(manifest.get("fingerprints"), dict):
        raise BundleError("the bundle's manifest lacks its blocks list or fingerprints object")
    if len(manifest["blocks"]) > MAX_BLOCKS:
        raise BundleError(f"the bundle lists {len(manifest['blocks'])} blocks (at most {MAX_BLOCKS})")
    if len(manifest["fingerprints"]) > MAX_FINGERPRINTS:
        raise BundleError(f"the bundle lists {len(manifest['fingerprints'])} fingerprints (at most {MAX_FINGERPRINTS})")
    return manifest


def _parse_fingerprints(raw: dict) -> dict[str, RuntimeFingerprint]:
    fingerprints = {}
    for fid, data in raw.items():
        if not isinstance(data, dict):
            raise BundleError(f"bundle fingerprint {str(fid)[:20]!r} is not an object")
        try:
            fingerprint = RuntimeFingerprint.model_validate(data)
        except Exception as exc:  # pydantic.ValidationError and whatever a hostile value raises
            raise BundleError(f"bundle fingerprint {str(fid)[:20]!r} is invalid: {str(exc).splitlines()[0]}") from None
        if fingerprint.id != fid:
            raise BundleError(f"bundle fingerprint {str(fid)[:20]!r} does not match its content (id {fingerprint.id})")
        fingerprints[fid] = fingerprint
    return fingerprints


# -- checking rows -------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One manifest row, checked: the block as it would be stored and its routing key texts."""

    block: Block
    keys: tuple[tuple[str, str], ...]
    member: tarfile.TarInfo
    fingerprint: RuntimeFingerprint

    def texts(self, kind: str) -> list[str]:
        return [text for k, text in self.keys if k == kind]


def _text(row: dict, key: str, where: str, *, limit: int = MAX_TEXT_CHARS, optional: bool = False) -> Optional[str]:
    value = row.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise BundleError(f"{where}: {key!r} must be text, not {type(value).__name__}")
    if len(value) > limit:
        raise BundleError(f"{where}: {key!r} is {len(value)} characters (at most {limit})")
    if "\x00" in value:
        raise BundleError(f"{where}: {key!r} must be text without NUL characters")
    return value


def _int(row: dict, key: str, where: str, low: int, high: int) -> int:
    value = row.get(key)
    if type(value) is not int or not low <= value <= high:
        raise BundleError(f"{where}: {key!r} must be a whole number from {low} to {high}, not {str(value)[:40]!r}")
    return value


def _expiry(value, where: str):
    """A row's expiry as the catalog stores it (None for none), checked as every door checks one."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BundleError(f"{where}: expires_at must be a time as text, not {type(value).__name__}")
    try:
        return expiry_stamp(expiry_time(value))
    except ExpiryError as exc:
        raise BundleError(f"{where}: {exc}") from None


def _row_ids(raw, index: int) -> tuple[str, str]:
    """A row's payload SHA-256 and block id: hex of the right length, the id the digest's start."""
    where = f"bundle block #{index}"
    if not isinstance(raw, dict):
        raise BundleError(f"{where} is not an object")
    sha256 = _text(raw, "sha256", where, limit=64)
    block_id = _text(raw, "id", where, limit=16)
    if not _HEX64.match(sha256) or not _HEX16.match(block_id):
        raise BundleError(f"{where}: id and sha256 must be 16 and 64 lower-case hex digits")
    if block_id != block_id_for(sha256):
        raise BundleError(f"bundle block {block_id}: its id is not the start of its payload's SHA-256 {sha256}")
    return sha256, block_id


def _row_name(raw: dict, where: str) -> str:
    """A row's skill name: unpadded, without control characters, never mistakable for an id."""
    name = _text(raw, "name", where, limit=MAX_NAME_CHARS)
    if not name.strip() or name != name.strip() or _CONTROL.search(name):
        raise BundleError(f"{where}: its name {name!r} is empty, padded or holds control characters")
    if ID_LIKE.fullmatch(name):
        raise BundleError(f"{where}: its name {name!r} has the form of a block id or an id's prefix (hex digits only)")
    return name


def _row_tokens(raw: dict, where: str) -> list:
    """A row's token ids: a non-empty list of whole numbers from 0 to 2^31-1."""
    tokens = raw.get("tokens")
    if not isinstance(tokens, list) or not tokens or len(tokens) > MAX_TEXT_CHARS:
        raise BundleError(f"{where}: tokens must be a non-empty list")
    if any(type(t) is not int or not 0 <= t < 2**31 for t in tokens):
        raise BundleError(f"{where}: tokens must be token ids (whole numbers from 0 to 2^31-1)")
    return tokens


def _row_member(raw: dict, where: str, sha256: str, n_bytes: int, members: dict) -> tarfile.TarInfo:
    """The tar entry of a row's payload: named for its digest, of the size the row says."""
    file_name = raw.get("file")
    member = members.get(file_name) if isinstance(file_name, str) else None
    if file_name != f"blocks/{sha256}.kv" or member is None:
        raise BundleError(f"{where}: its payload entry blocks/{sha256}.kv is missing")
    if member.size != n_bytes:
        raise BundleError(f"{where}: its payload entry is {member.size} bytes, the row says {n_bytes}")
    return member


def _row_solution(raw: dict, kind: str, where: str) -> dict:
    """A solution row's question, answer, method and verifier (nothing for a manual)."""
    if kind != "solution":
        return {}
    return {
        "question": _text(raw, "question", where, limit=MAX_KEY_CHARS),
        "answer": _text(raw, "answer", where),
        "method": _text(raw, "method", where, optional=True),
        "verifier": _text(raw, "verifier", where, limit=200, optional=True),
    }


def _routing_keys(raw: dict, where: str, question: Optional[str]) -> list[tuple[str, str]]:
    """A row's routing keys as (kind, text), at most :data:`MAX_EXAMPLES` examples besides the question."""
    keys = raw.get("routing_keys", [])
    if not isinstance(keys, list) or len(keys) > MAX_KEYS_PER_BLOCK:
        raise BundleError(f"{where}: routing_keys must be a list of at most {MAX_KEYS_PER_BLOCK}")
    checked_keys = []
    for key in keys:
        if not isinstance(key, dict) or key.get("kind") not in KEY_KINDS:
            raise BundleError(f"{where}: a routing key is not an object of kind {', '.join(KEY_KINDS)}")
        checked_keys.append((key["kind"], _text(key, "text", f"{where} routing key", limit=MAX_KEY_CHARS)))
    examples = [t for k, t in checked_keys if k == "example" and t != question]
    if len(examples) > MAX_EXAMPLES:
        raise BundleError(f"{where}: {len(examples)} example routing keys (at most {MAX_EXAMPLES})")
    return checked_keys


def _check_keys_once_imported(where: str, keys: list, name: str, description: str, question: Optional[str]) -> None:
    """The keys the block has once imported (the row's and the name, description or question keys
    import adds) stay within :data:`MAX_KEYS_PER_BLOCK`."""
    added = [("name", name_key(name)), ("description", description), ("example", question or "")]
    stored = {(k, t.strip()) for k, t in [*keys, *added] if t.strip()}
    if len(stored) > MAX_KEYS_PER_BLOCK:
        raise BundleError(f"{where}: {len(stored)} routing keys once imported (at most {MAX_KEYS_PER_BLOCK})")


def _parse_row(raw, index: int, fingerprints: dict, members: dict) -> Row:
    sha256, block_id = _row_ids(raw, index)
    where = f"bundle block {block_id}"
    name = _row_name(raw, where)
    kind = raw.get("kind")
    if kind not in ("manual", "solution"):
        raise BundleError(f"{where}: kind must be 'manual' or 'solution', not {str(kind)[:20]!r}")
    source = _text(raw, "source", where)
    if not source.strip():
        raise BundleError(f"{where}: its source text is empty")
    tokens = _row_tokens(raw, where)
    n_tokens = _int(raw, "n_tokens", where, 1, MAX_TEXT_CHARS)
    n_bytes = _int(raw, "n_bytes", where, 1, MAX_PAYLOAD_BYTES)
    if n_tokens != len(tokens):
        raise BundleError(f"{where}: n_tokens {n_tokens} but {len(tokens)} tokens")
    fingerprint_id = _text(raw, "fingerprint_id", where, limit=16)
    if fingerprint_id not in fingerprints:
        raise BundleError(f"{where}: names fingerprint {fingerprint_id!r}, which the manifest lacks")
    member = _row_member(raw, where, sha256, n_bytes, members)
    solution = _row_solution(raw, kind, where)
    expires_at = _expiry(raw.get("expires_at"), where)
    keys = _routing_keys(raw, where, solution.get("question"))
    description = _text(raw, "description", where, limit=MAX_KEY_CHARS, optional=True) or ""
    _check_keys_once_imported(where, keys, name, description, solution.get("question"))
    block = Block(id=block_id, sha256=sha256, name=name, kind=kind, description=description, source=source,
                  tokens=tuple(tokens), tokens_sha256=tokens_sha256(tokens), n_tokens=n_tokens, n_bytes=n_bytes,
                  fingerprint_id=fingerprint_id, created_at=utc_now(), expires_at=expires_at, **solution)
    return Row(block, tuple(keys), member, fingerprints[fingerprint_id])


def payload(tar: tarfile.TarFile, row: Row, *, keep: bool = True) -> bytes:
    """The row's payload from the bundle (``b""`` unless ``keep``), its size and SHA-256 checked."""
    digest, size, kept = hashlib.sha256(), 0, []
    for chunk in _chunks(tar, row.member):
        digest.update(chunk)
        size += len(chunk)
        if keep:
            kept.append(chunk)
    block = row.block
    if size != block.n_bytes or digest.hexdigest() != block.sha256:
        raise BundleError(f"bundle block {block.id} ({block.name}): payload does not match its size or SHA-256")
    return b"".join(kept)


def read_rows(tar: tarfile.TarFile) -> list[Row]:
    """Every row of the bundle open as ``tar``, checked (ids unique); no payload is read yet."""
    return read_bundle(tar)[0]


def read_bundle(tar: tarfile.TarFile) -> tuple[list[Row], list[BundleCorrection]]:
    """The checked rows (as :func:`read_rows`) and the checked routing corrections."""
    rows, corrections, _, _ = read_bundle_parts(tar)
    return rows, corrections


def read_bundle_parts(tar: tarfile.TarFile) -> tuple[list[Row], list["BundleCorrection"], dict, dict]:
    """The checked rows and corrections, the manifest (its other parts unchecked) and the
    entries by name (checked on their headers)."""
    members = _scan(tar)
    manifest = _read_manifest(tar, members["manifest.json"])
    fingerprints = _parse_fingerprints(manifest["fingerprints"])
    rows = [_parse_row(raw, i, fingerprints, members) for i, raw in enumerate(manifest["blocks"])]
    seen: set[str] = set()
    for row in rows:
        if row.block.id in seen:
            raise BundleError(f"bundle block {row.block.id} appears twice in the manifest")
        seen.add(row.block.id)
    return rows, _parse_corrections(manifest.get("corrections", []), seen), manifest, members


@dataclass(frozen=True)
class BundleCorrection:
    """A routing correction of a bundle: a ``feedback`` key of a bundle block, or a ``negative``."""

    kind: str
    block_id: Optional[str]
    text: str


def _parse_corrections(raw, block_ids: set[str]) -> list[BundleCorrection]:
    """The manifest's ``corrections`` (texts only: they are embedded again on import)."""
    if not isinstance(raw, list) or len(raw) > MAX_CORRECTIONS:
        raise BundleError(f"the bundle's corrections must be a list of at most {MAX_CORRECTIONS}")
    found = []
    for index, item in enumerate(raw):
        where = f"bundle correction #{index}"
        if not isinstance(item, dict) or item.get("kind") not in ("feedback", "negative"):
            raise BundleError(f"{where}: not an object of kind feedback or negative")
        text = _text(item, "text", where, limit=MAX_KEY_CHARS)
        if not text.strip():
            raise BundleError(f"{where}: its text is empty")
        block_id = item.get("block_id")
        if item["kind"] == "feedback" and block_id not in block_ids:
            raise BundleError(f"{where}: names block {str(block_id)[:20]!r}, which the bundle lacks")
        if item["kind"] == "negative" and block_id is not None:
            raise BundleError(f"{where}: a negative names no block")
        found.append(BundleCorrection(item["kind"], block_id, text.strip()))
    return found
