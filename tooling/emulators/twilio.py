"""``TwilioEmulator``: Twilio's side of a bidirectional Media Stream, played against a Cadence
server — the caller of the telephony tests and of ``cadence bench --transport twilio``.

It does what Twilio does on a call: sends ``connected`` and ``start``, then the caller's
audio as μ-law ``media`` in 20 ms chunks at the pace of speech (silence included: a phone
line is never quiet by absence), and ``stop`` on hanging up. The reply's ``media`` is
buffered and played out in real time; a ``mark`` is echoed once the audio before it has
played, and a ``clear`` drops the buffered audio and echoes the marks still pending — which
is what makes barge-in truncation testable without a phone.

Times are milliseconds on the emulator's own monotonic clock (``now_ms``).

Before the stream, Twilio fetches the number's voice webhook: ``fetch_twiml`` does it as
Twilio does by default — a form-encoded ``POST`` of the call's details, signed with the
account's auth token — and reads the ``<Stream>`` the TwiML names.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import urllib.parse
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from cadence.tooling.emulators.hearing import PlayedAudio, audible_at_ms
from cadence.voice.audio import PCM16, resample, ulaw_decode, ulaw_encode
from cadence.web.access import SIGNATURE_HEADER, twilio_signature
from cadence.web.serializers.twilio import (
    SAMPLE_RATE,
    TELEPHONE_FORMAT,
    ClearMessage,
    ConnectedMessage,
    Mark,
    MarkMessage,
    Media,
    MediaMessage,
    StartMessage,
    StopMessage,
    StreamStart,
    TwilioMessage,
    encode,
    media_message,
    parse_message,
)

CHUNK = SAMPLE_RATE // 50
"""Samples per media message: 20 ms, as Twilio sends them."""


@dataclass(frozen=True)
class TwiMLStream:
    """What a TwiML ``<Connect><Stream>`` tells Twilio: where to stream, with what."""

    url: str
    parameters: dict[str, str]


def call_details(call_sid: str, caller: str = "+14155550100") -> dict[str, str]:
    """The parameters Twilio's voice webhook sends for an incoming call (Twilio's "TwiML
    Voice: Your Response" request parameters), blank ones included."""
    return {
        "AccountSid": "AC" + "0" * 32,
        "ApiVersion": "2010-04-01",
        "CallSid": call_sid,
        "CallStatus": "ringing",
        "Called": "+14155550199",
        "CalledCity": "",
        "Caller": caller,
        "CallerCity": "SAN FRANCISCO",
        "Direction": "inbound",
        "From": caller,
        "To": "+14155550199",
    }


def fetch_twiml(
    url: str,
    *,
    auth_token: str | None,
    params: dict[str, str],
    signed_url: str | None = None,
    timeout_s: float = 10.0,
) -> TwiMLStream:
    """POST ``params`` form-encoded to the webhook ``url``, as Twilio does, with
    ``X-Twilio-Signature`` when ``auth_token`` is given: over ``signed_url`` (the URL Twilio
    was configured with, ``https://…``; ``url`` if not given) and the parameters. Returns the
    stream the TwiML names; raises ``urllib.error.HTTPError`` if refused. Blocking (run it in
    a thread)."""
    body = urllib.parse.urlencode(params).encode()
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if auth_token is not None:
        signed = {name: [value] for name, value in params.items()}
        headers[SIGNATURE_HEADER] = twilio_signature(auth_token, signed_url or url, signed)
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        document = answer.read().decode()
    stream = ET.fromstring(document).find("./Connect/Stream")
    if stream is None:
        raise ValueError(f"no <Connect><Stream> in the TwiML: {document!r}")
    parameters = {p.attrib["name"]: p.attrib["value"] for p in stream.findall("Parameter")}
    return TwiMLStream(stream.attrib["url"], parameters)


@dataclass
class _Playout:
    """Reply audio and marks waiting to be played, in order."""

    items: deque[PCM16 | str] = field(default_factory=deque)
    ready: asyncio.Event = field(default_factory=asyncio.Event)


class TwilioEmulator:
    def __init__(
        self,
        url: str,
        *,
        stream_sid: str | None = None,
        custom_parameters: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """``headers`` go with the websocket's handshake: a token's ``Authorization``, or the
        ``X-Twilio-Signature`` Twilio signs it with (see ``cadence.web.access``)."""
        self.url = url
        self.headers = headers or {}
        self.stream_sid = stream_sid or f"MZ{uuid.uuid4().hex}"
        self.custom_parameters = custom_parameters or {}
        self.played: list[PlayedAudio] = []
        self._heard_at: list[float] = []
        """The audible windows of ``played``, judged once each, as it plays."""
        self.arrivals: list[float] = []
        """When each ``media`` message of the reply arrived."""
        self.marks_received: list[str] = []
        self.echoed_marks: list[str] = []
        """Marks echoed because their audio played (not those flushed by a ``clear``)."""
        self.flushed_marks: list[str] = []
        self.clears: list[float] = []
        self.unexpected: list[str] = []
        """What the server sent that Twilio would not accept."""
        self.close_code: int | None = None
        self.close_reason = ""
        self._origin = time.perf_counter()
        self._start_ms = 0.0
        self._sent_ms = 0.0
        self._sequence = itertools.count(1)
        self._chunks = itertools.count(1)
        self._playout = _Playout()
        self._ws: ClientConnection | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def now_ms(self) -> float:
        return (time.perf_counter() - self._origin) * 1000.0

    @property
    def position_ms(self) -> float:
        """When the next chunk of caller audio starts, on this clock."""
        return self._start_ms + self._sent_ms

    # --- the call --------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._ws = await connect(self.url, additional_headers=self.headers)
        await self._send(ConnectedMessage())
        start = StreamStart(
            stream_sid=self.stream_sid,
            account_sid="AC" + "0" * 32,
            call_sid="CA" + uuid.uuid4().hex,
            tracks=["inbound"],
            custom_parameters=self.custom_parameters,
            media_format=TELEPHONE_FORMAT,
        )
        await self._send(StartMessage(stream_sid=self.stream_sid, start=start))
        self._start_ms = self.now_ms()
        self._tasks = [
            asyncio.create_task(self._receive(), name=f"{self.stream_sid}:receive"),
            asyncio.create_task(self._play(), name=f"{self.stream_sid}:play"),
        ]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.hang_up()

    async def say(self, pcm: PCM16, sample_rate: int) -> None:
        """Send ``pcm`` as the caller's voice, each 20 ms chunk when its time has come."""
        audio = pcm if sample_rate == SAMPLE_RATE else resample(pcm, sample_rate, SAMPLE_RATE)
        for start in range(0, len(audio), CHUNK):
            chunk = audio[start : start + CHUNK]
            await asyncio.sleep(max(0.0, self.position_ms - self.now_ms()) / 1000.0)
            message = media_message(self.stream_sid, ulaw_encode(chunk).tobytes())
            media = message.media.model_copy(
                update={
                    "track": "inbound",
                    "chunk": str(next(self._chunks)),
                    "timestamp": str(round(self._sent_ms)),
                }
            )
            await self._send(message.model_copy(update={"media": media}))
            self._sent_ms += 1000.0 * len(chunk) / SAMPLE_RATE

    async def pause(self, ms: float) -> None:
        await self.say(np.zeros(round(SAMPLE_RATE * ms / 1000), np.int16), SAMPLE_RATE)

    async def hang_up(self) -> None:
        """Send ``stop`` and close, as Twilio does when the caller hangs up."""
        if self._ws is not None:
            try:
                await self._send(StopMessage(stream_sid=self.stream_sid))
                await self._ws.close()
            except ConnectionClosed:
                pass
            self._record_close()
        await self._stop()

    # --- what was heard --------------------------------------------------------------------

    def heard(self) -> PCM16:
        chunks = [p.pcm for p in self.played]
        return np.concatenate(chunks) if chunks else np.zeros(0, np.int16)

    def heard_at_ms(self) -> list[float]:
        """When each audible window of the reply audio began to play (``hearing``'s rule)."""
        return list(self._heard_at)

    @property
    def first_heard_ms(self) -> float | None:
        """When the caller first heard the reply; ``None`` if nothing audible has played."""
        return next(iter(self.heard_at_ms()), None)

    # --- inside -----------------------------------------------------------------------------

    async def _stop(self) -> None:
        """Stop receiving and playing; the connection is closed or dropped already."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _send(self, message: TwilioMessage) -> None:
        assert self._ws is not None
        if isinstance(message, ConnectedMessage | ClearMessage):
            await self._ws.send(encode(message))
            return
        numbered = message.model_copy(update={"sequence_number": str(next(self._sequence))})
        await self._ws.send(encode(numbered))

    async def _receive(self) -> None:
        assert self._ws is not None
        playout = self._playout
        try:
            async for raw in self._ws:
                match parse_message(raw):
                    case MediaMessage(media=Media() as media):
                        self.arrivals.append(self.now_ms())
                        playout.items.append(ulaw_decode(media.audio()))
                        playout.ready.set()
                    case MarkMessage(mark=Mark(name=name)):
                        self.marks_received.append(name)
                        playout.items.append(name)
                        playout.ready.set()
                    case ClearMessage():
                        self.clears.append(self.now_ms())
                        pending = [item for item in playout.items if isinstance(item, str)]
                        playout.items.clear()
                        for name in pending:
                            self.flushed_marks.append(name)
                            await self._echo(name)
                    case other:
                        self.unexpected.append(other.event)
        except ConnectionClosed:
            pass

    async def _play(self) -> None:
        playout = self._playout
        play_until = 0.0
        while True:
            if not playout.items:
                playout.ready.clear()
                await playout.ready.wait()
                continue
            # Whatever comes next waits for the audio before it to finish playing; a `clear`
            # meanwhile takes it away unplayed.
            await asyncio.sleep(max(0.0, play_until - self.now_ms()) / 1000.0)
            if not playout.items:
                continue
            item = playout.items.popleft()
            if isinstance(item, str):
                self.echoed_marks.append(item)
                await self._echo(item)
                continue
            start = self.now_ms()
            chunk = PlayedAudio(start, item, SAMPLE_RATE)
            self.played.append(chunk)
            self._heard_at += audible_at_ms([chunk])
            play_until = start + 1000.0 * len(item) / SAMPLE_RATE

    async def _echo(self, name: str) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self._send(MarkMessage(stream_sid=self.stream_sid, mark=Mark(name=name)))

    def _record_close(self) -> None:
        if self._ws is not None and self._ws.close_code is not None:
            self.close_code = self._ws.close_code
            self.close_reason = self._ws.close_reason or ""
