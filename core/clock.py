"""The session clock: one monotonic time base in milliseconds, injectable for tests.

Every timestamp in frames and traces is read from one ``Clock``, so that spans computed from
different stages are comparable. ``VirtualClock`` only moves when a test advances it, which
makes latency arithmetic deterministic.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from itertools import count
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> float:
        """Milliseconds since this clock's origin; never decreases."""
        ...

    async def sleep_until(self, deadline_ms: float) -> None:
        """Return once ``now_ms() >= deadline_ms``."""
        ...


class MonotonicClock:
    """Wall time from ``time.perf_counter``, with its origin at construction."""

    def __init__(self) -> None:
        self._origin = time.perf_counter()

    def now_ms(self) -> float:
        return (time.perf_counter() - self._origin) * 1000.0

    async def sleep_until(self, deadline_ms: float) -> None:
        delay_ms = deadline_ms - self.now_ms()
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000.0)


class VirtualClock:
    """A clock that stands still until ``advance`` moves it; sleepers wake in deadline order."""

    def __init__(self, start_ms: float = 0.0) -> None:
        self._now = start_ms
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = count()

    def now_ms(self) -> float:
        return self._now

    async def sleep_until(self, deadline_ms: float) -> None:
        if deadline_ms <= self._now:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline_ms, next(self._order), future))
        await future

    async def advance(self, delta_ms: float) -> None:
        """Move time forward, waking each sleeper at its own deadline in order and letting it
        run before time moves past it."""
        if delta_ms < 0:
            raise ValueError(f"a clock cannot go back (advance by {delta_ms} ms)")
        target = self._now + delta_ms
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, future = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            if not future.done():
                future.set_result(None)
            await asyncio.sleep(0)
        self._now = target
