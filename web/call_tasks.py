"""``CallTasks``: the tasks one call started — and those of its voice session — kept so that
the call can end every one of them before it returns: a call must leave nothing running
behind it."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from pipeline.session import VoiceSession


class CallTasks:
    def __init__(self, call_id: str) -> None:
        self._call_id = call_id
        self._tasks: list[asyncio.Task[None]] = []
        self._session: VoiceSession | None = None

    def include(self, session: VoiceSession) -> None:
        """Count the tasks of the call's session among the call's."""
        self._session = session

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run ``work`` as a task of the call, named ``<call id>:<name>``."""
        task = asyncio.create_task(work, name=f"{self._call_id}:{name}")
        self._tasks.append(task)
        return task

    @property
    def running(self) -> list[asyncio.Task[Any]]:
        """The call's tasks still running, its session's included."""
        owned: list[asyncio.Task[Any]] = [task for task in self._tasks if not task.done()]
        return owned + (self._session.pipeline.tasks if self._session is not None else [])

    async def cancel(self) -> None:
        """Cancel the tasks still running and wait until every one has finished."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self._session = None
