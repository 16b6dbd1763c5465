"""The ``/twilio`` endpoint end to end: a Twilio emulator (``cadence.tooling.emulators.twilio``)
calls a real server on loopback — real whisper, dLLM and Piper — on the real 8 kHz clips.

Covers a call answered with paced media and marks, DTMF, barge-in (``clear``, and the
history cut to the echoed marks), overlays chosen by ``customParameters``, every bad input
of docs/telephony.md with the behaviour documented there, and the WER end to end.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from speech_data import clip, clips
from twilio_phone import TwilioPhone
from web_harness import wait_until, web_config
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from cadence.llm import Turn
from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.events import (
    AgentTextEvent,
    BargeInEvent,
    DTMFEvent,
    SessionEvent,
    TranscriptEvent,
)
from cadence.pipeline.session import VoiceSession
from cadence.tooling.emulators.twilio import TwilioEmulator
from cadence.voice.audio import level_db
from cadence.voice.stt import word_error_rate
from cadence.web.server import CadenceServer
from cadence.web.transports import twilio as twilio_transport

CALLER = "osr_us_0034_8k_s01"
BARGE_IN = "osr_us_0034_8k_s05"
MEDIA_FORMAT = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}


class Events:
    """The server's ``on_event`` hook: every event of every call, by call id."""

    def __init__(self) -> None:
        self.by_call: defaultdict[str, list[SessionEvent]] = defaultdict(list)

    def __call__(self, call_id: str, event: SessionEvent) -> None:
        self.by_call[call_id].append(event)

    def of(self, phone: TwilioEmulator) -> list[SessionEvent]:
        return self.by_call[f"twilio-{phone.stream_sid}"]

    def transcript(self, phone: TwilioEmulator) -> str:
        return " ".join(
            e.text for e in self.of(phone) if isinstance(e, TranscriptEvent) and e.final
        )


@pytest.fixture
def events() -> Events:
    return Events()


@asynccontextmanager
async def serving(config: CadenceConfig, events: Events) -> AsyncIterator[CadenceServer]:
    async with CadenceServer(config, on_event=events) as server:
        yield server
        await wait_until(lambda: not server.calls, "the calls to end")


@pytest.fixture
async def server(events: Events) -> AsyncIterator[CadenceServer]:
    async with serving(web_config(), events) as running:
        yield running


async def the_call(server: CadenceServer, phone: TwilioEmulator) -> VoiceSession:
    """The session of ``phone``'s call, once the server has opened it."""
    call_id = f"twilio-{phone.stream_sid}"

    def session() -> VoiceSession | None:
        call = server.calls.get(call_id)
        return None if call is None else call.session

    await wait_until(lambda: session() is not None, "the call's session")
    opened = session()
    assert opened is not None
    return opened


def twilio_url(server: CadenceServer) -> str:
    return f"ws://127.0.0.1:{server.port}/twilio"


WAIT_MS = 60_000.0
"""How long the caller stays on the line for a reply: only a broken server takes this long,
however busy the machine."""


async def until_heard(phone: TwilioEmulator, ms: float) -> None:
    """Keep the line open (silence) until ``ms`` of reply audio has played; after
    ``WAIT_MS`` of silence without it, the test fails."""
    waited = 0.0
    while sum(len(p.pcm) for p in phone.played) / 8 < ms:
        if waited >= WAIT_MS:
            raise AssertionError(f"{ms:.0f} ms of reply not heard within {WAIT_MS / 1000:.0f} s")
        await phone.pause(100)
        waited += 100


async def test_a_phone_call_is_answered_with_paced_media_and_a_mark_after_each_chunk(
    server: CadenceServer, events: Events
) -> None:
    async with TwilioEmulator(twilio_url(server)) as phone:
        await phone.pause(600)
        await phone.say(clip(CALLER).telephone_audio(), 8000)
        await until_heard(phone, 1500)
        session = await the_call(server, phone)
        await phone.hang_up()
    await wait_until(lambda: not server.calls, "the call to end")
    assert session.pipeline.tasks == []

    assert word_error_rate([clip(CALLER).text], [events.transcript(phone)]) <= 0.25
    assert phone.unexpected == []
    # Each chunk is 20 ms of μ-law and is followed by its mark; the echoed ones are in order.
    assert {len(p.pcm) for p in phone.played} == {160}
    assert len(phone.marks_received) >= len(phone.arrivals) >= 75
    assert phone.echoed_marks == phone.marks_received[: len(phone.echoed_marks)]
    # Paced in real time: never further ahead of the first chunk than the playout lead allows.
    start = phone.arrivals[0]
    ahead_ms = [20 * k - (at - start) for k, at in enumerate(phone.arrivals)]
    assert max(ahead_ms) <= 60 + 40, f"sent {max(ahead_ms):.0f} ms ahead of real time"
    assert level_db(phone.heard()) > -40  # speech, not silence


async def test_dtmf_reaches_the_session_as_events_in_order(
    server: CadenceServer, events: Events
) -> None:
    async with TwilioPhone(twilio_url(server)) as phone:
        for digit in "7#":
            await phone.press(digit)
        await wait_until(
            lambda: len([e for e in events.of(phone) if isinstance(e, DTMFEvent)]) == 2,
            "the key presses",
        )
    assert [e.digit for e in events.of(phone) if isinstance(e, DTMFEvent)] == ["7", "#"]


async def test_barge_in_clears_twilio_and_cuts_the_history_to_the_echoed_marks(
    server: CadenceServer, events: Events
) -> None:
    async with TwilioEmulator(twilio_url(server)) as phone:
        await phone.pause(600)
        await phone.say(clip(CALLER).telephone_audio(), 8000)
        await until_heard(phone, 1200)
        session = await the_call(server, phone)
        await phone.say(clip(BARGE_IN).telephone_audio(), 8000)  # over the reply
        await wait_until(lambda: bool(phone.clears), "Twilio to be told to clear")
        await phone.pause(1000)
        history = session.history

    [barge_in] = [e for e in events.of(phone) if isinstance(e, BargeInEvent)]
    reply = "".join(
        e.text for e in events.of(phone) if isinstance(e, AgentTextEvent) and e.reply_index == 0
    )
    assert barge_in.reply_index == 0
    assert history[:2] == [Turn("user", history[0].text), Turn("agent", barge_in.heard)]
    # Cut inside the reply: words were heard, and not all of them.
    assert barge_in.heard
    assert reply.startswith(barge_in.heard)
    assert len(barge_in.heard) < len(reply.strip())
    # What the ledger counted is what Twilio confirmed: the marks of turn 0 echoed before
    # the clear — about the audio the emulator had played by then.
    clear_at = phone.clears[0]
    played_before_clear = sum(len(p.pcm) for p in phone.played if p.at_ms < clear_at) / 8
    echoed_turn0 = [m for m in phone.echoed_marks if m.startswith("0.")]
    assert abs(20 * len(echoed_turn0) - played_before_clear) <= 100


async def test_custom_parameters_select_an_overlay(
    events: Events, caplog: pytest.LogCaptureFixture
) -> None:
    overlays = {"brisk": {"turn": {"end_of_turn": {"max_wait_ms": 600}}}}
    config = CadenceConfig.model_validate(web_config().model_dump() | {"overlays": overlays})
    caplog.set_level(logging.WARNING, logger="cadence.web.transports.twilio")
    async with serving(config, events) as server:
        url = twilio_url(server)
        async with TwilioEmulator(url, custom_parameters={"overlay": "brisk"}) as phone:
            session = await the_call(server, phone)
            assert session.config.turn.end_of_turn.max_wait_ms == 600
        async with TwilioEmulator(url, custom_parameters={"overlay": "nope"}) as phone:
            session = await the_call(server, phone)
            base = config.turn.end_of_turn.max_wait_ms
            assert base != 600
            assert session.config.turn.end_of_turn.max_wait_ms == base  # the base configuration
    assert "no overlay named 'nope'" in caplog.text


# --- bad input --------------------------------------------------------------------------------


def _start(stream_sid: str | None = "MZbad", media_format: object = MEDIA_FORMAT) -> str:
    start: dict[str, object] = {"mediaFormat": media_format}
    if stream_sid is not None:
        start["streamSid"] = stream_sid
    return json.dumps({"event": "start", "sequenceNumber": "1", "start": start})


async def _closed(websocket: ClientConnection) -> tuple[int | None, str]:
    """Wait for the server to close; its code and reason."""
    try:
        async with asyncio.timeout(10):
            async for _ in websocket:
                pass
    except ConnectionClosed:
        pass
    return websocket.close_code, websocket.close_reason or ""


async def test_bad_messages_in_a_stream_are_logged_and_ignored(
    server: CadenceServer, events: Events, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="cadence.web.transports.twilio")
    async with (
        TwilioPhone(twilio_url(server)) as other,
        TwilioPhone(twilio_url(server)) as phone,
    ):
        sid = phone.stream_sid
        media = {"event": "media", "streamSid": sid, "media": {"payload": "!!not base64"}}
        bad: list[tuple[str | bytes, str]] = [
            ("{not json", "not JSON"),
            ('{"event": "transcription", "streamSid": "x"}', "unknown event 'transcription'"),
            (b"\x00\x01\x02", "binary message of 3 bytes"),
            (json.dumps(media), "media payload is not base64"),
            ("[" + "0," * 10_000 + "0]", "over 16384"),
            (json.dumps({"event": "dtmf", "dtmf": {"digit": "X"}}), "a DTMF digit is one of"),
            (json.dumps(media | {"streamSid": "MZother"}), "media for another stream"),
            (_start(sid), "unexpected start during the stream"),
            (json.dumps({"event": "clear", "streamSid": sid}), "unexpected clear"),
        ]
        for raw, _ in bad:
            await phone.send_raw(raw)
        await phone.press("9")  # the stream is still served, in order
        await wait_until(
            lambda: any(isinstance(e, DTMFEvent) for e in events.of(phone)), "the key press"
        )
        await other.press("1")  # and so is the other call
        await wait_until(
            lambda: any(isinstance(e, DTMFEvent) for e in events.of(other)), "the other call"
        )
    for _, reason in bad:
        assert reason in caplog.text, reason
    assert phone.close_code == 1000  # it was hung up by the caller, not closed by the server


@pytest.mark.parametrize(
    ("messages", "code", "reason"),
    [
        ([_start(None)], 1008, "start without a streamSid"),
        ([_start("MZ 1; DROP")], 1008, "streamSid is not an id"),
        (
            [_start(media_format={"encoding": "audio/l16", "sampleRate": 16000, "channels": 1})],
            1003,
            "media format audio/l16 16000 Hz × 1 is not supported (audio/x-mulaw 8000 Hz mono is)",
        ),
        (['{"event": "stop"}'], 1000, "stopped before it started"),
        (
            ["{garbage"] * twilio_transport.MAX_BAD_MESSAGES,
            1008,
            "50 bad messages; closing the stream",
        ),
        # Over the server's frame limit: websockets refuses it before reading it all.
        (["x" * 300_000], 1009, "frame with 300000 bytes exceeds limit of 131072 bytes"),
    ],
)
async def test_a_stream_that_cannot_work_is_closed_with_the_reason(
    server: CadenceServer, messages: list[str], code: int, reason: str
) -> None:
    async with connect(twilio_url(server)) as websocket:
        for message in messages:
            await websocket.send(message)
        assert await _closed(websocket) == (code, reason)
    assert not server.calls


async def test_media_before_start_is_ignored_and_the_stream_then_starts(
    server: CadenceServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="cadence.web.transports.twilio")
    async with connect(twilio_url(server)) as websocket:
        await websocket.send(json.dumps({"event": "media", "media": {"payload": "//8="}}))
        await websocket.send(_start("MZlate"))
        await wait_until(lambda: "twilio-MZlate" in server.calls, "the call to start")
    assert "media before start" in caplog.text


async def test_a_peer_that_never_starts_is_closed(
    server: CadenceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(twilio_transport, "START_TIMEOUT_S", 0.3)
    async with connect(twilio_url(server)) as websocket:
        await websocket.send('{"event": "connected", "protocol": "Call", "version": "1.0.0"}')
        assert await _closed(websocket) == (1008, "no start within 0.3 s")


async def test_a_full_server_refuses_a_stream_as_busy(events: Events) -> None:
    async with serving(web_config(max_sessions=1), events) as server:
        phone = TwilioEmulator(twilio_url(server))
        async with phone, connect(twilio_url(server)) as websocket:
            await the_call(server, phone)
            # Refused at once, before the stream's start is read.
            assert await _closed(websocket) == (1013, "busy")


# --- accuracy ---------------------------------------------------------------------------------


async def test_word_error_rate_on_the_8khz_clips_through_twilio_is_at_most_a_quarter(
    server: CadenceServer, events: Events
) -> None:
    telephone = [c for c in clips() if c.telephone_path is not None]
    assert len(telephone) >= 10

    async def call(index: int) -> str:
        async with TwilioEmulator(twilio_url(server)) as phone:
            await the_call(server, phone)  # on a busy machine the session opens late
            await phone.pause(300)
            await phone.say(telephone[index].telephone_audio(), 8000)
            await until_heard(phone, 100)  # the turn is over once a reply plays
        return events.transcript(phone)

    heard: list[str] = []
    for start in range(0, len(telephone), 3):  # three lines at once
        heard += await asyncio.gather(*map(call, range(start, min(start + 3, len(telephone)))))
    wer = word_error_rate([c.text for c in telephone], heard)
    print(f"\nWER through /twilio on {len(telephone)} clips at 8 kHz: {wer:.3f}")
    for c, text in zip(telephone, heard, strict=True):
        print(f"  {c.id}: {text}")
    assert wer <= 0.25
