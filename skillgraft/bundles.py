"""Portable bundles: ``skillgraft export`` and ``skillgraft import``.

A bundle is an uncompressed tar file::

    manifest.json        format, fingerprints, block rows with their routing key texts
    blocks/<sha256>.kv   the block payloads, byte-identical to the store's files

Import trusts nothing in a bundle, and is all or nothing:

- reads are bounded: at most ``MAX_MEMBERS`` entries, every entry a plain (not sparse)
  regular file named ``manifest.json`` or ``blocks/<64 hex>.kv``, the manifest at most
  ``MAX_MANIFEST_BYTES`` (checked on its header, before reading it), each payload exactly the
  size its row records; no tar header can make the reader take more than ``MAX_READ_BYTES``
  at once;
- every row is checked field by field (a malformed one is a :class:`BundleError`), its id
  must be the first 16 hex digits of its payload's SHA-256 and each payload's size and
  SHA-256 must match the row;
- a payload is accepted only when it is shown to belong to its source text: the source is
  rendered and tokenized as :class:`SkillMemory` does (the row's tokens must be exactly
  that), prefilled under the current runtime and the captured payload must hash to the
  bundle's (one prefill per block; ``trust_payloads`` skips only this step);
- a solution becomes verified only by being verified here: its stored method is re-run
  with the ``python`` verifier and it is deposited through :meth:`SkillMemory.add_solution`;
  a solution that cannot be re-run here (``exact``/``numeric`` ground truth is not in a
  bundle; no method) is skipped, and a local answer to the same question always wins;
- routing vectors are never read from a bundle: key texts of known kinds, bounded in
  length, are embedded again by the memory's embedder; creation times are set to now;
- blocks captured under another runtime cannot be recomputed here: they are skipped unless
  ``allow_foreign``, and then re-captured under this runtime from their source text, or
  kept as they are (size and SHA-256 checked) with ``trust_payloads``.

Everything is validated and recomputed before the first deposit; if a deposit fails, what
this import deposited is removed again and nothing stored before is touched.

Export writes a temp file created exclusively (``O_EXCL | O_NOFOLLOW``) under a random name
beside ``PATH`` and renames it over ``PATH``: no planted link is ever written through (a
link at ``PATH`` itself is replaced, its target untouched).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, Iterator, Optional, Union

from .blocks import Block, block_id_for, tokens_sha256
from .catalog import utc_now
from .errors import BundleError, ContextOverflowError, SkillgraftError, StoreError
from .fingerprint import RuntimeFingerprint
from .router import MAX_QUERY_CHARS

if TYPE_CHECKING:
    from .flywheel import Verdict
    from .memory import SkillMemory
    from .store import BlockStore

BUNDLE_FORMAT = "skillgraft-bundle"
BUNDLE_VERSION = 1
MAX_MANIFEST_BYTES = 16 << 20
MAX_BLOCKS = 10_000
MAX_MEMBERS = MAX_BLOCKS + 1
MAX_FINGERPRINTS = 64
MAX_KEYS_PER_BLOCK = 256
MAX_KEY_CHARS = MAX_QUERY_CHARS
MAX_NAME_CHARS = 200
MAX_TEXT_CHARS = 1_000_000
MAX_PAYLOAD_BYTES = 1 << 34
READ_CHUNK = 1 << 20
MAX_READ_BYTES = 4 * READ_CHUNK
KEY_KINDS = ("name", "description", "example")

_PAYLOAD_NAME = re.compile(r"^blocks/[0-9a-f]{64}\.kv$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
Progress = Optional[Callable[[int, int], None]]


# -- reports -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportReport:
    """What :func:`export_bundle` wrote."""

    path: str
    blocks: int
    bytes: int

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ImportedBlock:
    """A bundle block now in the store. ``block_id`` differs from ``bundle_id`` when re-captured."""

    block_id: str
    bundle_id: str
    name: str
    kind: str
    how: str


@dataclass(frozen=True)
class SkippedBlock:
    """A bundle block left out, and why."""

    block_id: str
    name: str
    kind: str
    reason: str


@dataclass
class ImportReport:
    """What :func:`import_bundle` did with each block of a bundle."""

    path: str
    imported: list[ImportedBlock] = field(default_factory=list)
    skipped: list[SkippedBlock] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def blocks(self) -> int:
        return len(self.imported)

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "blocks": self.blocks,
            "imported": [asdict(b) for b in self.imported],
            "skipped": [asdict(b) for b in self.skipped],
            "seconds": round(self.seconds, 3),
        }


# -- export --------------------------------------------------------------------------------


def export_bundle(store: "BlockStore", path: Union[str, Path], progress: Progress = None) -> ExportReport:
    """Write every healthy block of ``store`` to a bundle at ``path`` (links are never followed)."""
    path = Path(path)
    blocks = store.blocks(include_quarantined=False)
    manifest = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "fingerprints": {},
        "blocks": [],
    }
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
    try:
        fd = os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise StoreError(f"cannot write the bundle {path}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for done, block in enumerate(blocks, 1):
                    payload = store.load_state(block).state.payload
                    fingerprint = store.fingerprint(block.fingerprint_id)
                    manifest["fingerprints"][fingerprint.id] = json.loads(fingerprint.canonical_json())
                    row = block.model_dump(exclude={"status", "created_at"})
                    row["file"] = f"blocks/{block.file_name}"
                    row["routing_keys"] = [{"kind": k["kind"], "text": k["text"]} for k in store.routing_keys(block.id)]
                    manifest["blocks"].append(row)
                    _add_bytes(tar, row["file"], payload)
                    if progress:
                        progress(done, len(blocks))
                _add_bytes(tar, "manifest.json", json.dumps(manifest, indent=1).encode())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException as exc:
        temp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise StoreError(f"cannot write the bundle {path}: {exc.strerror or exc}") from exc
        raise
    return ExportReport(str(path), len(blocks), path.stat().st_size)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


# -- reading a bundle ----------------------------------------------------------------------


class _BoundedFile:
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


_TAR_ERRORS = (tarfile.TarError, EOFError, ValueError, OverflowError, UnicodeError, OSError)


def _scan(tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
    """The bundle's entries by name, each checked before anything of it is read."""
    members: dict[str, tarfile.TarInfo] = {}
    while True:
        try:
            member = tar.next()
        except _TAR_ERRORS as exc:
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
        if name != "manifest.json" and not _PAYLOAD_NAME.match(name):
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
    except _TAR_ERRORS as exc:
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
class _Row:
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
        raise BundleError(f"{where}: {key!r} contains a NUL character")
    return value


def _int(row: dict, key: str, where: str, low: int, high: int) -> int:
    value = row.get(key)
    if type(value) is not int or not low <= value <= high:
        raise BundleError(f"{where}: {key!r} must be a whole number from {low} to {high}, not {str(value)[:40]!r}")
    return value


def _parse_row(raw, index: int, fingerprints: dict, members: dict) -> _Row:
    where = f"bundle block #{index}"
    if not isinstance(raw, dict):
        raise BundleError(f"{where} is not an object")
    sha256 = _text(raw, "sha256", where, limit=64)
    block_id = _text(raw, "id", where, limit=16)
    if not _HEX64.match(sha256) or not _HEX16.match(block_id):
        raise BundleError(f"{where}: id and sha256 must be 16 and 64 lower-case hex digits")
    where = f"bundle block {block_id}"
    if block_id != block_id_for(sha256):
        raise BundleError(f"{where}: its id is not the start of its payload's SHA-256 {sha256}")
    name = _text(raw, "name", where, limit=MAX_NAME_CHARS)
    if not name.strip() or name != name.strip() or _CONTROL.search(name):
        raise BundleError(f"{where}: its name {name!r} is empty, padded or holds control characters")
    kind = raw.get("kind")
    if kind not in ("manual", "solution"):
        raise BundleError(f"{where}: kind must be 'manual' or 'solution', not {str(kind)[:20]!r}")
    source = _text(raw, "source", where)
    if not source.strip():
        raise BundleError(f"{where}: its source text is empty")
    tokens = raw.get("tokens")
    if not isinstance(tokens, list) or not tokens or len(tokens) > MAX_TEXT_CHARS:
        raise BundleError(f"{where}: tokens must be a non-empty list")
    if any(type(t) is not int or not 0 <= t < 2**31 for t in tokens):
        raise BundleError(f"{where}: tokens must be token ids (whole numbers from 0 to 2^31-1)")
    n_tokens = _int(raw, "n_tokens", where, 1, MAX_TEXT_CHARS)
    n_bytes = _int(raw, "n_bytes", where, 1, MAX_PAYLOAD_BYTES)
    if n_tokens != len(tokens):
        raise BundleError(f"{where}: n_tokens {n_tokens} but {len(tokens)} tokens")
    fingerprint_id = _text(raw, "fingerprint_id", where, limit=16)
    if fingerprint_id not in fingerprints:
        raise BundleError(f"{where}: names fingerprint {fingerprint_id!r}, which the manifest lacks")
    file_name = raw.get("file")
    member = members.get(file_name) if isinstance(file_name, str) else None
    if file_name != f"blocks/{sha256}.kv" or member is None:
        raise BundleError(f"{where}: its payload entry blocks/{sha256}.kv is missing")
    if member.size != n_bytes:
        raise BundleError(f"{where}: its payload entry is {member.size} bytes, the row says {n_bytes}")
    solution = {}
    if kind == "solution":
        solution = {
            "question": _text(raw, "question", where, limit=MAX_KEY_CHARS),
            "answer": _text(raw, "answer", where),
            "method": _text(raw, "method", where, optional=True),
            "verifier": _text(raw, "verifier", where, limit=200, optional=True),
        }
    keys = raw.get("routing_keys", [])
    if not isinstance(keys, list) or len(keys) > MAX_KEYS_PER_BLOCK:
        raise BundleError(f"{where}: routing_keys must be a list of at most {MAX_KEYS_PER_BLOCK}")
    checked_keys = []
    for key in keys:
        if not isinstance(key, dict) or key.get("kind") not in KEY_KINDS:
            raise BundleError(f"{where}: a routing key is not an object of kind {', '.join(KEY_KINDS)}")
        checked_keys.append((key["kind"], _text(key, "text", f"{where} routing key", limit=MAX_KEY_CHARS)))
    block = Block(
        id=block_id,
        sha256=sha256,
        name=name,
        kind=kind,
        description=_text(raw, "description", where, limit=MAX_KEY_CHARS, optional=True) or "",
        source=source,
        tokens=tuple(tokens),
        tokens_sha256=tokens_sha256(tokens),
        n_tokens=n_tokens,
        n_bytes=n_bytes,
        fingerprint_id=fingerprint_id,
        created_at=utc_now(),
        **solution,
    )
    return _Row(block, tuple(checked_keys), member, fingerprints[fingerprint_id])


def _payload(tar: tarfile.TarFile, row: _Row, *, keep: bool = True) -> bytes:
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


# -- planning an import --------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """What import will do with one row, decided before anything is deposited."""

    row: _Row
    action: str  # "deposit" the bundle's payload, "recapture" a manual, "solution" via add_solution
    how: str
    verdict: Optional["Verdict"] = None


def _source_tokens(memory: "SkillMemory", text: str) -> list[int]:
    """The tokens a block of ``text`` captures, rendered as :class:`SkillMemory` renders it."""
    prefix, _ = memory.engine.chat_split(text)
    return memory.engine.tokenize(prefix)


class _Planner:
    """Checks every row against the store and this runtime; collects plans and skips."""

    def __init__(self, memory: "SkillMemory", tar: tarfile.TarFile, allow_foreign: bool, trust_payloads: bool) -> None:
        self.memory, self.tar = memory, tar
        self.allow_foreign, self.trust_payloads = allow_foreign, trust_payloads
        self.runtime = memory.engine.fingerprint
        self.plans: list[_Plan] = []
        self.skipped: list[SkippedBlock] = []
        self.local = {b.id: b for b in memory.store.blocks()}
        self.local_names = {b.name: b for b in self.local.values()}
        self.names: set[str] = set()
        self.texts: set[str] = set()
        self.questions: dict[str, str] = {}

    def skip(self, row: _Row, reason: str) -> None:
        b = row.block
        self.skipped.append(SkippedBlock(b.id, b.name, b.kind, reason))

    def plan(self, row: _Row) -> None:
        block = row.block
        _payload(self.tar, row, keep=False)  # every payload is checked, whatever happens to its row
        foreign = row.fingerprint.id != self.runtime.id
        if foreign and not self.allow_foreign:
            return self.skip(row, f"captured under another runtime ({row.fingerprint.id}); pass allow_foreign")
        if block.id in self.local:
            return self.skip(row, "already in the store")
        key = self._question_key(row) if block.kind == "solution" else None
        reason = self._answer_problem(row, key) if key is not None else None
        if reason:
            return self.skip(row, reason)
        taken = self.local_names.get(block.name)
        if taken is not None:
            return self.skip(row, f"the name {block.name!r} is taken by local block {taken.id} of other content")
        if block.name in self.names:
            return self.skip(row, f"an earlier block of the bundle is also named {block.name!r}")
        verdict = None
        if key is not None:
            verdict = self._reverify(row, key)
            if isinstance(verdict, str):
                return self.skip(row, verdict)
        if foreign and (block.kind == "solution" or not self.trust_payloads):
            plan = self._recapture(row, verdict)
        elif foreign:
            plan = _Plan(row, "deposit", "kept as captured under another runtime (trust_payloads: size, SHA-256 checked)")
        else:
            plan = self._same_runtime(row, verdict)
        if plan is None:
            return None
        self.names.add(block.name)
        self.plans.append(plan)
        return None

    def _question_key(self, row: _Row) -> str:
        """The normalized question of a solution row whose text is its question, answer and method."""
        from .flywheel import solution_text
        from .memory import normalize_question
        from .router import clean_query

        block = row.block
        question, answer = block.question, block.answer
        if not question or question != question.strip() or not answer or answer != answer.strip():
            raise BundleError(f"bundle block {block.id}: its question and answer must be non-empty and unpadded")
        if block.source != solution_text(question, answer, block.method):
            raise BundleError(
                f"bundle block {block.id}: its source text is not the text of its question, answer and method"
            )
        try:
            return normalize_question(clean_query(question))
        except SkillgraftError as exc:
            raise BundleError(f"bundle block {block.id}: its question is unusable: {exc}") from None

    def _answer_problem(self, row: _Row, key: str) -> Optional[str]:
        """Why this solution must not be imported even if verified: a local or earlier answer."""
        local = self.memory.store.solutions_for(key)
        if local:
            other = local[0]
            if other.answer == row.block.answer:
                return f"the question is already answered by local block {other.id}"
            return f"conflicts with local block {other.id}, which answers {other.answer!r}: the local answer is kept"
        if key in self.questions:
            return f"an earlier block of the bundle ({self.questions[key]}) answers the same question"
        return None

    def _reverify(self, row: _Row, key: str) -> Union["Verdict", str]:
        """The verdict of re-running a solution's method here, or why it cannot be imported."""
        from .flywheel import make_verifier

        block = row.block
        if block.verifier != "python" or not (block.method or "").strip():
            return (
                f"verified by {block.verifier or 'nothing'} with no method this store can re-run "
                "(ground truth and callables are not in a bundle): not re-verified, not imported"
            )
        verdict = make_verifier("python").check(block.question, block.answer, block.method)
        if not verdict.ok:
            return f"re-running its method here did not verify it: {verdict.detail}"
        self.questions[key] = block.id
        return verdict

    def _fits(self, tokens: list[int]) -> Optional[str]:
        """Why a block of ``tokens`` cannot be used here, by the memory's own rule for captures."""
        from .memory import QUERY_ROOM_TOKENS

        room = self.memory.engine.n_ctx - QUERY_ROOM_TOKENS
        if len(tokens) > room:
            n_ctx = self.memory.engine.n_ctx
            return f"its {len(tokens)} tokens leave too little of this runtime's context ({n_ctx}) for questions"
        return None

    def _recapture(self, row: _Row, verdict: Optional["Verdict"]) -> Optional[_Plan]:
        """A foreign row (or any solution) captured here from its source at deposit time."""
        block = row.block
        tokens = _source_tokens(self.memory, block.source)
        problem = self._fits(tokens)
        same = self.memory.store.find_same(tokens, self.runtime.id)
        if problem or same is not None:
            self.skip(row, problem or f"its text is already stored as local block {same.id} ({same.name})")
            return None
        if not self._new_text(row, tokens):
            return None
        if block.kind == "solution":
            return _Plan(row, "solution", "re-verified by its method and re-captured under this runtime", verdict)
        return _Plan(row, "recapture", "re-captured under this runtime from its source text")

    def _new_text(self, row: _Row, tokens: list[int]) -> bool:
        digest = tokens_sha256(tokens)
        if digest in self.texts:
            self.skip(row, "an earlier block of the bundle has the same text")
            return False
        self.texts.add(digest)
        return True

    def _same_runtime(self, row: _Row, verdict: Optional["Verdict"]) -> Optional[_Plan]:
        block = row.block
        tokens = _source_tokens(self.memory, block.source)
        if tuple(tokens) != block.tokens:
            raise BundleError(
                f"bundle block {block.id} ({block.name}): its tokens are not the tokenization of its source text"
            )
        problem = self._fits(tokens)
        same = self.memory.store.find_same(tokens, self.runtime.id)
        if problem or same is not None:
            self.skip(row, problem or f"its text is already stored as local block {same.id} ({same.name})")
            return None
        if not self._new_text(row, tokens):
            return None
        how = "payload trusted (trust_payloads: size, SHA-256 and tokens checked)"
        if not self.trust_payloads:
            try:
                state = self.memory.engine.capture(tokens)
            except ContextOverflowError as exc:
                self.skip(row, str(exc))
                return None
            if state.sha256 != block.sha256:
                raise BundleError(
                    f"bundle block {block.id} ({block.name}): its payload does not belong to its source text "
                    f"(captured here it hashes to {state.sha256[:16]})"
                )
            how = "payload recomputed from its source text"
        if block.kind == "solution":
            return _Plan(row, "solution", "re-verified by its method; " + how, verdict)
        return _Plan(row, "deposit", how)


# -- import --------------------------------------------------------------------------------


def import_bundle(
    memory: "SkillMemory",
    path: Union[str, Path],
    *,
    allow_foreign: bool = False,
    trust_payloads: bool = False,
    progress: Progress = None,
) -> ImportReport:
    """Check, verify and import a bundle into ``memory``, all or nothing (see the module docstring).

    ``progress(done, total)`` counts checked rows, then deposits; checking a block costs
    one prefill of its source (none with ``trust_payloads``).
    """
    started = time.perf_counter()
    path = Path(path)
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise BundleError(f"cannot read the bundle {path}: {exc.strerror or exc}") from None
    with handle:
        try:
            tar = tarfile.open(fileobj=_BoundedFile(handle), mode="r:")
        except _TAR_ERRORS as exc:
            raise BundleError(f"{path} is not a readable bundle: {exc}") from None
        with tar:
            members = _scan(tar)
            manifest = _read_manifest(tar, members["manifest.json"])
            fingerprints = _parse_fingerprints(manifest["fingerprints"])
            rows = [_parse_row(raw, i, fingerprints, members) for i, raw in enumerate(manifest["blocks"])]
            seen: set[str] = set()
            for row in rows:
                if row.block.id in seen:
                    raise BundleError(f"bundle block {row.block.id} appears twice in the manifest")
                seen.add(row.block.id)
            planner = _Planner(memory, tar, allow_foreign, trust_payloads)
            total = len(rows)
            for done, row in enumerate(rows, 1):
                planner.plan(row)
                if progress:
                    progress(done, total)
            total += len(planner.plans)
            imported = _deposit(memory, tar, planner.plans, lambda i: progress and progress(len(rows) + i, total))
    for item in imported:
        detail = {"bundle": path.name, "bundle_id": item.bundle_id, "how": item.how}
        memory.store.log("import", block_id=item.block_id, decision=item.kind, detail=detail)
    return ImportReport(str(path), imported, planner.skipped, time.perf_counter() - started)


def _deposit(
    memory: "SkillMemory", tar: tarfile.TarFile, plans: list[_Plan], step: Callable[[int], None]
) -> list[ImportedBlock]:
    """Deposit every plan; on any failure remove what this call deposited, then re-raise."""
    from .flywheel import _Accepted

    before = {b.id for b in memory.store.blocks()}
    deposited: list[str] = []
    imported = []
    try:
        for done, plan in enumerate(plans, 1):
            row, block = plan.row, plan.row.block
            if plan.action == "solution":
                stored = memory.add_solution(
                    block.question,
                    block.answer,
                    method=block.method,
                    verifier=_Accepted(plan.verdict),
                    name=block.name,
                    examples=[t for t in row.texts("example") if t != block.question],
                )
            elif plan.action == "recapture":
                stored = memory.add_manual(
                    block.name, block.source, examples=row.texts("example"), description=block.description
                )
            else:
                stored, _ = memory.store.deposit(block, _payload(tar, row), row.fingerprint)
            if stored.id not in before and stored.id not in deposited:
                deposited.append(stored.id)
            recomputed_here = plan.action != "recapture" and row.fingerprint.id == memory.engine.fingerprint.id
            if recomputed_here and stored.sha256 != block.sha256:
                raise BundleError(f"bundle block {block.id} ({block.name}): captured here it became block {stored.id}")
            for kind in KEY_KINDS:
                memory.router.add_keys(stored, row.texts(kind), kind=kind)
            if plan.action == "deposit":
                memory.router.add_keys(stored, [block.name.replace("-", " ").replace("_", " ")], kind="name")
            imported.append(ImportedBlock(stored.id, block.id, block.name, block.kind, plan.how))
            step(done)
    except BaseException:
        for block_id in reversed(deposited):
            try:
                memory.store.remove(block_id)
            except SkillgraftError:
                pass
        raise
    return imported
