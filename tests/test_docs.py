"""The docs site builds --strict and its CLI reference names every command (the hand-written
pages are checked against the code in tests/unit/test_docs_text.py)."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from skillgraft.cli.main import cli
from tests.required import unavailable

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = Path(sys.executable).parent / "mkdocs"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if not MKDOCS.exists():
        unavailable("mkdocs is not installed (pip install 'skillgraft[docs]')")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    return out


def headings(page: Path, level: int = 2) -> list[str]:
    found = re.findall(rf"<h{level}[^>]*>(.*?)</h{level}>", page.read_text(encoding="utf-8"), re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", h)).replace("¶", "").strip() for h in found]


def test_site_builds_strict(site):
    for page in ("index.html", "quickstart/index.html", "concepts/index.html", "cli/index.html",
                 "api/index.html", "storage/index.html", "limits/index.html"):
        assert (site / page).is_file(), page


def test_cli_reference_has_every_command(site):
    page = site / "cli" / "index.html"
    names = headings(page)
    for command in sorted(cli.commands):
        assert command in names, f"skillgraft {command} has no heading in the CLI reference"
    assert "cli-reference" not in page.read_text(encoding="utf-8"), "the placeholder was not replaced"
