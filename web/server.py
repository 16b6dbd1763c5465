"""``CadenceServer``: the browser demo and the telephony endpoints on one port — the page
(``/``, ``/static/…``), WebRTC signaling on the ``/ws`` websocket, Twilio Media Streams on
``telephony.twilio_path`` (``/twilio``), ``/healthz``, ``/readyz`` and ``/metrics`` — and
Asterisk AudioSocket on a TCP port of its own, when configured.

The server only routes: each websocket goes to the transport that declared its path
(``WEBSOCKET_TRANSPORTS``, ``web/transports/entry.py``), which admits its calls through the
server's ``Admission`` (``web/transports/admission.py``) — the only part of the server a
transport is handed. The models are loaded once, before the port opens, and shared by every
session; a missing checkpoint fails the start, not the first caller. Past
``server.max_sessions`` calls, of every transport together, newcomers are refused (an
``error`` event ``busy`` for a page, and close code 1013), rather than degrading every call
on the machine. Each websocket's request is checked before its handshake (tokens, Twilio's
signature, the page's origin: ``web/access.py``), and each connection's messages are
rate-limited (``web/rate_limit.py``).

``serve_until_stopped`` is the life of a server process: SIGTERM drains it (``/readyz``
answers 503, newcomers are refused as ``draining``, the calls in progress may finish for
``server.drain_timeout_s``), SIGINT — or a second signal — closes it at once. With
``server.workers`` above one, each worker process runs one of these on the same port
(``web/workers.py``); the kernel spreads the connections among their listening sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from urllib.parse import urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from cadence.pipeline.agent import Agent
from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.config.server import audiosocket_address
from cadence.pipeline.events import EventHandler
from cadence.pipeline.tools import Tool
from cadence.web.access import AccessPolicy, Secrets, without_credentials
from cadence.web.ice import ICEServers
from cadence.web.metrics import ServerMetrics
from cadence.web.request_body import BodyReadingConnection
from cadence.web.routes import Routes
from cadence.web.signaling import MAX_MESSAGE_BYTES
from cadence.web.transports import twilio, webrtc
from cadence.web.transports.admission import Admission
from cadence.web.transports.audiosocket import AudioSocketListener
from cadence.web.transports.call import CLOSE_TIMEOUT_S, Call, CallContext
from cadence.web.transports.entry import WebsocketEntry

logger = logging.getLogger(__name__)

METRICS_SAMPLE_S = 1.0
"""How often a worker writes the gauges it reads (``urgent_jobs``) for the shared figures."""

WEBSOCKET_TRANSPORTS: tuple[WebsocketEntry, ...] = (webrtc.ENTRY, twilio.ENTRY)
"""The websocket transports the server routes to. Should two declare one path, the later
one has it."""


class CadenceServer:
    def __init__(
        self,
        config: CadenceConfig,
        *,
        tools: Sequence[Tool] = (),
        on_event: EventHandler | None = None,
    ) -> None:
        """``tools`` are the agent's (each call offers those its configuration enables);
        ``on_event`` gets every event of every call, with the call's id. Raises
        ``AccessConfigError`` if a secret the configuration names (a token, TURN credentials) is
        not in the environment."""
        self.config = config
        self.agent = Agent(config, tools)
        self.metrics = ServerMetrics()
        self.admission = Admission(
            CallContext(self.agent, self.metrics, on_event, ICEServers.from_environment(config))
        )
        self._websockets = {entry.path(config): entry for entry in WEBSOCKET_TRANSPORTS}
        self._routes = Routes(
            websockets={path: entry.check for path, entry in self._websockets.items()},
            http={
                route_path: route
                for path, entry in self._websockets.items()
                for route_path, route in entry.routes(path).items()
            },
            access=AccessPolicy(config, Secrets.from_environment(config)),
            metrics=self.metrics,
            health=self._health,
            readiness=self._readiness,
            page=config.server.page.model_dump(),
        )
        self._server: Server | None = None
        self._audiosocket: AudioSocketListener | None = None
        self._sampler: asyncio.Task[None] | None = None

    @property
    def calls(self) -> Mapping[str, Call]:
        """The calls in progress, by id."""
        return self.admission.calls

    async def start(self) -> None:
        """Load the models, then open the port (and the AudioSocket one, if configured)."""
        await self.agent.load()
        settings = self.config.server
        # Workers share the port: the kernel hands each connection to one of their sockets.
        shared_port = settings.workers > 1
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
            reuse_port=shared_port,
            # Lifts a POST's small form body (Twilio's webhook) before websockets parses the
            # head; every other connection, each call's, passes through untouched.
            create_connection=BodyReadingConnection,
        )
        if self.metrics.shared:
            self._sampler = asyncio.create_task(self._sample_metrics(), name="server:metrics")
        if (audiosocket := self.config.telephony.audiosocket) is not None:
            host, port = audiosocket_address(audiosocket)
            self._audiosocket = AudioSocketListener(
                self.admission, host, port, reuse_port=shared_port
            )
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

    async def drain(self, timeout_s: float) -> int:
        """Take no new call (``/readyz`` answers 503, newcomers are refused as ``draining``)
        and wait for the calls in progress to end, ``timeout_s`` at most; returns how many are
        left, which ``close`` ends. The ports stay open meanwhile: a caller that still reaches
        this server is told to try again, rather than finding nothing there."""
        return await self.admission.drain(timeout_s)

    async def close(self) -> None:
        """Close every call (the pages get close code 1001, Asterisk a hang-up) and the ports."""
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
            self._sampler = None
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
        """Liveness: the process answers. Its figures are this worker's."""
        return {
            "status": "ok",
            "sessions": len(self.calls),
            "max_sessions": self.config.server.max_sessions,
            "draining": self.admission.draining,
            "pid": os.getpid(),
        }

    def _readiness(self) -> tuple[bool, dict[str, object]]:
        """Readiness: whether this worker takes a new call now, and if not, why."""
        unavailable = self.admission.unavailable
        body: dict[str, object] = {
            "ready": unavailable is None,
            "reason": None if unavailable is None else unavailable.value,
            "sessions": len(self.calls),
            "max_sessions": self.config.server.max_sessions,
        }
        return unavailable is None, body

    async def _sample_metrics(self) -> None:
        while True:
            self.metrics.sample()
            await asyncio.sleep(METRICS_SAMPLE_S)

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        peer = connection.remote_address
        body = connection.body if isinstance(connection, BodyReadingConnection) else b""
        return self._routes.respond(
            request, peer=f"{peer[0]}:{peer[1]}" if peer else "?", body=body
        )

    async def _handle(self, websocket: ServerConnection) -> None:
        assert websocket.request is not None  # set once the handshake is done
        # Only a declared path gets through `Routes` to a handshake.
        entry = self._websockets[urlsplit(websocket.request.path).path]
        await entry.accept(websocket, self.admission)


async def serve_until_stopped(
    config: CadenceConfig, on_ready: Callable[[str], None], tools: Sequence[Tool] = ()
) -> None:
    """Run the server (with the agent's ``tools``) until a signal: SIGTERM drains it first
    (``CadenceServer.drain``, ``server.drain_timeout_s`` at most), SIGINT closes it at once,
    and so does any signal during the drain. ``on_ready`` gets its URL once it listens."""
    signals = _StopSignals()
    try:
        async with CadenceServer(config, tools=tools) as server:
            on_ready(server.url)
            received = await signals.next()
            if received == signal.SIGTERM:
                drain = asyncio.create_task(server.drain(config.server.drain_timeout_s))
                interrupt = asyncio.create_task(signals.next())
                await asyncio.wait((drain, interrupt), return_when=asyncio.FIRST_COMPLETED)
                for task in (drain, interrupt):
                    task.cancel()
                await asyncio.gather(drain, interrupt, return_exceptions=True)
            logger.info("closing: %d calls in progress", len(server.calls))
    finally:
        signals.close()


class _StopSignals:
    """SIGINT and SIGTERM as they arrive, on the running loop."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._received: asyncio.Queue[signal.Signals] = asyncio.Queue()
        for signum in self.SIGNALS:
            self._loop.add_signal_handler(signum, self._received.put_nowait, signum)

    async def next(self) -> signal.Signals:
        received = await self._received.get()
        logger.info("received %s", received.name)
        return received

    def close(self) -> None:
        for signum in self.SIGNALS:
            self._loop.remove_signal_handler(signum)
