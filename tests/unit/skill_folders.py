"""Small Agent Skills folders written into a test's tmp folder."""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def write_skill(
    root: Path, name: str, description: Optional[str], body: str, *, folder: Optional[str] = None,
    extra: str = "", files: Optional[dict] = None,
) -> Path:
    """``root/folder/SKILL.md`` with that frontmatter and body, plus ``files`` (path -> text or bytes)."""
    path = root / (folder or name)
    path.mkdir(parents=True, exist_ok=True)
    lines = ["---", f"name: {name}"]
    if description is not None:
        lines.append(f"description: {description}")
    if extra:
        lines.append(extra.rstrip("\n"))
    lines += ["---", ""]
    (path / "SKILL.md").write_text("\n".join(lines) + body, encoding="utf-8")
    for rel, content in (files or {}).items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
    return path


PDF_BODY = """# PDF handling

Use pypdf to read pages and pdfplumber to pull tables out of a PDF file.

## Filling forms

Read references/forms.md before filling a form: it lists the field types.

## Merging

Open each file with PdfReader, append its pages to a PdfWriter and write the result.
"""

FORMS = """# Form fields

Text fields take a string value. Checkbox fields take /Yes or /Off. Radio groups take the export value of one button.
"""

GIT_BODY = """# Squashing commits

Run git rebase -i HEAD~N, keep the first commit as pick and mark the others as squash.
"""


def pdf_skill(root: Path, **options) -> Path:
    return write_skill(
        root, "pdf", "Read, fill and merge PDF files and PDF forms.", PDF_BODY,
        extra="license: Apache-2.0\ncompatibility: needs python 3.10\nallowed-tools: Bash(python:*) Read\n"
              "metadata:\n  author: docs-team\n  version: '1.2'\nx-unknown-field: kept",
        files={"references/forms.md": FORMS, "scripts/fill.py": "print('never run')\n",
               "assets/logo.png": b"\x89PNG\r\n\x1a\n\x00\x01binary"},
        **options,
    )


def git_skill(root: Path, **options) -> Path:
    return write_skill(root, "git-squash", "Squash several git commits into one with an interactive rebase.", GIT_BODY,
                       **options)
