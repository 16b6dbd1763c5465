"""``Outbox``: the messages of one websocket, written in order by one task.

The pipeline posts and never waits: a slow peer must not hold back a session's audio pacing,
nor a stalled one leave a stage blocked in ``send``. What happens when the peer falls behind
is the caller's choice — ``post`` says whether the message was taken.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed

from cadence.web.signaling import CloseCode


@dataclass(frozen=True)
class _Close:
    """The last item: close the websocket with this code."""

    code: CloseCode
    reason: str


class Outbox:
    def __init__(self, websocket: Connection, *, limit: int) -> None:
        self._ws = websocket
        self._limit = limit
        self._queue: asyncio.Queue[str | _Close] = asyncio.Queue()
        self.closing = False

    def post(self, message: str) -> bool:
        """Queue ``message``; ``False`` if it was dropped: the outbox is closing, or ``limit``
        messages are waiting already (the peer is not reading)."""
        if self.closing or self._queue.qsize() >= self._limit:
            return False
        self._queue.put_nowait(message)
        return True

    def close(self, code: CloseCode, reason: str) -> None:
        """Close the websocket once what is queued was written; later posts are dropped."""
        if not self.closing:
            self.closing = True
            self._queue.put_nowait(_Close(code, reason))

    async def run(self) -> None:
        """Write until the close is written or the connection is gone."""
        while True:
            item = await self._queue.get()
            try:
                if isinstance(item, _Close):
                    await self._ws.close(item.code, item.reason)
                    return
                await self._ws.send(item)
            except ConnectionClosed:
                return
