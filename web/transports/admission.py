"""``Admission``: the calls in progress on one server, of every transport together, and the
one way each is run — so that ``server.max_sessions`` covers them all, and a drain waits for
every one of them.

Each transport is handed this, never the server: it admits a caller or turns them away
(``unavailable``: the server is full, or draining; or a call of that id is in progress already),
opens the call with ``context``, and ``run_call`` counts it among the calls in progress while
it runs. A transport needs nothing else of the server, and the server knows each transport
only by what it declares (``entry.py``).
"""

from __future__ import annotations

import asyncio
import logging
from enum import StrEnum

from cadence.web.metrics import ServerMetrics
from cadence.web.transports.call import Call, CallContext

logger = logging.getLogger(__name__)


class Unavailable(StrEnum):
    """Why a newcomer is turned away; each transport tells its peer in its own way (a page
    gets an ``error`` event of that code, a Twilio stream a close with 1013 and that reason,
    Asterisk a hang-up)."""

    BUSY = "busy"
    """``server.max_sessions`` calls are in progress."""
    DRAINING = "draining"
    """The server is shutting down: the calls in progress finish, no new one starts."""


class Admission:
    def __init__(self, context: CallContext) -> None:
        self.context = context
        """What each call is opened with."""
        self.calls: dict[str, Call] = {}
        """The calls in progress, by id."""
        self.draining = False
        """Set by ``drain``: every newcomer is refused from then on."""
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def metrics(self) -> ServerMetrics:
        """The server's metrics, where a refusal is counted."""
        return self.context.metrics

    @property
    def limit(self) -> int:
        """How many calls may run at once (``server.max_sessions``)."""
        return self.context.agent.config.server.max_sessions

    @property
    def full(self) -> bool:
        """Whether ``limit`` calls are running."""
        return len(self.calls) >= self.limit

    @property
    def unavailable(self) -> Unavailable | None:
        """Why a newcomer must be refused now; ``None`` admits them. Checked by each transport
        when a caller arrives, and again once its opening is read (calls may have been admitted
        meanwhile, or a drain begun)."""
        if self.draining:
            return Unavailable.DRAINING
        return Unavailable.BUSY if self.full else None

    async def drain(self, timeout_s: float) -> int:
        """Refuse every newcomer from now on, and wait until the calls in progress have ended,
        for ``timeout_s`` at most; returns how many are still in progress (the server's close
        ends those)."""
        self.draining = True
        logger.info("draining: %d calls in progress, %.0f s at most", len(self.calls), timeout_s)
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            left = len(self.calls)
            logger.warning("drain: %d calls still in progress after %.0f s", left, timeout_s)
        return len(self.calls)

    async def run_call(self, call: Call) -> None:
        """Run ``call`` to its end, counted among the calls in progress while it runs. Every
        transport's calls go through here, so the session limit and a drain cover them all."""
        self.calls[call.call_id] = call
        self._idle.clear()
        self.metrics.sessions.set(len(self.calls))
        logger.info("%s: connected (%d of %d sessions)", call.call_id, len(self.calls), self.limit)
        try:
            await call.run()
        finally:
            del self.calls[call.call_id]
            if not self.calls:
                self._idle.set()
            self.metrics.sessions.set(len(self.calls))
            logger.info("%s: ended", call.call_id)
