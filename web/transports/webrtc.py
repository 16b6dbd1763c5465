"""The browser demo over WebRTC: one visitor of the page, from the signaling websocket's
opening (``/ws``) to its close, as one voice session.

``accept`` admits each visitor as a ``WebRTCCall`` (or, past the session limit, sends a
``busy`` error instead of ``hello``). The call speaks the page's signaling protocol
(``web/signaling.py``): ``hello``, the browser's ``offer``, our ``answer``; then events for
the page until the visitor's ``hangup`` or the socket closes — or until the agent hangs up:
then the page gets a ``hangup`` of ours, the socket closes normally (1000) and the peer
connection is closed. Its media is a ``WebRTCPeer``: the browser offers one audio stream
(send and receive); the answer attaches a :class:`PacedAudioTrack` to it. Every frame the
browser sends is decoded by aiortc (Opus, 48 kHz, usually stereo), mixed down to mono 16-bit
and fed to the session as it is; the session resamples. The STUN and TURN servers of
``server.ice_servers`` (none by default) go to both peers: to aiortc's, and in ``hello`` to
the page's, with the credentials minted for this call (``web/ice.py``); without them the demo
serves only visitors that can reach this machine's own addresses.

Events for the page are queued and written by one task (``WebsocketCall``), so that the
pipeline never waits on a slow browser and the events reach the page in the order they
happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request

from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.events import SessionEvent
from cadence.pipeline.pipeline import PipelineClosedError
from cadence.pipeline.tracing import STAGE_LATENCIES
from cadence.voice.audio import PCM16
from cadence.web.access import AccessPolicy, Refusal
from cadence.web.metrics import ErrorKind, ServerMetrics
from cadence.web.page_events import Event, page_event
from cadence.web.rate_limit import MessageRate
from cadence.web.signaling import (
    ClientMessage,
    CloseCode,
    Hangup,
    Offer,
    SignalingError,
    parse_client_message,
)
from cadence.web.transports.admission import Admission, Unavailable
from cadence.web.transports.audio_track import PacedAudioTrack
from cadence.web.transports.call import CallContext, WebsocketCall
from cadence.web.transports.entry import WebsocketEntry

logger = logging.getLogger(__name__)

SIGNALING_PATH = "/ws"

OUTPUT_SAMPLE_RATE = 48000
"""The rate of the agent's voice on the track: Opus's own, so aiortc never resamples it."""

OFFER_TIMEOUT_S = 30.0
"""A visitor who connects and sends no offer gives their place back after this long."""

MAX_QUEUED_EVENTS = 1000
"""Events waiting for a page that does not read them; past this, new ones are dropped."""

AudioHandler = Callable[[PCM16, int], Awaitable[None]]
"""Receives each chunk of the caller's audio: mono PCM16 and its sample rate."""


def error_event(code: str, message: str) -> Event:
    return {"type": "error", "code": code, "message": message}


# --- the peer connection ----------------------------------------------------------------------


class WebRTCPeer:
    """One visitor's peer connection — their microphone in, the agent's voice out."""

    def __init__(
        self,
        *,
        name: str,
        on_audio: AudioHandler,
        on_lost: Callable[[], None],
        configuration: RTCConfiguration | None = None,
    ) -> None:
        """``configuration``: the ICE servers and policy (``ICEServers.rtc_configuration``);
        ``None``: no ICE server (never aiortc's default one)."""
        self.name = name
        self.pc = RTCPeerConnection(configuration or RTCConfiguration(iceServers=[]))
        self.output = PacedAudioTrack(OUTPUT_SAMPLE_RATE)
        self._on_audio = on_audio
        self._on_lost = on_lost
        self._closing = False
        self._inbound: asyncio.Task[None] | None = None
        self.pc.on("track", self._on_track)
        self.pc.on("connectionstatechange", self._on_connection_state)

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The task this peer runs (the inbound audio pump), while it runs."""
        return [t for t in (self._inbound,) if t is not None and not t.done()]

    async def answer(self, offer_sdp: str) -> str:
        """Accept the browser's offer (with its ICE candidates) and return the answer's SDP,
        with ours: ICE gathering finishes before this returns."""
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
        self.pc.addTrack(self.output)
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        return self.pc.localDescription.sdp

    async def close(self) -> None:
        """Stop reading the caller, close the peer connection; every task of it is over."""
        self._closing = True
        if self._inbound is not None:
            self._inbound.cancel()
            await asyncio.gather(self._inbound, return_exceptions=True)
        self.output.stop()
        await self.pc.close()

    def _on_track(self, track: MediaStreamTrack) -> None:
        # The offer was checked to carry exactly one audio stream.
        if track.kind == "audio" and self._inbound is None:
            self._inbound = asyncio.create_task(self._pump(track), name=f"{self.name}:inbound")

    def _on_connection_state(self) -> None:
        state = self.pc.connectionState
        logger.info("%s: WebRTC connection %s", self.name, state)
        # ICE or DTLS failed, or the browser closed its side (DTLS close_notify).
        if state == "failed" or (state == "closed" and not self._closing):
            self._on_lost()

    async def _pump(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return  # the browser stopped sending
            if isinstance(frame, AudioFrame):
                await self._on_audio(mono_pcm16(frame), frame.sample_rate)


def mono_pcm16(frame: AudioFrame) -> PCM16:
    """The frame's samples as one channel of 16-bit PCM (channels averaged)."""
    if frame.format.name not in ("s16", "s16p"):
        raise ValueError(f"expected 16-bit audio from the decoder, got {frame.format.name}")
    channels = len(frame.layout.channels)
    samples = frame.to_ndarray().astype(np.int16, copy=False)
    # Packed audio comes as one row of interleaved samples, planar as one row per channel.
    per_channel = samples if frame.format.is_planar else samples.reshape(-1, channels).T
    if channels == 1:
        return np.ascontiguousarray(per_channel[0])
    mono: PCM16 = per_channel.mean(axis=0).astype(np.int16)
    return mono


# --- the call ---------------------------------------------------------------------------------


class WebRTCCall(WebsocketCall):
    """One visitor of the page: the signaling, the peer connection and the voice session."""

    peer_left = "the visitor left"

    def __init__(self, websocket: ServerConnection, context: CallContext, *, call_id: str) -> None:
        """``context.on_event`` gets each event of the call's session, as the page does."""
        super().__init__(websocket, context, call_id=call_id, max_queued=MAX_QUEUED_EVENTS)
        self._rate = MessageRate(context.agent.config.server.max_messages_per_s)
        self._ice = context.ice
        self._ice_servers = context.ice.for_call()
        self.peer: WebRTCPeer | None = None

    @property
    def tasks(self) -> list[asyncio.Task[Any]]:
        """Every task of this call still running: its own, the peer's, the session's."""
        owned = super().tasks
        if self.peer is not None:
            owned += self.peer.tasks
        return owned

    # --- signaling ----------------------------------------------------------------------------

    async def _converse(self) -> None:
        config = self._agent.config
        self._post(
            {
                "type": "hello",
                "session_id": self.call_id,
                "budget": config.budget.model_dump(),
                "stages": [latency.name for latency in STAGE_LATENCIES],
                **self._ice.page(self._ice_servers),
            }
        )
        try:
            await self._signal()
        except SignalingError as exc:
            self._log.info("%s: %s: %s", self.call_id, exc.code, exc.message)
            self._count(ErrorKind.SIGNALING)
            self._end_page(exc.code, exc.message, exc.close_code)

    async def _signal(self) -> None:
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
        peer = WebRTCPeer(
            name=self.call_id,
            on_audio=self._feed,
            on_lost=self._connection_lost,
            configuration=self._ice.rtc_configuration(self._ice_servers),
        )
        self.peer = peer
        await self._open_session(peer.output, OUTPUT_SAMPLE_RATE)
        try:
            answer = await peer.answer(offer.sdp)
        except Exception as exc:
            # aiortc raises whatever its SDP parser trips on (ValueError, KeyError, …).
            raise SignalingError("bad_offer", f"cannot use the offer: {exc!r}") from exc
        self._post({"type": "answer", "sdp": answer})

    # --- while the call runs ------------------------------------------------------------------

    async def _feed(self, pcm: PCM16, sample_rate: int) -> None:
        if self.session is None:
            return
        # A failed session refuses audio; _fail is ending the call.
        with contextlib.suppress(PipelineClosedError):
            await self.session.feed(pcm, sample_rate)

    def _hand_on(self, event: SessionEvent) -> None:
        if (page := page_event(event)) is not None:
            self._post(page)
        super()._hand_on(event)

    def _connection_lost(self) -> None:
        self._count(ErrorKind.CONNECTION_LOST)
        self._end_page("connection_lost", "the WebRTC connection was lost", CloseCode.GOING_AWAY)

    # --- events to the page -------------------------------------------------------------------

    def _post(self, event: Event) -> None:
        if not self._outbox.post(json.dumps(event)) and not self._outbox.closing:
            self._log.warning("%s: the page is not reading; dropped an event", self.call_id)

    def _end_page(self, code: str, message: str, close_code: CloseCode) -> None:
        """Tell the page why the call ends (an ``error`` event), then close the socket."""
        self._post(error_event(code, message))
        self._outbox.close(close_code, code)

    def _fail(self, kind: ErrorKind) -> None:
        self._count(kind)
        if kind is ErrorKind.SESSION_FAILED:
            message = "the voice session failed; the server log has the details"
            self._end_page("session_failed", message, CloseCode.INTERNAL_ERROR)
        else:
            self._end_page("internal", "internal server error", CloseCode.INTERNAL_ERROR)

    # --- the end ------------------------------------------------------------------------------

    async def _stop_reading(self) -> None:
        # The media first, so that nothing more reaches the session while it ends.
        if self.peer is not None:
            await self.peer.close()

    async def _release(self) -> None:
        await super()._release()
        self.peer = None


# --- admission --------------------------------------------------------------------------------


async def accept(websocket: ServerConnection, admission: Admission) -> None:
    """Serve one visitor of the page: a call of their own, run to its end — or, past the
    session limit or while the server drains, a ``busy`` or ``draining`` error in place of
    ``hello``, and close code 1013."""
    if (unavailable := admission.unavailable) is not None:
        await _refuse(websocket, unavailable, admission.limit, admission.metrics)
        return
    call = WebRTCCall(websocket, admission.context, call_id=f"web-{uuid.uuid4().hex[:8]}")
    await admission.run_call(call)


async def _refuse(
    websocket: ServerConnection, unavailable: Unavailable, limit: int, metrics: ServerMetrics
) -> None:
    metrics.errors.labels(ErrorKind.REFUSED.value).inc()
    if unavailable is Unavailable.BUSY:
        calls = f"{limit} call{'' if limit == 1 else 's'}"
        message = f"The server is full ({calls} at once); please try again later."
    else:
        message = "The server is restarting; please call again in a moment."
    with contextlib.suppress(ConnectionClosed):
        await websocket.send(json.dumps(error_event(unavailable.value, message)))
        await websocket.close(CloseCode.TRY_AGAIN_LATER, unavailable.value)


def _signaling_path(config: CadenceConfig) -> str:
    return SIGNALING_PATH


def _check(access: AccessPolicy, request: Request) -> Refusal | None:
    """The server's token, if one is configured, and pages of an allowed origin only."""
    return access.websocket(request, twilio=False)


ENTRY = WebsocketEntry(path=_signaling_path, check=_check, accept=accept)
"""The signaling websocket, as the server routes it."""
