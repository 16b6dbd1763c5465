"""Shared fixtures. Every async test also checks that it left no task running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest


@pytest.fixture(autouse=True)
async def no_leaked_tasks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    await asyncio.sleep(0)
    leaked = {
        t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()
    }
    assert not leaked, f"tasks left running: {sorted(t.get_name() for t in leaked)}"
