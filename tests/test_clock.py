"""The session clocks."""

from __future__ import annotations

import asyncio

import pytest

from cadence.core.clock import MonotonicClock, VirtualClock


async def test_virtual_clock_wakes_sleepers_at_their_own_deadlines_in_order() -> None:
    clock = VirtualClock()
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, deadline: float) -> None:
        await clock.sleep_until(deadline)
        woke.append((name, clock.now_ms()))

    tasks = [asyncio.create_task(sleeper(n, d)) for n, d in [("c", 30), ("a", 10), ("b", 20)]]
    await asyncio.sleep(0)
    await clock.advance(25)
    assert woke == [("a", 10), ("b", 20)]
    assert clock.now_ms() == 25
    await clock.advance(5)
    await asyncio.gather(*tasks)
    assert woke[-1] == ("c", 30)


async def test_virtual_clock_cannot_go_back() -> None:
    with pytest.raises(ValueError, match="cannot go back"):
        await VirtualClock().advance(-1)


async def test_monotonic_clock_sleeps_until_its_deadline() -> None:
    clock = MonotonicClock()
    start = clock.now_ms()
    await clock.sleep_until(start + 20)
    assert clock.now_ms() >= start + 20
