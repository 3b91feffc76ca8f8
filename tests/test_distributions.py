"""The built distributions install and run outside the checkout.

`make dist` builds the sdist and the wheel of skillgraft and of langchain-skillgraft; this test
builds them the same way (the wheel from the sdist, as pip does), installs both wheels into a
fresh virtual environment with no editable install and no checkout on the path, and runs the
README's Python example and `skillgraft --help` there.

Installing every dependency afresh would take about ten minutes here (torch, and
llama-cpp-python compiles from source), so the fresh environment gets the two wheels with
``--no-deps`` and finds the third-party packages already installed in the running environment
through a .pth file naming a folder of links to them: every entry but skillgraft's and
langchain-skillgraft's own (their editable finders and metadata). The test checks that both
packages are imported from the fresh environment.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.required import need

ROOT = Path(__file__).resolve().parent.parent
ADAPTER = ROOT / "adapters" / "langchain"
OWN = re.compile(r"^(__editable__.*|_?_?editable.*finder.*|(skillgraft|langchain_skillgraft)([-.].*)?|.*\.pth)$", re.I)
PACKAGE_DATA = ("skillgraft/inspector/templates/skills.html", "skillgraft/inspector/static/inspector.css",
                "skillgraft/py.typed")

pytestmark = pytest.mark.slow


def _run(argv: list, cwd: Path, timeout: int = 600, env=None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{argv[:4]} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """sdists and wheels of both projects, built without network (the installed setuptools)."""
    need("build", "skillgraft[dev]")
    out = tmp_path_factory.mktemp("dist")
    for project in (ROOT, ADAPTER):
        _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, project], cwd=project)
    return out


def _dependencies(folder: Path) -> Path:
    """A folder of links to the running environment's packages, skillgraft's own excepted."""
    folder.mkdir()
    sources = dict.fromkeys(Path(sysconfig.get_paths()[key]) for key in ("purelib", "platlib"))
    for source in sources:
        for entry in source.iterdir():
            if not OWN.match(entry.name) and not (folder / entry.name).exists():
                (folder / entry.name).symlink_to(entry)
    return folder


@pytest.fixture(scope="module")
def fresh(dist, tmp_path_factory) -> Path:
    """A new virtual environment holding the two wheels (and, by a .pth file, the dependencies)."""
    base = tmp_path_factory.mktemp("fresh")
    venv, env = base / "venv", _clean_env(base / "home")  # no PYTHONPATH: pip would see the checkout as installed
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=base, env=env)
    python = venv / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=base, env=env).stdout.strip())
    (site / "_skillgraft_test_dependencies.pth").write_text(f"{_dependencies(base / 'dependencies')}\n")
    wheels = sorted(dist.glob("*.whl"))
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index", *wheels],
         cwd=base, env=env)
    return venv


def _clean_env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SKILLGRAFT_", "VIRTUAL_ENV"))}
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "SKILLGRAFT_HOME": str(home)}


def test_make_dist_builds_both_projects_with_their_package_data(dist):
    names = sorted(p.name for p in dist.iterdir())
    assert names == ["langchain_skillgraft-0.1.0-py3-none-any.whl", "langchain_skillgraft-0.1.0.tar.gz",
                     "skillgraft-0.1.0-py3-none-any.whl", "skillgraft-0.1.0.tar.gz"], names
    with zipfile.ZipFile(dist / "skillgraft-0.1.0-py3-none-any.whl") as wheel:
        files = set(wheel.namelist())
    assert all(path in files for path in PACKAGE_DATA), sorted(f for f in files if "inspector" in f)
    assert not any(f.startswith(("tests/", "docs/", "benchmarks/")) for f in files)
    with zipfile.ZipFile(dist / "langchain_skillgraft-0.1.0-py3-none-any.whl") as wheel:
        assert "langchain_skillgraft/py.typed" in wheel.namelist()


@pytest.mark.model
@pytest.mark.sandbox
def test_the_wheels_run_the_readme_example_in_a_fresh_environment(fresh, tmp_path):
    app = tmp_path / "app"  # an agent app's own folder: no checkout anywhere on its path
    app.mkdir()
    env = _clean_env(tmp_path / "home")
    python = fresh / "bin" / "python"
    where = json.loads(_run([python, "-c", (
        "import json, sys, skillgraft, langchain_skillgraft; "
        "from skillgraft.inspector.pages import _environment; _environment().get_template('skills.html'); "
        "print(json.dumps({'skillgraft': skillgraft.__file__, 'adapter': langchain_skillgraft.__file__, 'path': sys.path}))"
    )], cwd=app, env=env).stdout)
    for module in ("skillgraft", "adapter"):
        assert Path(where[module]).is_relative_to(fresh), where[module]
    assert not any(entry and Path(entry).resolve().is_relative_to(ROOT) for entry in where["path"]), where["path"]

    help_text = _run([fresh / "bin" / "skillgraft", "--help"], cwd=app, env=env).stdout
    assert all(re.search(rf"^\s+{command}\b", help_text, re.M) for command in ("serve", "ui", "ask", "add-manual"))

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n(.*?)```", readme.split("## A short example", 1)[1], re.S).group(1)
    (app / "example.py").write_text(example)
    out = _run([python, "example.py"], cwd=app, env=env).stdout.splitlines()
    assert out[0] == "exact" and out[-1].startswith("391 ['git-squash'"), out
    assert (app / "my-store" / "catalog.db").is_file()
