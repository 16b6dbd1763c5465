"""``Admission``: the calls in progress on one server, of every transport together, and the
one way each is run — so that ``server.max_sessions`` covers them all.

Each transport is handed this, never the server: it admits a caller or turns them away
(``full``, or a call of that id in progress already), opens the call with ``context``, and
``run_call`` counts it among the calls in progress while it runs. A transport needs nothing
else of the server, and the server knows each transport only by what it declares
(``entry.py``).
"""

from __future__ import annotations

import logging

from cadence.web.metrics import ServerMetrics
from cadence.web.transports.call import Call, CallContext

logger = logging.getLogger(__name__)


class Admission:
    def __init__(self, context: CallContext) -> None:
        self.context = context
        """What each call is opened with."""
        self.calls: dict[str, Call] = {}
        """The calls in progress, by id."""

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
        """Whether a newcomer must be refused: ``limit`` calls are running."""
        return len(self.calls) >= self.limit

    async def run_call(self, call: Call) -> None:
        """Run ``call`` to its end, counted among the calls in progress while it runs. Every
        transport's calls go through here, so the session limit covers them all."""
        self.calls[call.call_id] = call
        self.metrics.sessions.set(len(self.calls))
        logger.info("%s: connected (%d of %d sessions)", call.call_id, len(self.calls), self.limit)
        try:
            await call.run()
        finally:
            del self.calls[call.call_id]
            self.metrics.sessions.set(len(self.calls))
            logger.info("%s: ended", call.call_id)
