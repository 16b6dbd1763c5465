"""``CadenceServer``: the browser demo and the Twilio endpoint on one port — the page (``/``,
``/static/…``), WebRTC signaling on the ``/ws`` websocket, Twilio Media Streams on
``telephony.twilio_path`` (``/twilio``), ``/healthz`` and ``/metrics``.

Each visitor of ``/ws`` is one :class:`BrowserCall` with its own peer connection and voice
session; each Media Stream one :class:`TwilioCall`. The models are loaded once, before the
port opens, and shared by every session; a missing checkpoint fails the start, not the first
caller. Past ``server.max_sessions`` calls, of every transport together, newcomers are
refused (an ``error`` event ``busy`` for a page, and close code 1013), rather than degrading
every call on the machine. Each websocket's request is checked before its handshake
(tokens, Twilio's signature, the page's origin: ``web/access.py``), and each connection's
messages are rate-limited (``web/rate_limit.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from pipeline.agent import Agent
from pipeline.config import CadenceConfig
from pipeline.config.schema import audiosocket_address
from pipeline.events import EventHandler
from pipeline.session import VoiceSession
from web.access import AccessPolicy, Secrets, without_credentials
from web.call import CLOSE_TIMEOUT_S, BrowserCall, error_event
from web.metrics import ErrorKind, ServerMetrics
from web.rate_limit import MessageRate
from web.routes import Routes
from web.signaling import MAX_MESSAGE_BYTES, CloseCode
from web.transports.audiosocket import AudioSocketListener
from web.transports.twilio import TwilioCall, TwilioCallError, receive_start, stream_call_id

logger = logging.getLogger(__name__)

SIGNALING_PATH = "/ws"


class Call(Protocol):
    """One caller connected over any transport, from connection to hang-up."""

    call_id: str
    session: VoiceSession | None
    """The call's voice session, once it is open."""

    @property
    def tasks(self) -> list[asyncio.Task[Any]]:
        """Every task of the call still running (none once ``run`` has returned)."""
        ...

    async def run(self) -> None:
        """Serve the caller until the call ends; everything of it is released on return."""
        ...


class CadenceServer:
    def __init__(self, config: CadenceConfig, *, on_event: EventHandler | None = None) -> None:
        """``on_event`` gets every event of every telephony call, with the call's id. Raises
        ``AccessConfigError`` if a secret the configuration names is not in the environment."""
        self.config = config
        self._on_event = on_event
        self.agent = Agent(config)
        self.metrics = ServerMetrics()
        self.calls: dict[str, Call] = {}
        """The calls in progress, by id."""
        self._routes = Routes(
            signaling_path=SIGNALING_PATH,
            twilio_path=config.telephony.twilio_path,
            access=AccessPolicy(config, Secrets.from_environment(config)),
            metrics=self.metrics,
            health=self._health,
        )
        self._server: Server | None = None
        self._audiosocket: AudioSocketListener | None = None

    async def start(self) -> None:
        """Load the models, then open the port (and the AudioSocket one, if configured)."""
        await self.agent.load()
        settings = self.config.server
        self._server = await serve(
            self._handle,
            settings.host,
            settings.port,
            process_request=self._process_request,
            # Over twice the signaling limit: a larger message gets our own `too_large` error
            # up to here, and beyond it websockets closes with 1009 before reading it all.
            max_size=2 * MAX_MESSAGE_BYTES,
            close_timeout=CLOSE_TIMEOUT_S,
            # No permessage-deflate: base64 μ-law and small JSON events barely compress, and
            # a zlib stream pair per connection costs every call CPU and ~300 KB of memory.
            compression=None,
            # At debug level websockets logs each request's line and headers.
            logger=without_credentials(logging.getLogger("websockets.server")),
        )
        if (audiosocket := self.config.telephony.audiosocket) is not None:
            host, port = audiosocket_address(audiosocket)
            self._audiosocket = AudioSocketListener(self, host, port, on_event=self._on_event)
            try:
                await self._audiosocket.start()
            except OSError:
                await self.close()
                raise

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the server is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        host = self.config.server.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}/"

    @property
    def audiosocket_port(self) -> int | None:
        """The TCP port of the AudioSocket listener; ``None`` when it is off."""
        return None if self._audiosocket is None else self._audiosocket.port

    async def close(self) -> None:
        """Close every call (the pages get close code 1001, Asterisk a hang-up) and the ports."""
        if self._audiosocket is not None:
            await self._audiosocket.close()
            self._audiosocket = None
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> CadenceServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def _health(self) -> dict[str, object]:
        return {
            "status": "ok",
            "sessions": len(self.calls),
            "max_sessions": self.config.server.max_sessions,
        }

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        peer = connection.remote_address
        return self._routes.respond(request, peer=f"{peer[0]}:{peer[1]}" if peer else "?")

    @property
    def full(self) -> bool:
        """Whether a newcomer must be refused: ``server.max_sessions`` calls are running."""
        return len(self.calls) >= self.config.server.max_sessions

    async def run_call(self, call: Call) -> None:
        """Run ``call`` to its end, counted among the calls in progress while it runs. Every
        transport's calls go through here, so the session limit covers them all."""
        self.calls[call.call_id] = call
        self.metrics.sessions.set(len(self.calls))
        logger.info(
            "%s: connected (%d of %d sessions)",
            call.call_id,
            len(self.calls),
            self.config.server.max_sessions,
        )
        try:
            await call.run()
        finally:
            del self.calls[call.call_id]
            self.metrics.sessions.set(len(self.calls))
            logger.info("%s: ended", call.call_id)

    async def _handle(self, websocket: ServerConnection) -> None:
        assert websocket.request is not None  # set once the handshake is done
        if urlsplit(websocket.request.path).path == self.config.telephony.twilio_path:
            await self._handle_twilio(websocket)
            return
        if self.full:
            await self._refuse(websocket, self.config.server.max_sessions)
            return
        call_id = f"web-{uuid.uuid4().hex[:8]}"
        await self.run_call(
            BrowserCall(
                websocket,
                self.agent,
                call_id=call_id,
                metrics=self.metrics,
                on_event=self._on_event,
            )
        )

    async def _handle_twilio(self, websocket: ServerConnection) -> None:
        name = f"twilio@{websocket.remote_address}"
        rate = MessageRate(self.config.telephony.twilio_max_messages_per_s)
        try:
            if self.full:
                raise TwilioCallError(CloseCode.TRY_AGAIN_LATER, "busy")
            start = await receive_start(websocket, name, self.metrics, rate)
            if start is None:
                return
            if self.full:  # the calls admitted meanwhile took the last place
                raise TwilioCallError(CloseCode.TRY_AGAIN_LATER, "busy")
            if stream_call_id(start) in self.calls:
                raise TwilioCallError(
                    CloseCode.POLICY_VIOLATION, "that stream is connected already"
                )
        except TwilioCallError as exc:
            kind = ErrorKind.REFUSED if exc.reason == "busy" else ErrorKind.TELEPHONY
            self.metrics.errors.labels(kind.value).inc()
            logger.warning("%s: closing the stream: %s", name, exc.reason)
            with contextlib.suppress(ConnectionClosed):
                await websocket.close(exc.code, exc.reason)
            return
        except ConnectionClosed:
            return
        await self.run_call(
            TwilioCall(
                websocket,
                self.agent,
                start,
                rate=rate,
                metrics=self.metrics,
                on_event=self._on_event,
            )
        )

    async def _refuse(self, websocket: ServerConnection, limit: int) -> None:
        self.metrics.errors.labels(ErrorKind.REFUSED.value).inc()
        calls = f"{limit} call{'' if limit == 1 else 's'}"
        message = f"The server is full ({calls} at once); please try again later."
        with contextlib.suppress(ConnectionClosed):
            await websocket.send(json.dumps(error_event("busy", message)))
            await websocket.close(CloseCode.TRY_AGAIN_LATER, "busy")


async def serve_until_stopped(config: CadenceConfig, on_ready: Callable[[str], None]) -> None:
    """Run the server until SIGINT or SIGTERM; ``on_ready`` gets its URL once it listens."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        async with CadenceServer(config) as server:
            on_ready(server.url)
            await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
