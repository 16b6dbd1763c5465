"""Time limits on streams a stage waits on: a generator's pieces, a synthesizer's audio."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")


async def arriving_within(items: AsyncIterator[T], limit_ms: float) -> AsyncIterator[T]:
    """``items`` as they come; ``TimeoutError`` if any takes longer than ``limit_ms`` to arrive.
    Only the waiting counts — not the time the consumer spends on an item (a stage held back
    by the one after it is not the stream's fault)."""
    while True:
        try:
            async with asyncio.timeout(limit_ms / 1000.0):
                item = await anext(items)
        except StopAsyncIteration:
            return
        yield item
