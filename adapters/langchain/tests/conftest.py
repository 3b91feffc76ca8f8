"""Shared fixtures: the session's stocked store and its one loaded memory (real model, real router)."""

from __future__ import annotations

import inspect
import os
import shutil

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import lc_store  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _remove_store():
    yield
    if lc_store.built():
        from langchain_skillgraft import close_shared_memories

        close_shared_memories()
        shutil.rmtree(lc_store.store_home(), ignore_errors=True)


@pytest.fixture(scope="session")
def home():
    return lc_store.store_home()


@pytest.fixture(scope="session")
def memory(home):
    from langchain_skillgraft import open_memory

    return open_memory(home)


@pytest.fixture(scope="session")
def manual(memory):
    return memory.store.get("git-squash")


@pytest.fixture(scope="session")
def chat(memory):
    from langchain_skillgraft import ChatSkillGraft

    return ChatSkillGraft(memory=memory, max_tokens=lc_store.MAX_TOKENS)


@pytest.fixture(scope="session")
def plain(memory):
    """The same model answering every chat plainly (no recall): what a graft must equal."""
    from langchain_skillgraft import ChatSkillGraft

    return ChatSkillGraft(memory=memory, max_tokens=lc_store.MAX_TOKENS, route=False)


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_pycollect_makeitem(collector, name, obj):
    """Run this folder's coroutine tests (the standard suites' async ones too) with pytest-asyncio.

    The repository's pytest settings keep pytest-asyncio in strict mode, and the standard
    suites' async tests carry no marker; this marks them as they are collected.
    """
    outcome = yield
    result = outcome.get_result()
    for node in result if isinstance(result, list) else [result]:
        if isinstance(node, pytest.Function) and inspect.iscoroutinefunction(node.obj):
            node.add_marker(pytest.mark.asyncio)
