"""Shared fixtures, the fake OpenAI-compatible service among them. Every async test also
checks that it left no task running; a test marked with ``prerequisites.requires`` is skipped —
or, in CI, failed — when what it needs is missing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from openai_service import KEY, KEY_ENV

# The prerequisites' hooks: a ``requires`` mark skips, or fails in CI (tests/prerequisites.py).
from prerequisites import (  # noqa: F401
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_setup,
)

from cadence.tooling.emulators.openai import FakeOpenAI


@pytest.fixture(autouse=True)
async def no_leaked_tasks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    await asyncio.sleep(0)
    leaked = {
        t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()
    }
    assert not leaked, f"tasks left running: {sorted(t.get_name() for t in leaked)}"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    """An OpenAI-compatible service on loopback (``tests/openai_service.py``)."""
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """The service's key, in the environment variable the backend's settings name."""
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY
