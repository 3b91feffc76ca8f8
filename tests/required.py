"""The packages a test module needs from an extra: a skip where one is missing, a failure under
``make test``.

``make test`` installs every extra and sets ``SKILLGRAFT_REQUIRE_SERVER``,
``SKILLGRAFT_REQUIRE_SANDBOX`` and ``SKILLGRAFT_REQUIRE_BROWSER``; under any
``SKILLGRAFT_REQUIRE_*`` variable a missing package fails the tests that need it instead of
skipping them, so a broken install cannot pass as a short run.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

PREFIX = "SKILLGRAFT_REQUIRE_"


def required() -> bool:
    """Whether the run is one where nothing it needs may be missing (any SKILLGRAFT_REQUIRE_*)."""
    return any(name.startswith(PREFIX) and value for name, value in os.environ.items())


def need(module: str, extra: str) -> ModuleType:
    """Import ``module``, which ``pip install 'EXTRA'`` installs; skip, or fail when required."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        unavailable(f"{module} is not installed (pip install '{extra}'): {exc}")


def unavailable(reason: str) -> NoReturn:
    """Skip with ``reason``, or fail with it when required."""
    if required():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_llama_server() -> None:
    """Skip unless a llama-server build is at hand; under ``SKILLGRAFT_REQUIRE_SERVER`` (``make
    test`` builds it first) a missing build fails instead."""
    from skillgraft.errors import ServerBuildError
    from skillgraft.server.build import find_server

    try:
        find_server()
    except ServerBuildError as exc:
        if os.environ.get("SKILLGRAFT_REQUIRE_SERVER"):
            pytest.fail(f"no llama-server build although make built one: {exc}")
        pytest.skip(f"no llama-server build: {exc}")
