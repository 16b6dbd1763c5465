"""The agent hangs up: a call ends properly on every transport once its goodbye was heard.

Each call is real end to end: a recorded caller, the real whisper and Piper, and the `openai`
backend against ``FakeOpenAI``, which answers the caller with a goodbye and an ``end_call``
tool call. The answer it has for after the tool's result is never asked for: ``end_call``
ends the reply's rounds. Each test checks that the goodbye reached the caller before the call
ended, that it ended the transport's way, that the server kept nothing of it, and that the
turn's trace was written. Without a reply in progress, ``VoiceSession.end_call`` hangs up at
once (on a clock that stands still: no wait at all).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from models import transcriber
from openai_service import LIMIT_MS, settings
from speech_data import clip, spoken, with_silence
from test_audiosocket import audiosocket_config, dial, running
from test_web_browser import Wire, start_call
from twilio_phone import TwilioPhone
from web_harness import chromium_page, fake_microphone, needs_chromium, wait_until, web_config
from websockets.exceptions import ConnectionClosed

from cadence.core.clock import VirtualClock
from cadence.llm.options import LLMOptions
from cadence.pipeline.config import CadenceConfig, FaultsConfig, ModelsConfig, TracingConfig
from cadence.pipeline.events import (
    AgentTextEvent,
    HangUpEvent,
    ReplyAudioEvent,
    SessionEndedEvent,
    SessionEvent,
)
from cadence.pipeline.session import VoiceSession
from cadence.pipeline.tracing import AnchorEvent, TurnTrace
from cadence.tooling.emulators.hearing import WINDOW_MS, PlayedAudio, audible_at_ms
from cadence.tooling.emulators.openai import FakeOpenAI, Stream, StreamedCall, ToolCalls
from cadence.voice.audio import PCM16, resample
from cadence.voice.stt import normalize_transcript, word_error_rate
from cadence.web.metrics import ErrorKind
from cadence.web.serializers.audiosocket import SAMPLE_RATE as ASTERISK_RATE
from cadence.web.serializers.audiosocket import Audio, Hangup
from cadence.web.server import CadenceServer
from cadence.web.transports.call import Call
from cadence.web.transports.webrtc import WebRTCCall

GOODBYE_TEXT = "Thank you for calling. Goodbye!"
GOODBYE = ToolCalls(
    pieces=("Thank you ", "for calling. ", "Goodbye!"),
    calls=(StreamedCall("call_bye", "end_call", "{}"),),
)
"""The service's answer to the caller: a goodbye, and the call to hang up after it."""
AFTER_THE_RESULT = Stream(("Is there anything else I can do for you?",))
"""What the service would say if asked again with ``end_call``'s result: never asked for."""
REASON = "the agent ended the call"
"""``end_call``'s reason, which the ``HangUpEvent`` carries."""

CALL_TIMEOUT_S = 30.0
"""From the caller's first word to the end of the call: the utterance, the turn, the goodbye
played in real time, and the close — with room for a busy machine."""
HEARD_SHARE = 0.85
"""Of the goodbye's audible audio (as the voice says it alone), what the caller must have got
before the call ended: its phrases are synthesized apart, and a codec is in the way."""


@pytest.fixture
def service(fake: FakeOpenAI, api_key: str) -> FakeOpenAI:
    """The service, scripted: the goodbye with its ``end_call``, then the answer to the call's
    result, which must be left unasked."""
    fake.script = [GOODBYE, AFTER_THE_RESULT]
    return fake


def on_the_service(base: CadenceConfig, service: FakeOpenAI, traces: Path | None) -> CadenceConfig:
    """``base`` answered by ``service`` (``tools.builtins`` offers ``end_call`` by default),
    its traces appended to ``traces``. The stages' time limits are ``LIMIT_MS``: on a busy
    machine a slow decode must not turn the turn into a fault's, which has no goodbye."""
    llm = LLMOptions(backend="openai", openai=settings(service.base_url))
    limits = FaultsConfig(stt_timeout_ms=LIMIT_MS, llm_timeout_ms=LIMIT_MS, tts_timeout_ms=LIMIT_MS)
    return base.model_copy(
        update={
            "models": ModelsConfig(llm=llm),
            "faults": limits,
            "tracing": TracingConfig(jsonl_path=None if traces is None else str(traces)),
        }
    )


@pytest.fixture(scope="module")
def goodbye() -> list[float]:
    """When the goodbye is audible (ms), as the voice says it in one go: what the caller is
    owed."""
    return audible_at_ms([PlayedAudio(0.0, spoken(GOODBYE_TEXT), 16000)])


def audible_ms(onsets: list[float]) -> float:
    """How long the audio of these audible windows (``hearing``'s rule) lasts."""
    return WINDOW_MS * len(onsets)


def span_ms(onsets: list[float]) -> float:
    """From the first audible window to the end of the last."""
    return onsets[-1] + WINDOW_MS - onsets[0]


def heard_the_goodbye(pcm: PCM16, sample_rate: int) -> bool:
    """Whether whisper hears the goodbye in ``pcm``, silence after it as on a line. A word may
    be missed (whisper sometimes drops the lone "Goodbye!" phrase); that all of it arrived is
    measured by its audible length."""
    heard = with_silence(resample(pcm, sample_rate, 16000), before_ms=0, after_ms=500)
    text = transcriber().transcribe_blocking(heard).text
    return word_error_rate([GOODBYE_TEXT], [text]) <= 0.2


async def admitted(server: CadenceServer, call_id: str) -> Call:
    """The call ``call_id`` once the server has admitted it."""
    await wait_until(lambda: call_id in server.calls, "the call to be admitted")
    return server.calls[call_id]


def assert_hung_up_and_released(
    server: CadenceServer, call: Call, events: list[SessionEvent], service: FakeOpenAI, traces: Path
) -> None:
    """What every transport's call left once it ended: the agent hung up (once, with
    ``end_call``'s reason; the event was handed on), the service was asked once, nothing of
    the call runs, the server holds no call and counted no error, and the turn's trace is in
    the log."""
    [hang_up] = [e for e in events if isinstance(e, HangUpEvent)]
    assert hang_up.reason == REASON
    assert isinstance(events[-1], SessionEndedEvent)
    said = "".join(e.text for e in events if isinstance(e, AgentTextEvent))
    assert normalize_transcript(said) == normalize_transcript(GOODBYE_TEXT)
    assert len(service.requests) == 1
    assert service.script == [AFTER_THE_RESULT]  # end_call ended the rounds
    assert call.tasks == []
    assert call.session is None
    assert not server.calls
    registry = server.metrics.registry
    assert registry.get_sample_value("cadence_sessions") == 0
    for kind in ErrorKind:
        assert not registry.get_sample_value("cadence_errors_total", {"kind": kind.value}), kind
    [trace] = [TurnTrace.from_json_line(line) for line in traces.read_text().splitlines()]
    assert AnchorEvent.AUDIO_OUT_FIRST in trace.events
    assert [(tool.name, tool.outcome) for tool in trace.tools] == [("end_call", "ok")]


# --- Twilio -----------------------------------------------------------------------------------


async def silence_until_closed(phone: TwilioPhone) -> float:
    """Keep the line open as a phone does (silence, 20 ms at a time) until the server closes
    the stream; when it closed, on the phone's clock (within a chunk)."""
    async with asyncio.timeout(CALL_TIMEOUT_S):
        with contextlib.suppress(ConnectionClosed):
            while True:
                await phone.pause(20)
        closed_ms = phone.now_ms()
        await phone.closed()
    return closed_ms


async def test_twilio_the_stream_closes_normally_once_the_goodbye_was_played(
    service: FakeOpenAI, tmp_path: Path, goodbye: list[float]
) -> None:
    traces = tmp_path / "traces.jsonl"
    async with running(on_the_service(web_config(), service, traces)) as (server, events):
        async with TwilioPhone(f"ws://127.0.0.1:{server.port}/twilio") as phone:
            call = await admitted(server, f"twilio-{phone.stream_sid}")
            await phone.pause(600)
            await phone.say(clip("osr_us_0034_8k_s01").telephone_audio(), 8000)
            closed_ms = await silence_until_closed(phone)
        await wait_until(lambda: not server.calls, "the call to be released")

    assert (phone.close_code, phone.close_reason) == (1000, "hung up")
    # Every mark was echoed because its audio played (none flushed): Twilio confirmed the
    # goodbye to its end, and only then was the stream closed.
    assert phone.marks_received
    assert phone.echoed_marks == phone.marks_received
    assert not phone.clears
    assert all(chunk.at_ms < closed_ms for chunk in phone.played)
    assert audible_ms(audible_at_ms(phone.played)) >= HEARD_SHARE * audible_ms(goodbye)
    assert heard_the_goodbye(phone.heard(), 8000)
    assert_hung_up_and_released(server, call, events.of(call.call_id), service, traces)


# --- AudioSocket ------------------------------------------------------------------------------


async def test_audiosocket_asterisk_gets_the_goodbye_then_a_hang_up_then_the_end(
    service: FakeOpenAI, tmp_path: Path, goodbye: list[float]
) -> None:
    traces = tmp_path / "traces.jsonl"
    speech = clip("osr_us_0034_8k_s02").telephone_audio()
    silence = np.zeros(ASTERISK_RATE // 2, dtype=np.int16)
    async with running(on_the_service(audiosocket_config(), service, traces)) as (server, events):
        async with dial(server) as asterisk:
            call = await admitted(server, asterisk.call_id)
            asterisk.talk(np.concatenate([silence, speech]))
            frames = await asterisk.hung_up(timeout_s=CALL_TIMEOUT_S)  # to the end of the stream
        # Asterisk closed its side on the hang-up, as the dialplan goes on.
        await wait_until(lambda: not server.calls, "the call to be released")

    # The goodbye's audio, then the hang-up frame, then nothing: the socket was closed.
    assert frames[-1] == Hangup()
    assert all(isinstance(frame, Audio) for frame in frames[:-1])
    reply = np.concatenate([frame.pcm for frame in frames if isinstance(frame, Audio)])
    heard = audible_at_ms([PlayedAudio(0.0, reply, ASTERISK_RATE)])
    assert audible_ms(heard) >= HEARD_SHARE * audible_ms(goodbye)
    assert heard_the_goodbye(reply, ASTERISK_RATE)
    assert_hung_up_and_released(server, call, events.of(call.call_id), service, traces)


# --- the browser ------------------------------------------------------------------------------

WATCH_THE_CALL = """() => {
  const call = window.cadence.call;
  const watch = { close: null, heard: [], mic: call.mic.getTracks() };
  call.ws.addEventListener("close", (e) => {
    watch.close = { code: e.code, clean: e.wasClean, at: performance.now() };
  });
  // When the reply's energy grew as the page played it, until the page closed the connection.
  let energy = 0;
  const sample = async () => {
    if (call.pc.connectionState === "closed") return;
    const at = performance.now(); // the stats are of the audio played by now
    for (const report of (await call.pc.getStats()).values())
      if (report.type === "inbound-rtp" && report.kind === "audio") {
        if ((report.totalAudioEnergy ?? 0) - energy > 1e-5) watch.heard.push(at);
        energy = report.totalAudioEnergy ?? 0;
      }
    setTimeout(sample, 50);
  };
  sample();
  window.hangUpWatch = watch;
}"""
"""Watches the page's call from the test: how its socket closed, when the reply audio it
played was loud while the call lasted (sampled every 50 ms), and the microphone's tracks."""


@needs_chromium
async def test_browser_the_page_is_told_shows_it_and_lets_the_microphone_go(
    service: FakeOpenAI, tmp_path: Path, goodbye: list[float]
) -> None:
    traces = tmp_path / "traces.jsonl"
    microphone = fake_microphone(tmp_path / "microphone.wav", [clip("ds_arctic_a0024").audio()])
    async with (
        running(on_the_service(web_config(), service, traces)) as (server, events),
        chromium_page(tmp_path / "profile", microphone) as page,
    ):
        wire: Wire = await start_call(page, server)
        [call] = server.calls.values()
        assert isinstance(call, WebRTCCall)
        assert call.peer is not None
        peer_connection = call.peer.pc
        await page.evaluate(WATCH_THE_CALL)
        await page.wait_for_selector("#status[data-state=ended]", timeout=CALL_TIMEOUT_S * 1000)
        watch: dict[str, Any] = await page.evaluate(
            """() => ({
                ...window.hangUpWatch,
                mic: window.hangUpWatch.mic.map((track) => track.readyState),
                status: document.querySelector("#status").textContent,
                call: window.cadence.call,
                traces: window.cadence.traces.length,
            })"""
        )
        await wait_until(lambda: not server.calls, "the call to be released")

    # The page was told, last, and the socket then closed normally.
    assert wire.events[-1] == {"type": "hangup", "reason": REASON}
    assert (watch["close"]["code"], watch["close"]["clean"]) == (1000, True)
    assert watch["status"] == "The agent ended the call"
    assert watch["call"] is None
    assert watch["mic"]
    assert set(watch["mic"]) == {"ended"}  # the microphone was let go
    assert watch["traces"] == 1  # the turn's trace reached the page before the end
    assert not wire.page_errors
    # The goodbye played in the page, from its first sound to its last, before the close.
    heard_ms = watch["heard"]
    assert heard_ms
    assert heard_ms[-1] < watch["close"]["at"]
    assert heard_ms[-1] - heard_ms[0] >= HEARD_SHARE * span_ms(goodbye), heard_ms
    assert peer_connection.connectionState == "closed"
    assert_hung_up_and_released(server, call, events.of(call.call_id), service, traces)


# --- the Python API ---------------------------------------------------------------------------


async def test_end_call_without_a_reply_in_progress_hangs_up_at_once(service: FakeOpenAI) -> None:
    # On a clock that stands still, "at once" is exact: the hang-up is stamped with the time it
    # was asked for, and a hang-up that waited on the clock for anything (a reply's end, the
    # playout's lead) would never come — the bound, far beyond any machine's pace, says so.
    # On the service, which is not asked: no local model to load for a call without a turn.
    clock = VirtualClock(start_ms=1000.0)
    config = on_the_service(CadenceConfig(), service, traces=None)
    session = VoiceSession(config, session_id="api", output_sample_rate=16000, clock=clock)
    await session.start()
    async with asyncio.timeout(CALL_TIMEOUT_S):
        async with session:
            await session.end_call("the caller's business is done")
        events = [event async for event in session.events]

    [hang_up] = [e for e in events if isinstance(e, HangUpEvent)]
    assert hang_up.reason == "the caller's business is done"
    assert hang_up.at_ms == clock.now_ms() == 1000.0  # asked at 1000 ms, and no wait at all
    assert not [e for e in events if isinstance(e, AgentTextEvent | ReplyAudioEvent)]
    assert events[-1] == SessionEndedEvent("closed")
    assert not service.requests
