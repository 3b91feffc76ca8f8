"""Packaging metadata: what a wheel and its index page need."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = {"skillgraft": ROOT, "langchain_skillgraft": ROOT / "adapters" / "langchain"}


@pytest.mark.parametrize("package", sorted(PROJECTS))
def test_project_metadata(package):
    try:  # here, not at import: test_no_models.py imports every module
        import tomllib
    except ImportError:  # Python 3.10; the dev extra installs tomli there
        import tomli as tomllib
    folder = PROJECTS[package]
    config = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    project = config["project"]
    assert isinstance(project["license"], str), "a license table is deprecated: use an SPDX string"
    assert project["urls"] and all(url.startswith("https://") for url in project["urls"].values())
    assert (folder / package / "py.typed").is_file()
    assert "py.typed" in config["tool"]["setuptools"]["package-data"][package]


@pytest.mark.parametrize("package", sorted(PROJECTS))
def test_readme_links_stay_inside_the_package(package):
    readme = (PROJECTS[package] / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)]+)\)", readme):
        assert re.match(r"https?://|#", target), f"{target} does not resolve on the package index"
