"""``BrowserCall``: one visitor of the demo page, from the signaling websocket's opening to its
close — the signaling, the peer connection and the voice session.

Everything a call starts, it also ends: when ``run`` returns, whatever the way the call ended
(hang-up, a broken protocol, a failed session or connection, a visitor who simply vanished),
the inbound audio task, every task of the session's pipeline, the peer connection and the
event writer are finished, and nothing holds a reference to the call any more.

Events for the page are queued and written by one task, so that the pipeline never waits on
a slow browser and the events reach the page in the order they happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from pipeline.agent import Agent
from pipeline.events import EventHandler, SessionEvent
from pipeline.pipeline import PipelineClosedError
from pipeline.session import VoiceSession
from pipeline.tracing import STAGE_LATENCIES
from voice.audio import PCM16
from web.call_session import CallSession
from web.call_tasks import CallTasks
from web.metrics import ErrorKind, ServerMetrics
from web.outbox import Outbox
from web.page_events import Event, page_event
from web.rate_limit import MessageRate
from web.signaling import (
    ClientMessage,
    CloseCode,
    Hangup,
    Offer,
    SignalingError,
    parse_client_message,
)
from web.transports.webrtc import OUTPUT_SAMPLE_RATE, WebRTCTransport

logger = logging.getLogger(__name__)

OFFER_TIMEOUT_S = 30.0
"""A visitor who connects and sends no offer gives their place back after this long."""

CLOSE_TIMEOUT_S = 2.0
"""How long the last events and the close may take to reach a page that still listens."""

MAX_QUEUED_EVENTS = 1000
"""Events waiting for a page that does not read them; past this, new ones are dropped."""


def error_event(code: str, message: str) -> Event:
    return {"type": "error", "code": code, "message": message}


class BrowserCall:
    def __init__(
        self,
        websocket: ServerConnection,
        agent: Agent,
        *,
        call_id: str,
        metrics: ServerMetrics,
        on_event: EventHandler | None = None,
    ) -> None:
        """``on_event`` gets each event of the call's session, as the page does."""
        self.call_id = call_id
        self._ws = websocket
        self._agent = agent
        self._metrics = metrics
        self._on_event = on_event
        self._outbox = Outbox(websocket, limit=MAX_QUEUED_EVENTS)
        self._rate = MessageRate(agent.config.server.max_messages_per_s)
        self._tasks = CallTasks(call_id)
        self._call_session: CallSession | None = None
        self.session: VoiceSession | None = None
        self.transport: WebRTCTransport | None = None

    @property
    def tasks(self) -> list[asyncio.Task[Any]]:
        """Every task of this call still running: its own, the transport's, the session's."""
        owned = self._tasks.running
        if self.transport is not None:
            owned += self.transport.tasks
        return owned

    async def run(self) -> None:
        """Serve the visitor until the call ends; everything of it is released on return."""
        writer = self._tasks.spawn(self._outbox.run(), "writer")
        try:
            self._post(
                {
                    "type": "hello",
                    "session_id": self.call_id,
                    "budget": self._agent.config.budget.model_dump(),
                    "stages": [latency.name for latency in STAGE_LATENCIES],
                }
            )
            await self._converse()
        except SignalingError as exc:
            logger.info("%s: %s: %s", self.call_id, exc.code, exc.message)
            self._metrics.errors.labels(ErrorKind.SIGNALING.value).inc()
            self._fail(exc.code, exc.message, exc.close_code)
        except ConnectionClosed:
            logger.info("%s: the visitor left", self.call_id)
        except Exception:
            logger.exception("%s: the call failed", self.call_id)
            self._metrics.errors.labels(ErrorKind.INTERNAL.value).inc()
            self._fail("internal", "internal server error", CloseCode.INTERNAL_ERROR)
        finally:
            await self._release(writer)

    # --- signaling ----------------------------------------------------------------------------

    async def _converse(self) -> None:
        try:
            async with asyncio.timeout(OFFER_TIMEOUT_S):
                first = self._parse(await self._ws.recv())
        except TimeoutError:
            raise SignalingError("no_offer", f"no offer within {OFFER_TIMEOUT_S:.0f} s") from None
        if isinstance(first, Hangup):
            return
        await self._connect(first)
        async for raw in self._ws:
            match self._parse(raw):
                case Hangup():
                    return
                case Offer():
                    raise SignalingError(
                        "duplicate_offer", "this call is connected already (no renegotiation)"
                    )

    def _parse(self, raw: str | bytes) -> ClientMessage:
        """``raw`` as a message, counted against the visitor's rate."""
        if not self._rate.allow():
            raise SignalingError("rate_limited", f"over {self._rate}")
        return parse_client_message(raw)

    async def _connect(self, offer: Offer) -> None:
        transport = WebRTCTransport(
            name=self.call_id, on_audio=self._feed, on_lost=self._connection_lost
        )
        self.transport = transport
        self.session = await self._agent.open_session(
            session_id=self.call_id,
            output_sample_rate=OUTPUT_SAMPLE_RATE,
            output=transport.output,
            trace_sinks=[self._metrics],
        )
        self._call_session = CallSession(
            self.session, self._tasks, on_event=self._page_event, on_failure=self._session_failed
        )
        try:
            answer = await transport.answer(offer.sdp)
        except Exception as exc:
            # aiortc raises whatever its SDP parser trips on (ValueError, KeyError, …).
            raise SignalingError("bad_offer", f"cannot use the offer: {exc!r}") from exc
        self._post({"type": "answer", "sdp": answer})

    # --- while the call runs ------------------------------------------------------------------

    async def _feed(self, pcm: PCM16, sample_rate: int) -> None:
        if self.session is None:
            return
        # A failed session refuses audio; _session_failed is ending the call.
        with contextlib.suppress(PipelineClosedError):
            await self.session.feed(pcm, sample_rate)

    def _page_event(self, event: SessionEvent) -> None:
        if (page := page_event(event)) is not None:
            self._post(page)
        if self._on_event is not None:
            self._on_event(self.call_id, event)

    def _session_failed(self) -> None:
        self._metrics.errors.labels(ErrorKind.SESSION_FAILED.value).inc()
        self._fail(
            "session_failed",
            "the voice session failed; the server log has the details",
            CloseCode.INTERNAL_ERROR,
        )

    def _connection_lost(self) -> None:
        self._metrics.errors.labels(ErrorKind.CONNECTION_LOST.value).inc()
        self._fail("connection_lost", "the WebRTC connection was lost", CloseCode.GOING_AWAY)

    # --- events to the page -------------------------------------------------------------------

    def _post(self, event: Event) -> None:
        if not self._outbox.post(json.dumps(event)) and not self._outbox.closing:
            logger.warning("%s: the page is not reading; dropped an event", self.call_id)

    def _fail(self, code: str, message: str, close_code: CloseCode) -> None:
        self._post(error_event(code, message))
        self._outbox.close(close_code, code)

    # --- the end ------------------------------------------------------------------------------

    async def _release(self, writer: asyncio.Task[None]) -> None:
        # Media first, so that nothing more reaches the session; then the session, whose last
        # trace is still posted to the page; then the socket.
        if self.transport is not None:
            await self.transport.close()
        if self._call_session is not None:
            await self._call_session.end("call ended")
        self._outbox.close(CloseCode.NORMAL, "call ended")
        await asyncio.wait([writer], timeout=CLOSE_TIMEOUT_S)
        await self._tasks.cancel()
        self._call_session = None
        self.session = None
        self.transport = None
