"""``TwilioTurnRunner``: ``cadence bench --transport twilio`` — each clip one phone call through
the real ``/twilio`` endpoint of a real server on loopback, played by the Twilio emulator:
μ-law at 8 kHz, in 20 ms chunks at the pace of speech, reply audio played out in real time
with its marks echoed.

Clips play from their 8 kHz file where the manifest has one (``file_8k``), else resampled to
8 kHz as a phone line would. The traces are the server's, so every stage is measured on the
same terms as in process; ``user_speech_end`` is the clip's true end of speech, carried from
the emulator's clock onto the session's. Beside voice-to-voice, each turn records
``caller_heard_ms``: when the emulator started playing the first reply audio, on the
session's clock — the transport's own share is that minus ``audio_out_first``.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from contextlib import AsyncExitStack
from types import TracebackType

from websockets.exceptions import ConnectionClosed

from pipeline.bench.manifest import ManifestClip
from pipeline.bench.turn_bench import (
    LEAD_MS,
    MAX_REPLY_WAIT_MS,
    TAIL_MS,
    Variant,
    bench_config,
    with_ground_truth,
)
from pipeline.config import ServerConfig
from pipeline.events import SessionEndedEvent, SessionEvent, TraceEvent, TranscriptEvent
from pipeline.session import VoiceSession
from pipeline.tracing import TurnTrace
from voice.audio.speech_bounds import speech_bounds_ms
from voice.audio.wavfile import read_audio
from web.emulators.twilio import TwilioEmulator
from web.serializers.twilio import SAMPLE_RATE
from web.server import CadenceServer
from web.signaling import CloseCode

POLL_MS = 100.0


class CallRefusedError(RuntimeError):
    """The server turned the call away (close code 1013: it is full)."""


class TwilioTurnRunner:
    """A ``TurnRunner`` over ``/twilio``: one server per configuration, started on first use
    and closed with the runner (``async with``). ``server`` sets its admission limit; by
    default it admits every call (a benchmark measures latency, not refusals)."""

    def __init__(self, server: ServerConfig | None = None) -> None:
        self._server_settings = server or ServerConfig(max_sessions=1024)
        self._stack = AsyncExitStack()
        self._servers: dict[str, CadenceServer] = {}
        self._traces: defaultdict[str, list[TurnTrace]] = defaultdict(list)
        self._ended: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._speculative: dict[str, bool] = {}
        """Calls whose transcript came from the speculative decode."""

    async def __aenter__(self) -> TwilioTurnRunner:
        await self._stack.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._stack.__aexit__(exc_type, exc, traceback)

    async def __call__(
        self, clip: ManifestClip, variant: Variant, session_id: str, concurrency: int
    ) -> list[TurnTrace]:
        server = await self._server(variant)
        audio = read_audio(clip.telephone_path or clip.path, SAMPLE_RATE)
        _, speech_end = speech_bounds_ms(audio, SAMPLE_RATE)
        stream_sid = "MZ" + re.sub(r"[^A-Za-z0-9_-]", "_", session_id)[:62]
        call_id = f"twilio-{stream_sid}"
        url = f"ws://127.0.0.1:{server.port}{server.config.telephony.twilio_path}"
        async with TwilioEmulator(url, stream_sid=stream_sid) as phone:
            try:
                await phone.pause(LEAD_MS)  # the session opens meanwhile
            except ConnectionClosed as exc:
                if exc.rcvd is not None and exc.rcvd.code == CloseCode.TRY_AGAIN_LATER:
                    raise CallRefusedError(f"{call_id}: {exc.rcvd.reason}") from None
                raise
            session = _session(server, call_id)
            offset_ms = session.clock.now_ms() - phone.now_ms()  # emulator → session clock
            true_end = phone.position_ms + speech_end
            await phone.say(audio, SAMPLE_RATE)
            waited = 0.0
            while waited < TAIL_MS or (not phone.played and waited < MAX_REPLY_WAIT_MS):
                await phone.pause(POLL_MS)
                waited += POLL_MS
        await self._ended[call_id].wait()  # its last trace comes as the call is released
        del self._ended[call_id]
        heard = phone.first_heard_ms
        return with_ground_truth(
            self._traces.pop(call_id, []),
            clip,
            variant.name,
            true_end_ms=true_end + offset_ms,
            annotations={
                "concurrency": concurrency,
                "speculative_hit": self._speculative.pop(call_id, None),
                "transport": "twilio",
                "caller_heard_ms": None if heard is None else heard + offset_ms,
            },
        )

    @property
    def calls_in_progress(self) -> int:
        return sum(len(server.calls) for server in self._servers.values())

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


def _session(server: CadenceServer, call_id: str) -> VoiceSession:
    call = server.calls.get(call_id)
    if call is None or call.session is None:
        raise RuntimeError(f"{call_id}: the server did not open the call within {LEAD_MS} ms")
    return call.session
