"""``Call``: the life every call shares, whatever carries it — a visitor of the page over
WebRTC, a Twilio Media Stream, an Asterisk AudioSocket connection — from the moment its
transport admits it (``admission.py``) to the moment nothing of it is left.

``run`` serves the caller until the call ends, whatever the way it ends (the caller or the
agent hanging up, a broken protocol, a failed session or connection, a peer that simply
vanished), then releases everything the call started, in an order that loses nothing: the
caller's audio first, so that nothing more reaches the session; then the session, cancelled,
whose last events (its last trace among them) are still handed on to ``on_event``; then the
connection, given ``CLOSE_TIMEOUT_S`` to take what is left; then every task the call
started. When ``run`` returns no task of the call runs and nothing of its transport
references it.

What is the same for every transport is written here once; a subclass supplies only what
differs: how to read its wire (``_serve``), its audio output (handed to ``_open_session``),
how it hangs up (``hang_up``: the agent ended the call, a ``HangUpEvent`` of the session),
how it tells its peer that the call failed (``_fail``) and how it closes its connection
(``_close``). ``WebsocketCall`` adds what the two websocket transports share: an outbox
written by one task, so that the pipeline never waits on a slow peer.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, ClassVar

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from cadence.pipeline.agent import Agent
from cadence.pipeline.events import EventHandler, HangUpEvent, SessionEvent
from cadence.pipeline.pipeline import StageFailedError
from cadence.pipeline.session import VoiceSession
from cadence.pipeline.stages.playout import AudioOutput
from cadence.web.ice import ICEServers
from cadence.web.metrics import ErrorKind, ServerMetrics
from cadence.web.outbox import Outbox
from cadence.web.signaling import CloseCode

CLOSE_TIMEOUT_S = 2.0
"""How long the last messages and the close may take to reach a peer that still listens,
before the connection is dropped."""

LAST_EVENTS_TIMEOUT_S = 2.0
"""How long the session's last events (its last trace among them) may take to be handed on
once it has stopped."""


class CallTasks:
    """The tasks one call started — and those of its voice session — kept so that the call
    can end every one of them before it returns: a call must leave nothing running behind."""

    def __init__(self, call_id: str) -> None:
        self._call_id = call_id
        self._tasks: list[asyncio.Task[None]] = []
        self._session: VoiceSession | None = None

    def include(self, session: VoiceSession) -> None:
        """Count the tasks of the call's session among the call's."""
        self._session = session

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run ``work`` as a task of the call, named ``<call id>:<name>``."""
        task = asyncio.create_task(work, name=f"{self._call_id}:{name}")
        self._tasks.append(task)
        return task

    @property
    def running(self) -> list[asyncio.Task[Any]]:
        """The call's tasks still running, its session's included."""
        owned: list[asyncio.Task[Any]] = [task for task in self._tasks if not task.done()]
        return owned + (self._session.pipeline.tasks if self._session is not None else [])

    async def cancel(self) -> None:
        """Cancel the tasks still running and wait until every one has finished."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self._session = None


@dataclass(frozen=True)
class CallContext:
    """What every call of one server is opened with, whatever its transport."""

    agent: Agent
    """What the call's session is opened on; its configuration holds each transport's
    settings."""
    metrics: ServerMetrics
    """The server's metrics: a trace sink of every session, and the count of errors."""
    on_event: EventHandler | None = None
    """Gets each event of every call's session, with the call's id."""
    ice: ICEServers = field(default_factory=ICEServers)
    """The STUN and TURN servers of a browser call (``server.ice_servers``), with their
    credentials."""


class Call(ABC):
    """One caller connected over some transport, from admission to hang-up."""

    end_reason: ClassVar[str] = "call ended"
    """What the session is cancelled with, and the connection closed with, when the call
    ends."""

    def __init__(self, context: CallContext, *, call_id: str) -> None:
        self.call_id = call_id
        self.session: VoiceSession | None = None
        """The call's voice session, once it is open."""
        self._agent = context.agent
        self._metrics = context.metrics
        self._on_event = context.on_event
        self._tasks = CallTasks(call_id)
        self._forwarder: asyncio.Task[None] | None = None
        self._log = logging.getLogger(type(self).__module__)
        """The transport's own logger: operators filter a call's lines by where they come
        from, and the base's lines belong to the transport as much as its own."""

    @property
    def tasks(self) -> list[asyncio.Task[Any]]:
        """Every task of this call still running: its own and its session's (none once
        ``run`` has returned)."""
        return self._tasks.running

    async def run(self) -> None:
        """Serve the caller until the call ends; everything of it is released on return."""
        try:
            await self._serve()
        except Exception:
            self._log.exception("%s: the call failed", self.call_id)
            self._fail(ErrorKind.INTERNAL)
        finally:
            await self._release()

    # --- what each transport supplies ---------------------------------------------------------

    @abstractmethod
    async def _serve(self) -> None:
        """Read the caller's wire until the call ends, having opened the session with
        ``_open_session``. What the protocol allows to go wrong is handled here; anything
        else that raises is a bug, ended as ``INTERNAL``."""

    @abstractmethod
    def hang_up(self, reason: str) -> None:
        """End the call from this side, as the transport ends a call that went well: the peer
        is told the call is over (what is queued for it still goes out), ``_serve`` returns
        and the call is released as after any other ending. Called when the agent hangs up,
        its goodbye heard (``HangUpEvent``); ``reason`` is the session's."""

    @abstractmethod
    def _fail(self, kind: ErrorKind) -> None:
        """End the call from this side for an error of ``kind`` — ``INTERNAL`` (a bug) or
        ``SESSION_FAILED`` (a stage raised): counted in the metrics, told to the peer as the
        transport can; ``_serve`` returns (or has returned) and the call is released."""

    @abstractmethod
    async def _stop_reading(self) -> None:
        """Stop taking the caller's audio, so that nothing more reaches the session while it
        ends."""

    @abstractmethod
    async def _close(self) -> None:
        """Close the connection once what is left to send went out, within
        ``CLOSE_TIMEOUT_S``."""

    # --- the session --------------------------------------------------------------------------

    async def _open_session(
        self, output: AudioOutput, sample_rate: int, *, overlay: str | None = None
    ) -> VoiceSession:
        """Open the call's voice session, its reply going out through ``output`` at
        ``sample_rate``: its events are handed on as they come (``_hand_on``), and a stage
        that fails ends the call (``_fail``)."""
        session = await self._agent.open_session(
            session_id=self.call_id,
            output_sample_rate=sample_rate,
            output=output,
            overlay=overlay,
            trace_sinks=[self._metrics],
        )
        self.session = session
        self._tasks.include(session)
        self._forwarder = self._tasks.spawn(self._forward(session), "events")
        self._tasks.spawn(self._watch(session), "watch")
        return session

    def _hand_on(self, event: SessionEvent) -> None:
        """Hand ``event`` of the session on to ``on_event``."""
        if self._on_event is not None:
            self._on_event(self.call_id, event)

    def _count(self, kind: ErrorKind) -> None:
        self._metrics.errors.labels(kind.value).inc()

    async def _forward(self, session: VoiceSession) -> None:
        async for event in session.events:
            self._hand_on(event)
            if isinstance(event, HangUpEvent):
                # Handed on first: the peer may be told of it (the page is) before the close.
                self._log.info("%s: hanging up: %s", self.call_id, event.reason)
                self.hang_up(event.reason)

    async def _watch(self, session: VoiceSession) -> None:
        try:
            await session.pipeline.wait()
        except StageFailedError:
            self._fail(ErrorKind.SESSION_FAILED)

    # --- the end ------------------------------------------------------------------------------

    async def _release(self) -> None:
        await self._stop_reading()
        if self.session is not None:
            await self.session.cancel(self.end_reason)
            if self._forwarder is not None:
                await asyncio.wait([self._forwarder], timeout=LAST_EVENTS_TIMEOUT_S)
        await self._close()
        await self._tasks.cancel()
        self._forwarder = None
        self.session = None


class WebsocketCall(Call):
    """A call whose peer is at the other end of a websocket (the page, Twilio). What the call
    sends goes through an ``Outbox`` that one task writes, in order, so that the pipeline
    never waits on a slow peer; at the end the last messages and the close get
    ``CLOSE_TIMEOUT_S``."""

    peer_left: ClassVar[str] = "the peer left"
    """What the log says of a peer that dropped the connection."""

    hung_up: ClassVar[str] = "hung up"
    """The reason of the close frame when the agent hangs up: short and fixed, as a close
    frame holds 123 bytes of it and the session's reason may be anything an application
    wrote."""

    def __init__(
        self, websocket: ServerConnection, context: CallContext, *, call_id: str, max_queued: int
    ) -> None:
        """``max_queued``: the messages that may wait for a peer that does not read."""
        super().__init__(context, call_id=call_id)
        self._ws = websocket
        self._outbox = Outbox(websocket, limit=max_queued)
        self._writer: asyncio.Task[None] | None = None

    async def _serve(self) -> None:
        self._writer = self._tasks.spawn(self._outbox.run(), "writer")
        try:
            await self._converse()
        except ConnectionClosed:
            self._log.info("%s: %s", self.call_id, self.peer_left)

    @abstractmethod
    async def _converse(self) -> None:
        """Read the peer's messages until the call ends (a dropped connection ends it
        too)."""

    def hang_up(self, reason: str) -> None:
        """Close the websocket normally once what is queued went out; the peer's reading ends
        with it, and so does ``_converse``."""
        self._outbox.close(CloseCode.NORMAL, self.hung_up)

    async def _close(self) -> None:
        self._outbox.close(CloseCode.NORMAL, self.end_reason)
        if self._writer is not None:
            await asyncio.wait([self._writer], timeout=CLOSE_TIMEOUT_S)
