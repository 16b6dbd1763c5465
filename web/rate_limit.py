"""``MessageRate``: how many messages a connection may send, as a token bucket.

A peer that floods a websocket or an AudioSocket with messages that are each well-formed still
makes the server decode, resample and detect voice in every one, on the cores every other
call shares. Each connection gets a bucket that refills at its configured rate and holds
``BURST_S`` seconds of it, so that the bursts a network stall delivers all at once pass, and
a sustained flood does not.
"""

from __future__ import annotations

import time
from collections.abc import Callable

BURST_S = 2.0
"""Seconds' worth of messages a bucket holds."""


class MessageRate:
    def __init__(self, per_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        """``per_s`` messages a second on average; ``clock`` in seconds (tests pass their own)."""
        self.per_s = per_s
        self._capacity = max(1.0, per_s * BURST_S)
        self._tokens = self._capacity
        self._clock = clock
        self._last = clock()

    def allow(self) -> bool:
        """Take one message's token: ``False`` when the connection has run over its rate."""
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._last) * self.per_s)
        self._last = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def __str__(self) -> str:
        return f"{self.per_s:g} messages per second"
