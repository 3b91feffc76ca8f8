"""Uploads of skill folders for the OpenAI Skills API's tests: good ones, and hostile ones with
the status and code each must get."""

from __future__ import annotations

import io
import stat
import struct
import warnings
import zipfile
import zlib


def skill_md(name: str, description: str, body: str = "# Steps\n\nDo the first step, then the second.\n") -> bytes:
    return f"---\nname: {name}\ndescription: {description}\n---\n\n{body}".encode()


PDF = {
    "pdf/SKILL.md": skill_md("pdf", "Read, fill and merge PDF files.", "# PDF\n\nUse pypdf to read pages.\n"),
    "pdf/references/forms.md": b"# Form fields\n\nText fields take a string; checkboxes take /Yes or /Off.\n",
    "pdf/scripts/merge.py": b"print('never run')\n",
}


def files(mapping: dict) -> list:
    return [(path, data) for path, data in mapping.items()]


def zipped(mapping: dict, *, links: tuple = ()) -> tuple[str, bytes]:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in mapping.items():
            archive.writestr(path, data)
        for path, target in links:
            info = zipfile.ZipInfo(path)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return "skill.zip", buffer.getvalue()


def lying(method: int, *, declared: int = 100, size: int = 8 << 20) -> tuple[str, bytes]:
    """A zip whose ``pdf/assets/big.bin`` (``size`` zeros packed with ``method``) declares
    ``declared`` bytes in its central directory, with the CRC of that many zeros: only a reader
    that bounds what it unpacks as it reads stays small."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("pdf/SKILL.md", SKILL)
        archive.writestr("pdf/assets/big.bin", b"\0" * size, compress_type=method)
    data = bytearray(buffer.getvalue())
    entry = data.rfind(b"PK\x01\x02")
    struct.pack_into("<I", data, entry + 16, zlib.crc32(b"\0" * declared))
    struct.pack_into("<I", data, entry + 24, declared)
    return "skill.zip", bytes(data)


def twice(path: str) -> tuple[str, bytes]:
    """A zip holding ``path`` twice (zipfile warns, and writes it)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        archive.writestr("pdf/SKILL.md", SKILL)
        archive.writestr(path, b"first")
        archive.writestr(path, b"second")
    return "skill.zip", buffer.getvalue()


SKILL = PDF["pdf/SKILL.md"]
ZEROS = b"\0" * (2 << 20)
HOSTILE = {
    "a .. path": (files({"pdf/SKILL.md": SKILL, "pdf/../outside.md": b"x"}), 400, "invalid_path"),
    "an absolute path": (files({"pdf/SKILL.md": SKILL, "/etc/cron.d/x": b"x"}), 400, "invalid_path"),
    "a .. path in a zip": ([zipped({"pdf/SKILL.md": SKILL, "pdf/../../x.md": b"x"})], 400, "invalid_path"),
    "a zip bomb": ([zipped({"pdf/SKILL.md": SKILL, **{f"pdf/assets/{n}.bin": ZEROS for n in range(9)}})], 413,
                   "zip_bomb"),
    "too many files": (files({"pdf/SKILL.md": SKILL, **{f"pdf/references/{n}.md": b"x" for n in range(500)}}), 413,
                       "too_many_files"),
    "a too-large file": (files({"pdf/SKILL.md": SKILL, "pdf/assets/big.bin": b"x" * ((2 << 20) + 1)}), 413,
                         "file_too_large"),
    "a link in a zip": ([zipped({"pdf/SKILL.md": SKILL}, links=(("pdf/references/k.md", "/etc/passwd"),))], 400,
                        "link"),
    "a name of control characters": (files({"pdf/SKILL.md": b'---\nname: "\\x01\\x02"\ndescription: d\n---\nx\n'}),
                                     400, "invalid_skill"),
    "two paths equal once normalised": (files({"pdf/SKILL.md": SKILL, "pdf/A.md": b"x", "pdf/a.md": b"y"}), 400,
                                        "duplicate_path"),
    "a file that is a folder too": (files({"pdf/SKILL.md": SKILL, "pdf/r": b"x", "pdf/r/s.md": b"y"}), 400,
                                    "duplicate_path"),
    "two skills in one upload": (files({"a/SKILL.md": SKILL, "b/SKILL.md": SKILL}), 400, "no_skill_md"),
    "no SKILL.md": (files({"pdf/README.md": b"x"}), 400, "no_skill_md"),
    "a zip that is not one": ([("skill.zip", b"PK\x03\x04 not really")], 400, "invalid_zip"),
    "a bzip2 entry that lies about its size": ([lying(zipfile.ZIP_BZIP2)], 400, "invalid_zip"),
    "an lzma entry that lies about its size": ([lying(zipfile.ZIP_LZMA, size=1 << 20)], 400, "invalid_zip"),
    "an entry twice in a zip": ([twice("pdf/references/a.md")], 400, "duplicate_path"),
    "a drive path in a zip": ([zipped({"pdf/SKILL.md": SKILL, "C:/x.md": b"x"})], 400, "invalid_path"),
    "a name over 255 bytes": (files({"pdf/SKILL.md": SKILL, "pdf/" + "\u00e9" * 128 + ".md": b"x"}), 400, "invalid_path"),
    "a name over 255 bytes in a zip": ([zipped({"pdf/SKILL.md": SKILL, "pdf/" + "x" * 256: b"x"})], 400, "invalid_path"),
}
