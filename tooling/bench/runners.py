"""The bench's callers over the real endpoints of a real server on loopback: each clip one
call, played by an emulator of the far end — ``cadence bench --transport twilio`` and
``cadence loadtest --transport twilio|webrtc``.

* ``TwilioTurnRunner``: a phone call through ``/twilio`` — μ-law at 8 kHz in 20 ms chunks at
  the pace of speech, the reply played out in real time with its marks echoed. Clips play
  from their 8 kHz file where the manifest has one (``file_8k``), else resampled to 8 kHz as
  a phone line would.
* ``WebRTCTurnRunner``: a browser call through ``/ws`` — an aiortc peer connection (Opus,
  48 kHz) whose microphone plays the clip.

The traces are the server's (its ``on_event`` hook), so every stage is measured on the same
terms as in process; ``user_speech_end`` is the clip's true end of speech, and
``audio_heard_first`` when the emulator heard each reply (``tooling/emulators/hearing.py``),
both carried from the emulator's clock onto the session's. Each call waits for a reply heard
after the true end of speech as every bench's caller does (``listen_for_reply``):
``speak_and_listen``, which ``cadence bench-workers``' calls (``tooling/bench/calls.py``) say
their clips with too.
"""

from __future__ import annotations

import asyncio
import re
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from websockets.exceptions import ConnectionClosed

from cadence.pipeline.config import ServerConfig
from cadence.pipeline.events import SessionEndedEvent, SessionEvent, TraceEvent, TranscriptEvent
from cadence.pipeline.session import VoiceSession
from cadence.pipeline.tracing import CALLER_MEASURED, AnchorEvent, TurnTrace
from cadence.tooling.bench.manifest import ManifestClip
from cadence.tooling.bench.turn_bench import (
    LEAD_MS,
    POLL_MS,
    TAIL_MS,
    Variant,
    bench_config,
    listen_for_reply,
    with_ground_truth,
)
from cadence.tooling.emulators.browser import BrowserEmulator
from cadence.tooling.emulators.twilio import TwilioEmulator
from cadence.voice.audio import PCM16
from cadence.voice.audio.speech_bounds import speech_bounds_ms
from cadence.voice.audio.wavfile import read_audio
from cadence.web.serializers.twilio import SAMPLE_RATE as TELEPHONE_RATE
from cadence.web.server import CadenceServer
from cadence.web.signaling import CloseCode
from cadence.web.transports.webrtc import SIGNALING_PATH

SPEECH_RATE = 16000
QUIET_MS = 1000.0
"""Before speaking again on a call, the caller waits until the agent has been silent this
long."""


class CallRefusedError(RuntimeError):
    """The server turned the call away (close code 1013: it is full)."""


class CallRunner(ABC):
    """What every caller of the bench shares: one server per configuration, started on first
    use and closed with the runner (``async with``), and the events of its calls. ``server``
    sets its admission limit; by default it admits every call (a benchmark measures latency,
    not refusals)."""

    transport = ""

    @abstractmethod
    async def __call__(
        self, clip: ManifestClip, variant: Variant, session_id: str, concurrency: int
    ) -> list[TurnTrace]:
        """Play ``clip`` as one call; its traces (a ``TurnRunner``)."""

    def __init__(self, server: ServerConfig | None = None) -> None:
        self._server_settings = server or ServerConfig(max_sessions=1024)
        self._stack = AsyncExitStack()
        self._servers: dict[str, CadenceServer] = {}
        self._traces: defaultdict[str, list[TurnTrace]] = defaultdict(list)
        self._ended: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._speculative: dict[str, bool] = {}
        """Calls whose transcript came from the speculative decode."""

    async def __aenter__(self) -> Self:
        await self._stack.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._stack.__aexit__(exc_type, exc, traceback)

    async def _measured(
        self,
        call_id: str,
        clip: ManifestClip,
        variant: Variant,
        concurrency: int,
        *,
        true_end_ms: float,
        heard_at_ms: list[float],
    ) -> list[TurnTrace]:
        """The call's traces, once it has ended, with the truth written in (times on the
        session's clock)."""
        await self._ended[call_id].wait()  # its last trace comes as the call is released
        del self._ended[call_id]
        return with_ground_truth(
            self._traces.pop(call_id, []),
            clip,
            variant.name,
            true_end_ms=true_end_ms,
            heard_at_ms=heard_at_ms,
            annotations={
                "concurrency": concurrency,
                "speculative_hit": self._speculative.pop(call_id, None),
                "transport": self.transport,
            },
        )

    @property
    def calls_in_progress(self) -> int:
        return sum(len(server.calls) for server in self._servers.values())

    async def ready(self, variant: Variant) -> None:
        """Start ``variant``'s server now (its models loaded), so that what is measured
        next does not include it."""
        await self._server(variant)

    async def _server(self, variant: Variant) -> CadenceServer:
        key = variant.config.model_dump_json()
        if key not in self._servers:
            loopback = self._server_settings.model_copy(update={"host": "127.0.0.1", "port": 0})
            config = bench_config(variant.config).model_copy(update={"server": loopback})
            server = CadenceServer(config, on_event=self._on_event)
            self._servers[key] = await self._stack.enter_async_context(server)
        return self._servers[key]

    def _on_event(self, call_id: str, event: SessionEvent) -> None:
        match event:
            case TraceEvent():
                self._traces[call_id].append(event.trace)
            case TranscriptEvent(final=True, speculative=True):
                self._speculative[call_id] = True
            case SessionEndedEvent():
                self._ended[call_id].set()


@contextmanager
def _refusal(call_id: str) -> Iterator[None]:
    """A close with 1013 (the server is full) as ``CallRefusedError``."""
    try:
        yield
    except ConnectionClosed as exc:
        if exc.rcvd is not None and exc.rcvd.code == CloseCode.TRY_AGAIN_LATER:
            raise CallRefusedError(f"{call_id}: {exc.rcvd.reason}") from None
        raise


def _session(server: CadenceServer, call_id: str) -> VoiceSession:
    call = server.calls.get(call_id)
    if call is None or call.session is None:
        raise RuntimeError(f"{call_id}: the server has not opened the call")
    return call.session


@dataclass(frozen=True)
class CallerClip:
    """A clip as a phone caller says it: at 8 kHz (its telephone file where the manifest has
    one, else resampled as a phone line would), and where its speech truly ends."""

    id: str
    audio: PCM16
    speech_end_ms: float

    @classmethod
    def of(cls, clip: ManifestClip) -> CallerClip:
        audio = read_audio(clip.telephone_path or clip.path, TELEPHONE_RATE)
        return cls(clip.id, audio, speech_bounds_ms(audio, TELEPHONE_RATE)[1])


@dataclass(frozen=True)
class SpokenTurn:
    """One turn a phone caller spoke, on the phone's clock."""

    true_end_ms: float
    """The true end of the caller's speech."""
    heard_at_ms: list[float]
    """When each audible window of reply audio began, from when the caller began speaking."""

    def trace(self, session_id: str) -> TurnTrace:
        """The turn as its caller measured it — its true end of speech, the first reply sound
        it heard — for the tracer's outcome rule to judge like any server's trace."""
        events = {AnchorEvent.USER_SPEECH_END: self.true_end_ms}
        if self.heard_at_ms:
            events[AnchorEvent.AUDIO_HEARD_FIRST] = self.heard_at_ms[0]
        return TurnTrace(
            session_id=session_id, turn=0, events=events, annotations={CALLER_MEASURED: True}
        )


async def speak_and_listen(phone: TwilioEmulator, clip: CallerClip) -> SpokenTurn:
    """On a call in progress: once the agent is quiet, say ``clip``, then keep the line open
    (silence) until a reply is heard after its true end of speech, or ``MAX_REPLY_WAIT_MS``.
    Raises ``ConnectionClosed`` if the server's side goes away meanwhile."""
    await phone.pause(LEAD_MS)  # a new call's session opens meanwhile
    # A caller lets the agent finish: the previous reply may still be playing.
    while (heard := phone.heard_at_ms()) and phone.now_ms() - heard[-1] < QUIET_MS:
        await phone.pause(POLL_MS)
    speaking_from = phone.position_ms
    true_end = speaking_from + clip.speech_end_ms
    await phone.say(clip.audio, TELEPHONE_RATE)
    await listen_for_reply(
        phone.pause,
        lambda: phone.position_ms,
        phone.heard_at_ms,
        true_end_ms=true_end,
        silent_until_ms=phone.position_ms + TAIL_MS,
    )
    return SpokenTurn(true_end, [at for at in phone.heard_at_ms() if at >= speaking_from])


class TwilioTurnRunner(CallRunner):
    """A ``TurnRunner`` over ``/twilio``."""

    transport = "twilio"

    async def __call__(
        self, clip: ManifestClip, variant: Variant, session_id: str, concurrency: int
    ) -> list[TurnTrace]:
        server = await self._server(variant)
        stream_sid = "MZ" + re.sub(r"[^A-Za-z0-9_-]", "_", session_id)[:62]
        call_id = f"twilio-{stream_sid}"
        url = f"ws://127.0.0.1:{server.port}{server.config.telephony.twilio_path}"
        # A full server closes with 1013 at once, while the stream is still opening.
        with _refusal(call_id):
            async with TwilioEmulator(url, stream_sid=stream_sid) as phone:
                turn = await speak_and_listen(phone, CallerClip.of(clip))
                # Both clocks count `perf_counter` milliseconds: their offset is constant.
                offset_ms = _session(server, call_id).clock.now_ms() - phone.now_ms()
        return await self._measured(
            call_id,
            clip,
            variant,
            concurrency,
            true_end_ms=turn.true_end_ms + offset_ms,
            heard_at_ms=[at + offset_ms for at in turn.heard_at_ms],
        )


class WebRTCTurnRunner(CallRunner):
    """A ``TurnRunner`` over the browser demo's WebRTC call."""

    transport = "webrtc"

    async def __call__(
        self, clip: ManifestClip, variant: Variant, session_id: str, concurrency: int
    ) -> list[TurnTrace]:
        server = await self._server(variant)
        audio = read_audio(clip.path, SPEECH_RATE)
        _, speech_end = speech_bounds_ms(audio, SPEECH_RATE)
        async with BrowserEmulator(f"ws://127.0.0.1:{server.port}{SIGNALING_PATH}") as page:
            if page.refused:
                raise CallRefusedError(f"{session_id}: the server is full")
            await page.connected()
            await asyncio.sleep(LEAD_MS / 1000)
            session = _session(server, page.session_id)
            offset_ms = session.clock.now_ms() - page.now_ms()
            true_end = page.say(audio, SPEECH_RATE) + speech_end
            clip_end = true_end - speech_end + 1000.0 * len(audio) / SPEECH_RATE
            await listen_for_reply(
                page.pause,
                page.now_ms,
                lambda: page.heard_at_ms,
                true_end_ms=true_end,
                silent_until_ms=clip_end + TAIL_MS,
            )
        return await self._measured(
            page.session_id,
            clip,
            variant,
            concurrency,
            true_end_ms=true_end + offset_ms,
            heard_at_ms=[at + offset_ms for at in page.heard_at_ms],
        )
