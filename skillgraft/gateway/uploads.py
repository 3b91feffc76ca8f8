"""An uploaded skill folder (the OpenAI Skills API's ``files[]`` parts, or one zip of them),
checked as hostile input before anything is written.

:func:`read_upload` takes the uploaded ``(filename, bytes)`` parts: one zip is unpacked with
bounded sizes (each entry's declared and actual size, the total, the compression ratio: a zip
bomb is refused, never unpacked whole; only stored and deflated entries, the methods whose
unpacking Python bounds as it reads); either way every path must be a plain relative one
inside the skill (no absolute path, drive, ``..``, ``.``, empty part, backslash or control
character, no link or other special entry, no two paths equal after Unicode normalisation and
case folding), at most :data:`MAX_DEPTH` folders deep. A single top-level folder (as OpenAI
uploads name their files, ``my-skill/SKILL.md``) is the skill's folder; otherwise the files
are at the skill's root. The skill's ``SKILL.md`` must be there: an upload is one skill.
Anything refused is a :class:`~skillgraft.errors.SkillUploadError`. :func:`write_upload` then
writes the checked files into a fresh folder, never through a link.
"""

from __future__ import annotations

import io
import os
import stat
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import SkillUploadError
from ..skills.folder import MAX_DEPTH, SKILL_FILE

MAX_UPLOAD_FILES = 500                # files of one upload (OpenAI's own bound)
MAX_FILE_BYTES = 2 << 20              # one file, unpacked
MAX_UNPACKED_BYTES = 16 << 20         # every file of one upload together, unpacked
MAX_RATIO = 100                       # unpacked / packed bytes of a zip entry or the whole zip ...
RATIO_FLOOR = 1 << 20                 # ... checked once it unpacks to more than this
MAX_PATH_CHARS = 1024
MAX_PART_BYTES = 255                  # one file or folder name, UTF-8 (the filesystems' bound)
ZIP_MAGIC = b"PK\x03\x04"
# bzip2 and LZMA entries are unpacked by zipfile in one call per chunk read, whatever the bound
# asked for: a few KB declared as 100 bytes unpack to gigabytes before the bound applies.
READ_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}


@dataclass(frozen=True)
class UploadLimits:
    """The bounds an upload is held to (the module's constants by default)."""

    files: int = MAX_UPLOAD_FILES
    file_bytes: int = MAX_FILE_BYTES
    unpacked_bytes: int = MAX_UNPACKED_BYTES
    ratio: float = MAX_RATIO


@dataclass(frozen=True)
class SkillUpload:
    """A checked upload: ``folder`` (its top-level folder's name, ``""`` when the files were at
    the root) and ``files`` (path inside the skill → bytes)."""

    folder: str
    files: dict

    @property
    def skill_md(self) -> bytes:
        return self.files[SKILL_FILE]


def read_upload(parts: list[tuple[str, bytes]], limits: UploadLimits = UploadLimits()) -> SkillUpload:
    """The skill in the uploaded ``parts`` (see the module's docstring)."""
    if not parts:
        raise SkillUploadError("files", "no files were uploaded: send the skill's files as files[] or one zip",
                               "no_skill_md")
    if len(parts) == 1 and _is_zip(*parts[0]):
        entries = unzip(parts[0][1], limits)
    else:
        if len(parts) > limits.files:
            raise SkillUploadError("files", f"{len(parts)} files: at most {limits.files} a skill", "too_many_files")
        entries = []
        total = 0
        for name, data in parts:
            _check_size(name, len(data), limits)
            total += len(data)
            if total > limits.unpacked_bytes:
                raise SkillUploadError(name, f"the files are over {limits.unpacked_bytes} bytes together",
                                       "upload_too_large")
            entries.append((name, data))
    return _layout(entries)


def unzip(data: bytes, limits: UploadLimits = UploadLimits()) -> list[tuple[str, bytes]]:
    """The regular files of a zip, each read at most to its bound (directories skipped)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, NotImplementedError) as exc:
        raise SkillUploadError("files", f"is not a readable zip ({exc})", "invalid_zip") from None
    files = [info for info in infos if not info.is_dir()]
    if len(files) > limits.files:
        raise SkillUploadError("files", f"the zip holds {len(files)} files: at most {limits.files} a skill",
                               "too_many_files")
    entries, total = [], 0
    for info in infos:
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind == stat.S_IFLNK:
            raise SkillUploadError(info.filename, "is a link: a skill's files are regular files", "link")
        if info.is_dir():
            continue
        if kind not in (0, stat.S_IFREG):
            raise SkillUploadError(info.filename, "is not a regular file", "link")
        if info.flag_bits & 0x1:
            raise SkillUploadError(info.filename, "is encrypted", "invalid_zip")
        if info.compress_type not in READ_METHODS:
            raise SkillUploadError(info.filename, f"is compressed with method {info.compress_type}: a skill's zip "
                                                  "holds stored or deflated entries", "invalid_zip")
        _check_size(info.filename, info.file_size, limits)
        if info.file_size > RATIO_FLOOR and info.file_size > limits.ratio * max(info.compress_size, 1):
            raise SkillUploadError(info.filename, f"unpacks over {limits.ratio:g} times its packed size: "
                                                  "refused as a zip bomb", "zip_bomb")
        blob = _read_entry(archive, info, min(info.file_size, limits.file_bytes))
        total += len(blob)
        if total > limits.unpacked_bytes:
            raise SkillUploadError(info.filename, f"the zip unpacks to over {limits.unpacked_bytes} bytes",
                                   "zip_bomb")
        entries.append((info.filename, blob))
    if total > RATIO_FLOOR and total > limits.ratio * max(len(data), 1):
        raise SkillUploadError("files", f"the zip unpacks over {limits.ratio:g} times its size: refused as a zip bomb",
                               "zip_bomb")
    return entries


def _read_entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo, bound: int) -> bytes:
    """An entry's bytes, never more than ``bound`` (its declared size): a header that lies is refused."""
    try:
        with archive.open(info) as handle:
            blob = handle.read(bound + 1)
    except (zipfile.BadZipFile, ValueError, EOFError, NotImplementedError, RuntimeError, OSError) as exc:
        raise SkillUploadError(info.filename, f"cannot be unpacked ({exc})", "invalid_zip") from None
    if len(blob) > bound:
        raise SkillUploadError(info.filename, "unpacks to more than its declared size: refused as a zip bomb",
                               "zip_bomb")
    return blob


def _check_size(name: str, size: int, limits: UploadLimits) -> None:
    if size > limits.file_bytes:
        raise SkillUploadError(name, f"is {size} bytes: at most {limits.file_bytes} a file", "file_too_large")


def _is_zip(name: str, data: bytes) -> bool:
    return data.startswith(ZIP_MAGIC) or (name.lower().endswith(".zip") and not name.endswith(SKILL_FILE))


def clean_path(name: str) -> tuple[str, ...]:
    """The parts of an uploaded path, or :class:`SkillUploadError` when it is not a plain
    relative path (``a/b.md``; a trailing ``/`` only on a folder entry, which is skipped)."""
    def refuse(why: str):
        raise SkillUploadError(name, f"is not a path inside the skill: {why}", "invalid_path")

    if not name or len(name) > MAX_PATH_CHARS:
        refuse("empty or too long")
    if not name.isprintable():
        refuse("it holds control characters")
    if "\\" in name:
        refuse("it holds a backslash")
    if name.startswith("/"):
        refuse("it is absolute")
    parts = name.split("/")
    if len(parts[0]) == 2 and parts[0][1] == ":":
        refuse("it names a drive")
    if any(part in ("", ".", "..") for part in parts):
        refuse("it holds an empty, '.' or '..' part")
    if any(len(part.encode("utf-8", "surrogatepass")) > MAX_PART_BYTES for part in parts):
        refuse(f"a file or folder name over {MAX_PART_BYTES} bytes")
    if len(parts) > MAX_DEPTH + 2:  # the top-level folder, the folders, the file
        refuse(f"deeper than {MAX_DEPTH} folders")
    return tuple(parts)


def _layout(entries: list[tuple[str, bytes]]) -> SkillUpload:
    """Checked paths, one top-level folder taken as the skill's, ``SKILL.md`` at its root."""
    checked, seen = [], {}
    for name, data in entries:
        parts = clean_path(name)
        key = unicodedata.normalize("NFC", "/".join(parts)).casefold()
        if key in seen:
            raise SkillUploadError(name, f"is the same path as {seen[key]!r} (after normalisation)", "duplicate_path")
        seen[key] = name
        checked.append((parts, data))
    folders = {"/".join(parts[:n]) for parts, _ in checked for n in range(1, len(parts))}
    clash = next((name for (parts, _), (name, _) in zip(checked, entries) if "/".join(parts) in folders), None)
    if clash is not None:
        raise SkillUploadError(clash, "is both a file and a folder", "duplicate_path")
    roots = {parts[0] for parts, _ in checked}
    folder = ""
    if not any(parts == (SKILL_FILE,) for parts, _ in checked):
        if len(roots) != 1 or any(len(parts) < 2 for parts, _ in checked):
            raise SkillUploadError("files", f"no {SKILL_FILE} at the root of the skill or of one top-level folder "
                                            "(one skill an upload)", "no_skill_md")
        folder = roots.pop()
        checked = [(parts[1:], data) for parts, data in checked]
        if not any(parts == (SKILL_FILE,) for parts, _ in checked):
            raise SkillUploadError(folder, f"holds no {SKILL_FILE} at its root", "no_skill_md")
    return SkillUpload(folder, {"/".join(parts): data for parts, data in checked})


def write_upload(upload: SkillUpload, parent: Path, folder: str) -> Path:
    """Write ``upload``'s files into the new folder ``parent/folder`` (``folder`` one plain
    name); return it. Nothing is written through a link or over an existing file."""
    if clean_path(folder) != (folder,):
        raise SkillUploadError(folder, "is not one folder name", "invalid_path")
    root = Path(parent) / folder
    root.mkdir()
    for path_text, data in sorted(upload.files.items()):
        path = root.joinpath(*PurePosixPath(path_text).parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    return root
