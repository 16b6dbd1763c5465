"""Twilio Media Streams: a phone call bridged over a websocket (bidirectional
``<Connect><Stream>``), as one voice session.

``accept`` serves each connection to ``telephony.twilio_path``: ``receive_start`` reads the
stream's opening (``connected``, then ``start``), then a ``TwilioCall`` named after the stream
is admitted — unless the server is full, or that stream is connected already — and serves it
to the ``stop``:

* ``media`` — μ-law 8 kHz caller audio, fed to the session;
* ``dtmf`` — a key press, handed to the session (a ``DTMFEvent`` comes out of it);
* ``mark`` — Twilio echoing one of our marks: the audio before it was played.

Reply audio goes out as one ``media`` message per 20 ms frame, paced in real time by the
playout stage, each followed by a ``mark``. The echoed marks, not what was sent, tell the
playback ledger what the caller heard; on barge-in a ``clear`` flushes Twilio's buffer, and
the agent's turn in the history is cut to the marks echoed by then. Twilio echoes the marks
it flushed as well; those no longer count.

When the agent hangs up (``end_call``, once the goodbye's last mark came back), the server
closes the websocket normally (1000) after what is queued; Twilio then moves past the
``<Connect>`` of the TwiML, and as ``twiml`` puts nothing after it, the call ends.

Bad input never ends other calls and rarely this one (``docs/telephony.md`` has the table):
a message that cannot be understood, or that comes out of order, is logged and ignored; a
stream that cannot work (no ``streamSid``, a media format other than μ-law 8 kHz mono) is
closed with the reason, and so is one that keeps sending garbage, or more messages than its
rate allows.

Twilio is pointed at the stream by TwiML, which ``twiml.py`` serves on
``<twilio_path>/twiml``, behind Twilio's request signature when its auth token is configured
(``web/access.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request

from cadence.pipeline.config import CadenceConfig, UnknownOverlayError
from cadence.pipeline.frames import AudioOutFrame
from cadence.pipeline.pipeline import PipelineClosedError
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.voice.audio import ulaw_decode, ulaw_encode
from cadence.web.access import AccessPolicy, Refusal
from cadence.web.metrics import ErrorKind, ServerMetrics
from cadence.web.rate_limit import MessageRate
from cadence.web.serializers.twilio import (
    SAMPLE_RATE,
    ClearMessage,
    ConnectedMessage,
    DTMFMessage,
    MarkMessage,
    MediaMessage,
    StartMessage,
    StopMessage,
    TwilioMessage,
    TwilioMessageError,
    encode,
    media_message,
    parse_message,
)
from cadence.web.serializers.twilio import Mark as MarkBody
from cadence.web.signaling import CloseCode
from cadence.web.transports.admission import Admission, Unavailable
from cadence.web.transports.call import CallContext, WebsocketCall
from cadence.web.transports.entry import WebsocketEntry
from cadence.web.transports.twiml import twiml_routes

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 10.0
"""Twilio sends ``start`` right after connecting; a peer that does not is not Twilio."""

MAX_BAD_MESSAGES = 50
"""Bad messages a stream may send before it is closed: a glitch is forgiven, a flood is not."""

MAX_QUEUED_MESSAGES = 500
"""Messages waiting for a Twilio that is not reading (5 s of reply audio with its marks);
past this the call is ended rather than buffering without limit."""

STREAM_SID = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What a stream id may look like (Twilio's are ``MZ`` and 32 hex digits); it names the call
in logs and traces, so nothing else is let through."""


class TwilioCallError(Exception):
    """The stream cannot go on; it is closed with ``code`` and ``reason``."""

    def __init__(self, code: CloseCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class _BadMessages:
    """Counts a stream's bad messages, logs each with its reason, and ends a flood."""

    def __init__(self, name: str, metrics: ServerMetrics) -> None:
        self._name = name
        self._metrics = metrics
        self.count = 0

    def ignore(self, reason: str) -> None:
        self.count += 1
        self._metrics.errors.labels(ErrorKind.TELEPHONY.value).inc()
        logger.warning("%s: ignored a message: %s", self._name, reason)
        if self.count >= MAX_BAD_MESSAGES:
            raise TwilioCallError(
                CloseCode.POLICY_VIOLATION, f"{self.count} bad messages; closing the stream"
            )


def _within(rate: MessageRate) -> None:
    """Count one message against the stream's ``rate``; a stream over it is closed."""
    if not rate.allow():
        raise TwilioCallError(CloseCode.POLICY_VIOLATION, f"over {rate}")


async def receive_start(
    websocket: ServerConnection, name: str, metrics: ServerMetrics, rate: MessageRate
) -> StartMessage | None:
    """Read the stream's opening up to its ``start`` (``None`` if the peer left before it);
    raises ``TwilioCallError`` if the stream cannot be served. ``rate`` limits the stream's
    messages, from here to its end."""
    bad = _BadMessages(name, metrics)
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            async for raw in websocket:
                _within(rate)
                try:
                    message = parse_message(raw)
                except TwilioMessageError as exc:
                    bad.ignore(str(exc))
                    continue
                match message:
                    case StartMessage():
                        _check_start(message)
                        return message
                    case ConnectedMessage():
                        pass
                    case StopMessage():
                        raise TwilioCallError(CloseCode.NORMAL, "stopped before it started")
                    case _:
                        bad.ignore(f"{message.event} before start")
    except TimeoutError:
        raise TwilioCallError(
            CloseCode.POLICY_VIOLATION, f"no start within {START_TIMEOUT_S:g} s"
        ) from None
    return None


def stream_call_id(start: StartMessage) -> str:
    """The name of the call ``start`` opens: in logs, traces and the server's calls."""
    return f"twilio-{start.sid or ''}"


def _check_start(start: StartMessage) -> None:
    sid = start.sid
    if not sid:
        raise TwilioCallError(CloseCode.POLICY_VIOLATION, "start without a streamSid")
    if not STREAM_SID.fullmatch(sid):
        raise TwilioCallError(CloseCode.POLICY_VIOLATION, "streamSid is not an id")
    media = start.start.media_format
    if not media.supported:
        raise TwilioCallError(
            CloseCode.UNSUPPORTED_DATA,
            f"media format {media.encoding} {media.sample_rate} Hz × {media.channels} is not "
            "supported (audio/x-mulaw 8000 Hz mono is)",
        )


class TwilioAudioOutput:
    """Reply audio as ``media`` + ``mark`` pairs; learns from the echoed marks what was played.

    A ``PlaybackConfirmingOutput``: the ledger hears of audio when its mark comes back, and of
    a reply's end when the mark sent after its last audio does."""

    def __init__(self, stream_sid: str, post: Callable[[TwilioMessage], None]) -> None:
        self._sid = stream_sid
        self._post = post
        self._ledger = PlaybackLedger()
        self._pending: dict[str, tuple[int, float | None]] = {}
        """Marks sent and not echoed yet: the reply and the audio (ms) each stands for, or
        ``None`` for the mark after a reply's last audio."""
        self._marks = 0

    def attach(self, ledger: PlaybackLedger) -> None:
        self._ledger = ledger

    async def send(self, frame: AudioOutFrame) -> None:
        if frame.sample_rate != SAMPLE_RATE:
            raise ValueError(f"Twilio plays {SAMPLE_RATE} Hz audio, not {frame.sample_rate} Hz")
        self._post(media_message(self._sid, ulaw_encode(frame.pcm).tobytes()))
        self._mark(frame.reply_index, frame.duration_ms)

    async def end_of_reply(self, reply_index: int) -> None:
        self._mark(reply_index, None)

    async def clear(self) -> None:
        self._pending.clear()  # Twilio echoes the flushed marks too; they were not played
        self._post(ClearMessage(stream_sid=self._sid))

    def echoed(self, name: str) -> bool:
        """Twilio played the audio up to mark ``name``; ``False`` if it is not one of ours
        (or was flushed)."""
        entry = self._pending.pop(name, None)
        if entry is None:
            return False
        reply_index, played_ms = entry
        if played_ms is None:
            self._ledger.finish(reply_index)
        else:
            self._ledger.played(reply_index, played_ms)
        return True

    def _mark(self, reply_index: int, played_ms: float | None) -> None:
        self._marks += 1
        name = f"{reply_index}.{self._marks}"
        self._pending[name] = (reply_index, played_ms)
        self._post(MarkMessage(stream_sid=self._sid, mark=MarkBody(name=name)))


class TwilioCall(WebsocketCall):
    """One Media Stream from its ``start`` to its ``stop`` (or a dropped connection)."""

    end_reason = "stream ended"
    peer_left = "Twilio hung up without a stop"

    def __init__(
        self,
        websocket: ServerConnection,
        context: CallContext,
        start: StartMessage,
        *,
        rate: MessageRate,
    ) -> None:
        """``rate``: the limit of the stream's messages, which ``receive_start`` began to count."""
        call_id = stream_call_id(start)
        super().__init__(websocket, context, call_id=call_id, max_queued=MAX_QUEUED_MESSAGES)
        self.stream_sid = start.sid or ""
        self._start = start
        self._rate = rate
        self._output = TwilioAudioOutput(self.stream_sid, self._post)
        self._bad = _BadMessages(call_id, context.metrics)

    async def _converse(self) -> None:
        try:
            await self._open()
            await self._read_stream()
        except TwilioCallError as exc:
            self._log.warning("%s: closing the stream: %s", self.call_id, exc.reason)
            self._count(ErrorKind.TELEPHONY)
            self._outbox.close(exc.code, exc.reason)

    async def _open(self) -> None:
        start = self._start.start
        overlay = start.custom_parameters.get("overlay")
        self._log.info(
            "%s: call %s, parameters %s", self.call_id, start.call_sid, start.custom_parameters
        )
        if overlay is not None and overlay not in self._agent.config.overlays:
            self._log.warning(
                "%s: %s; the call goes on with the base configuration",
                self.call_id,
                UnknownOverlayError(f"no overlay named {overlay!r}"),
            )
            overlay = None
        await self._open_session(self._output, SAMPLE_RATE, overlay=overlay)

    async def _read_stream(self) -> None:
        """Read the stream to its ``stop``, or to its close (Twilio's, or ours: ``hang_up``)."""
        async for raw in self._ws:
            _within(self._rate)
            try:
                message = parse_message(raw)
            except TwilioMessageError as exc:
                self._bad.ignore(str(exc))
                continue
            if isinstance(message, StopMessage):
                self._log.info("%s: stream stopped", self.call_id)
                return
            try:
                await self._handle(message)
            except TwilioMessageError as exc:
                self._bad.ignore(str(exc))

    async def _handle(self, message: TwilioMessage) -> None:
        if isinstance(message, ConnectedMessage | StartMessage | ClearMessage):
            raise TwilioMessageError(f"unexpected {message.event} during the stream")
        if message.stream_sid is not None and message.stream_sid != self.stream_sid:
            raise TwilioMessageError(f"{message.event} for another stream")
        session = self.session
        assert session is not None  # opened before the first message is read
        try:
            match message:
                case MediaMessage() if message.media.track in (None, "inbound"):
                    await session.feed(ulaw_decode(message.media.audio()), SAMPLE_RATE)
                case MediaMessage():
                    raise TwilioMessageError(f"media of track {message.media.track!r}")
                case DTMFMessage():
                    try:
                        await session.dtmf(message.dtmf.digit)
                    except ValueError as exc:
                        raise TwilioMessageError(str(exc)) from None
                case MarkMessage() if not self._output.echoed(message.mark.name):
                    self._log.debug("%s: mark %r was flushed", self.call_id, message.mark.name)
        except PipelineClosedError:
            pass  # the session failed; _fail is ending the call

    def _post(self, message: TwilioMessage) -> None:
        if not self._outbox.post(encode(message)) and not self._outbox.closing:
            self._count(ErrorKind.TELEPHONY)
            self._log.warning("%s: Twilio is not reading; ending the call", self.call_id)
            self._outbox.close(CloseCode.POLICY_VIOLATION, "not reading")

    async def _stop_reading(self) -> None:
        """Nothing to stop: ``_converse`` read the stream, and it has returned."""

    def _fail(self, kind: ErrorKind) -> None:
        self._count(kind)
        reason = "session failed" if kind is ErrorKind.SESSION_FAILED else "internal server error"
        self._outbox.close(CloseCode.INTERNAL_ERROR, reason)


# --- admission --------------------------------------------------------------------------------


async def accept(websocket: ServerConnection, admission: Admission) -> None:
    """Serve one connection to the Media Stream path: read its opening, then admit its call
    and run it to its end — or close it with the reason: the server is full or draining (1013
    ``busy`` or ``draining``, checked before and after the opening, as calls may be admitted
    meanwhile), that stream is connected already, or the opening itself was bad
    (``receive_start``)."""
    name = f"twilio@{websocket.remote_address}"
    rate = MessageRate(admission.context.agent.config.telephony.twilio_max_messages_per_s)
    try:
        if (unavailable := admission.unavailable) is not None:
            raise TwilioCallError(CloseCode.TRY_AGAIN_LATER, unavailable.value)
        start = await receive_start(websocket, name, admission.metrics, rate)
        if start is None:
            return
        # The calls admitted meanwhile may have taken the last place, or a drain begun.
        if (unavailable := admission.unavailable) is not None:
            raise TwilioCallError(CloseCode.TRY_AGAIN_LATER, unavailable.value)
        if stream_call_id(start) in admission.calls:
            raise TwilioCallError(CloseCode.POLICY_VIOLATION, "that stream is connected already")
    except TwilioCallError as exc:
        kind = ErrorKind.REFUSED if exc.reason in set(Unavailable) else ErrorKind.TELEPHONY
        admission.metrics.errors.labels(kind.value).inc()
        logger.warning("%s: closing the stream: %s", name, exc.reason)
        with contextlib.suppress(ConnectionClosed):
            await websocket.close(exc.code, exc.reason)
        return
    except ConnectionClosed:
        return
    await admission.run_call(TwilioCall(websocket, admission.context, start, rate=rate))


# --- what the server routes -------------------------------------------------------------------


def _stream_path(config: CadenceConfig) -> str:
    return config.telephony.twilio_path


def _check(access: AccessPolicy, request: Request) -> Refusal | None:
    """Twilio's request signature when its auth token is configured (or the server's token),
    else the server's token, if one is configured; and no page of another origin."""
    return access.websocket(request, twilio=True)


ENTRY = WebsocketEntry(path=_stream_path, check=_check, accept=accept, routes=twiml_routes)
"""The Media Stream websocket and its TwiML webhook, as the server routes them."""
