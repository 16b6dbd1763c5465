"""``CallSession``: a call's voice session, with the two tasks every call runs beside it — one
hands the session's events on, one notices the session failing — and the one way every call
ends it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pipeline.events import SessionEvent
from pipeline.pipeline import StageFailedError
from pipeline.session import VoiceSession
from web.call_tasks import CallTasks

LAST_EVENTS_TIMEOUT_S = 2.0
"""How long the session's last events (its last trace among them) may take to be handed on
once it has stopped."""


class CallSession:
    def __init__(
        self,
        session: VoiceSession,
        tasks: CallTasks,
        *,
        on_event: Callable[[SessionEvent], None],
        on_failure: Callable[[], None],
    ) -> None:
        """``on_event`` gets each event of the session; ``on_failure`` is called if a stage of
        it fails (the session is over then; the call should end)."""
        self.session = session
        tasks.include(session)
        self._on_event = on_event
        self._on_failure = on_failure
        self._forwarder = tasks.spawn(self._forward(), "events")
        tasks.spawn(self._watch(), "watch")

    async def end(self, reason: str) -> None:
        """Stop the session now; its last events are still handed on."""
        await self.session.cancel(reason)
        await asyncio.wait([self._forwarder], timeout=LAST_EVENTS_TIMEOUT_S)

    async def _forward(self) -> None:
        async for event in self.session.events:
            self._on_event(event)

    async def _watch(self) -> None:
        try:
            await self.session.pipeline.wait()
        except StageFailedError:
            self._on_failure()
