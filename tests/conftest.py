"""Shared fixtures, the fake OpenAI-compatible service among them. Every async test also
checks that it left no task running; a test marked with ``prerequisites.requires`` is skipped —
or, in CI, failed — when what it needs is missing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from openai_service import KEY, KEY_ENV
from prerequisites import MARK, apply_marks, fail_unmet

from cadence.tooling.emulators.openai import FakeOpenAI


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARK}(met, reason): the test needs a prerequisite; unmet, it is skipped with the "
        "reason, or fails when CI=true (tests/prerequisites.py)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        apply_marks(item)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    fail_unmet(item)


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
