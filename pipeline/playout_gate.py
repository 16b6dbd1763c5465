"""``PlayoutGate``: lets the turn engine hold a reply's audio while it finds out whether the
caller's sound is an interruption.

When the caller makes a sound over the reply, the engine closes the gate at once and the
playout stage stops handing audio to the transport before its next frame; what was handed
already (at most the playout lead) still plays. The transcript then decides: a backchannel
opens the gate and the reply goes on where it stopped; real words cut it. The gate is shared
out of band, like the playback ledger, because a frame sent downstream to say "pause" would
queue behind the very audio it is meant to stop.
"""

from __future__ import annotations

import asyncio


class PlayoutGate:
    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def close(self) -> None:
        """Hold the reply's audio from the next frame on."""
        self._open.clear()

    def open(self) -> None:
        """Let the reply's audio go on (or, after a barge-in, the next reply's)."""
        self._open.set()

    async def opened(self) -> None:
        """Return once the gate is open."""
        await self._open.wait()
