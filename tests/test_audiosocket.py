"""Asterisk AudioSocket: the frame codec, bad input, and calls over real TCP on loopback — the
server with the real models, a Python Asterisk on the other end, real 8 kHz speech."""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
import pytest
from speech_data import clip
from web_harness import free_port, wait_until, web_config

from cadence.pipeline.config import CadenceConfig, TelephonyConfig, render_config
from cadence.pipeline.events import DTMFEvent, ReplyPlayedEvent, SessionEvent, TurnCommittedEvent
from cadence.pipeline.frames import AudioOutFrame
from cadence.pipeline.stages import VADStage
from cadence.voice.audio import PCM16
from cadence.voice.stt import word_error_rate
from cadence.web.serializers.audiosocket import (
    DTMF,
    FRAME_SAMPLES,
    MAX_AUDIO_BYTES,
    SAMPLE_RATE,
    Audio,
    AudioSocketProtocolError,
    CallUUID,
    Error,
    Frame,
    Hangup,
    encode_audio,
    encode_frame,
    read_frame,
)
from cadence.web.server import CadenceServer
from cadence.web.transports import audiosocket as transport
from cadence.web.transports.audiosocket import AudioSocketAudioOutput, AudioSocketCall

CLIP = "osr_us_0034_8k_s02"
"""A telephone-band recording: "The long journey home took a year." """

SILENCE = np.zeros(FRAME_SAMPLES, dtype=np.int16)


def header(kind: int, length: int) -> bytes:
    return bytes([kind]) + length.to_bytes(2, "big")


def stream_of(data: bytes) -> asyncio.StreamReader:
    """A reader that yields ``data``, then the end of the connection."""
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


# --- the codec --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame",
    [
        Hangup(),
        CallUUID(uuid.UUID("40325ec2-5efd-4bd3-805f-53576e581d13")),
        *(DTMF(digit) for digit in "0123456789*#ABCD"),
        Audio(np.array([0, 1, -1, 32767, -32768, 1234], dtype=np.int16)),
        Error(0x02),
        Error(None),
    ],
    ids=lambda frame: "Audio" if isinstance(frame, Audio) else repr(frame),
)
async def test_every_kind_of_frame_round_trips(frame: Frame) -> None:
    reader = stream_of(encode_frame(frame))
    decoded = await read_frame(reader)
    assert decoded == frame
    if isinstance(frame, Audio):
        assert isinstance(decoded, Audio)
        assert decoded.pcm.dtype == np.int16
        assert decoded.pcm.tolist() == frame.pcm.tolist()
    assert await read_frame(reader) is None  # a clean end between frames: hung up


def test_the_wire_bytes_are_asterisks() -> None:
    call = uuid.UUID("40325ec2-5efd-4bd3-805f-53576e581d13")
    assert encode_frame(Hangup()) == b"\x00\x00\x00"
    assert encode_frame(CallUUID(call)) == b"\x01\x00\x10" + call.bytes
    assert encode_frame(DTMF("#")) == b"\x03\x00\x01#"
    assert encode_frame(Audio(np.array([1, -2], dtype=np.int16))) == b"\x10\x00\x04\x01\x00\xfe\xff"
    assert encode_frame(Error(0x01)) == b"\xff\x00\x01\x01"
    assert str(Error(0x03)) == "error 0x03 (the caller hung up, a frame could not be forwarded)"


async def test_reply_audio_is_cut_into_frames_of_20_ms() -> None:
    pcm = np.arange(SAMPLE_RATE * 50 // 1000, dtype=np.int16)  # 50 ms
    reader = stream_of(encode_audio(pcm))
    frames = [frame async for frame in _frames(reader)]
    assert all(isinstance(frame, Audio) for frame in frames)
    sizes = [len(frame.pcm) for frame in frames if isinstance(frame, Audio)]
    assert sizes == [FRAME_SAMPLES, FRAME_SAMPLES, SAMPLE_RATE * 10 // 1000]
    joined = np.concatenate([frame.pcm for frame in frames if isinstance(frame, Audio)])
    assert joined.tolist() == pcm.tolist()


async def _frames(reader: asyncio.StreamReader) -> AsyncIterator[Frame]:
    while (frame := await read_frame(reader)) is not None:
        yield frame


BAD_FRAMES = [
    pytest.param(header(0x01, 15) + bytes(15), "uuid frame of 15 bytes", id="uuid-15"),
    pytest.param(header(0x01, 17) + bytes(17), "uuid frame of 17 bytes", id="uuid-17"),
    pytest.param(header(0x03, 2) + b"12", "dtmf frame of 2 bytes", id="dtmf-2"),
    pytest.param(header(0x03, 0), "dtmf frame of 0 bytes", id="dtmf-0"),
    pytest.param(header(0x03, 1) + b"x", "is not a DTMF digit", id="dtmf-x"),
    pytest.param(header(0x10, 321) + bytes(321), "audio frame of 321 bytes", id="audio-odd"),
    pytest.param(header(0x10, 0), "audio frame of 0 bytes", id="audio-empty"),
    # Refused on its header alone: the payload is never waited for.
    pytest.param(header(0x10, MAX_AUDIO_BYTES + 2), "audio frame of 16002 bytes", id="audio-big"),
    pytest.param(header(0x00, 1) + b"\x00", "hangup frame of 1 bytes", id="hangup-1"),
    pytest.param(header(0xFF, 2) + b"\x01\x02", "error frame of 2 bytes", id="error-2"),
    pytest.param(header(0x02, 0), "unknown frame kind 0x02", id="kind-0x02"),
    pytest.param(header(0x12, 640) + bytes(640), "unknown frame kind 0x12", id="kind-slin16"),
    pytest.param(b"\x10\x01", "truncated header", id="truncated-header"),
    pytest.param(header(0x10, 320) + bytes(100), "truncated audio frame", id="truncated-payload"),
]


@pytest.mark.parametrize(("data", "reason"), BAD_FRAMES)
async def test_a_frame_that_breaks_the_rules_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(AudioSocketProtocolError, match=reason):
        await read_frame(stream_of(data))


@pytest.mark.parametrize(
    "frame",
    [DTMF("x"), DTMF("12"), Audio(np.zeros(0, dtype=np.int16)), Audio(SILENCE.repeat(51))],
    ids=["dtmf-x", "dtmf-12", "audio-empty", "audio-too-long"],
)
def test_a_frame_that_breaks_the_rules_is_not_encoded(frame: Frame) -> None:
    with pytest.raises(ValueError, match="cannot encode"):
        encode_frame(frame)


# --- an Asterisk of our own -------------------------------------------------------------------


class Asterisk:
    """Asterisk's side of one AudioSocket connection, as the dialplan's ``AudioSocket()`` runs
    it: the call's UUID first, then the caller's audio in 20 ms frames at the pace of speech,
    silence included (a phone line is never quiet by absence). What comes back is collected
    with its arrival time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.uuid = uuid.uuid4()
        self.call_id = f"audiosocket-{self.uuid}"
        self.received: list[tuple[float, Frame]] = []
        self._reader = reader
        self._writer = writer
        self._reading = asyncio.create_task(self._read(), name="asterisk:read")
        self._line: asyncio.Task[None] | None = None

    def send(self, *frames: Frame) -> None:
        self._writer.write(b"".join(map(encode_frame, frames)))

    def send_raw(self, data: bytes) -> None:
        self._writer.write(data)

    def talk(self, pcm: PCM16 | None = None) -> None:
        """Start sending ``pcm`` (8 kHz) and then silence, each frame when its time comes."""
        self._line = asyncio.create_task(self._talk(pcm), name="asterisk:line")

    async def hang_up(self) -> None:
        """Stop talking and send the hang-up frame."""
        await self._stop_talking()
        self.send(Hangup())

    def stop_sending(self) -> None:
        """Close our side of the connection (the server may still send)."""
        self._writer.write_eof()

    async def hung_up(self, timeout_s: float = 10) -> list[Frame]:
        """What the server sent until it closed the connection."""
        async with asyncio.timeout(timeout_s):
            await asyncio.shield(self._reading)
        return [frame for _, frame in self.received]

    @property
    def reply(self) -> list[tuple[float, Audio]]:
        return [(at, frame) for at, frame in self.received if isinstance(frame, Audio)]

    async def close(self) -> None:
        await self._stop_talking()
        self._reading.cancel()
        await asyncio.gather(self._reading, return_exceptions=True)
        self._writer.close()
        await asyncio.gather(self._writer.wait_closed(), return_exceptions=True)

    async def _read(self) -> None:
        while (frame := await read_frame(self._reader)) is not None:
            self.received.append((time.monotonic(), frame))
        if self._line is not None:
            self._line.cancel()  # the server hung up: the line is dead

    async def _stop_talking(self) -> None:
        if self._line is not None:
            self._line.cancel()
            await asyncio.gather(self._line, return_exceptions=True)

    async def _talk(self, pcm: PCM16 | None) -> None:
        speech = np.zeros(0, dtype=np.int16) if pcm is None else pcm
        start = time.monotonic()
        for index in itertools.count():
            await asyncio.sleep(max(0.0, start + 0.02 * index - time.monotonic()))
            chunk = speech[index * FRAME_SAMPLES : (index + 1) * FRAME_SAMPLES]
            self.send(Audio(chunk if len(chunk) else SILENCE))


@asynccontextmanager
async def dial(server: CadenceServer, *, send_uuid: bool = True) -> AsyncIterator[Asterisk]:
    """A connection to the server's AudioSocket port; the UUID frame sent first."""
    assert server.audiosocket_port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", server.audiosocket_port)
    asterisk = Asterisk(reader, writer)
    if send_uuid:
        asterisk.send(CallUUID(asterisk.uuid))
    try:
        yield asterisk
    finally:
        await asterisk.close()


def audiosocket_config(max_sessions: int = 8) -> CadenceConfig:
    config = web_config(max_sessions)
    telephony = TelephonyConfig(audiosocket=f"127.0.0.1:{free_port()}")
    return config.model_copy(update={"telephony": telephony})


class Events:
    """The server's ``on_event`` hook: every event of every call, by call id."""

    def __init__(self) -> None:
        self.by_call: dict[str, list[SessionEvent]] = {}

    def __call__(self, call_id: str, event: SessionEvent) -> None:
        self.by_call.setdefault(call_id, []).append(event)

    def of(self, call_id: str) -> list[SessionEvent]:
        return self.by_call.get(call_id, [])


@asynccontextmanager
async def running(
    config: CadenceConfig | None = None,
) -> AsyncIterator[tuple[CadenceServer, Events]]:
    events = Events()
    async with CadenceServer(config or audiosocket_config(), on_event=events) as server:
        yield server, events


def errors(server: CadenceServer, kind: str) -> float | None:
    return server.metrics.registry.get_sample_value("cadence_errors_total", {"kind": kind})


# --- calls ------------------------------------------------------------------------------------


async def test_a_call_end_to_end_over_tcp(monkeypatch: pytest.MonkeyPatch) -> None:
    speech = clip(CLIP)
    written: list[float] = []
    """When the server wrote each reply frame (``time.monotonic``, as the caller's clock)."""
    write = AudioSocketAudioOutput.send

    async def timed_write(self: AudioSocketAudioOutput, frame: AudioOutFrame) -> None:
        written.append(time.monotonic())
        await write(self, frame)

    monkeypatch.setattr(AudioSocketAudioOutput, "send", timed_write)
    async with running() as (server, events), dial(server) as asterisk:
        await wait_until(lambda: asterisk.call_id in server.calls, "the call to be admitted")
        call = server.calls[asterisk.call_id]
        assert isinstance(call, AudioSocketCall)
        asterisk.talk(np.concatenate([SILENCE.repeat(25), speech.telephone_audio()]))
        await wait_until(
            lambda: any(isinstance(e, ReplyPlayedEvent) for e in events.of(asterisk.call_id)),
            "the reply to be played",
            timeout_s=40,
        )
        assert call.session is not None
        user_turns = [turn.text for turn in call.session.history if turn.speaker == "user"]
        commits = [e for e in events.of(asterisk.call_id) if isinstance(e, TurnCommittedEvent)]
        assert user_turns == [commit.user_text for commit in commits]
        assert word_error_rate([speech.text], [" ".join(user_turns)]) <= 0.25, user_turns

        # The reply came back as 8 kHz audio frames of 20 ms, paced in real time: never more
        # audio than the time it took to arrive, plus the playout's lead and a frame. It is
        # timed from the server's first write: on a busy machine the caller may read the
        # first frames late (together with the next), never before they were written.
        reply = asterisk.reply
        assert all(len(frame.pcm) <= FRAME_SAMPLES for _, frame in reply)
        heard_s = sum(len(frame.pcm) for _, frame in reply) / SAMPLE_RATE
        elapsed_s = reply[-1][0] - written[0]
        assert heard_s > 0.5, heard_s
        assert heard_s <= elapsed_s + 0.25, (heard_s, elapsed_s)

        asterisk.send(DTMF("5"))
        await wait_until(
            lambda: any(isinstance(e, DTMFEvent) for e in events.of(asterisk.call_id)),
            "the key press",
        )
        assert [e.digit for e in events.of(asterisk.call_id) if isinstance(e, DTMFEvent)] == ["5"]

        tasks = call.tasks
        assert len(tasks) > 5, [t.get_name() for t in tasks]  # the stages and the call's own
        await asterisk.hang_up()
        await wait_until(lambda: not server.calls, "the call to end")
        assert call.tasks == []
        assert call.session is None
        assert all(task.done() for task in tasks)
        assert Hangup() not in await asterisk.hung_up()  # the caller hung up: nothing to say
        assert server.metrics.registry.get_sample_value("cadence_sessions") == 0
        answered = {"outcome": "answered"}
        assert server.metrics.registry.get_sample_value("cadence_turns_total", answered) >= 1


CALL_ENDERS = [
    # (bytes after the UUID, or instead of it; the reason logged; the error counted; hang-up?)
    pytest.param(header(0x03, 2) + b"12", "dtmf frame of 2 bytes", "telephony", True, id="dtmf-2"),
    pytest.param(header(0x10, 321) + bytes(321), "audio frame of 321", "telephony", True, id="odd"),
    pytest.param(header(0x10, 16002), "audio frame of 16002", "telephony", True, id="oversized"),
    pytest.param(header(0x42, 0), "unknown frame kind 0x42", "telephony", True, id="kind"),
    pytest.param(header(0x01, 16) + bytes(16), "a second UUID", "telephony", True, id="uuid-2"),
    pytest.param(b"\x10\x01", "truncated header", "telephony", True, id="truncated-header"),
    pytest.param(
        header(0x10, 320) + bytes(9), "truncated audio", "telephony", True, id="truncated"
    ),
    pytest.param(
        header(0xFF, 1) + b"\x02",
        "Asterisk reported error 0x02 (a frame could not be forwarded)",
        "connection_lost",
        False,
        id="asterisk-error",
    ),
]
FIRST_FRAME_ENDERS = [
    pytest.param(header(0x01, 15) + bytes(15), "uuid frame of 15 bytes", id="uuid-15"),
    pytest.param(
        encode_frame(Audio(SILENCE)),
        "the first frame must be the call's UUID, not Audio",
        id="no-uuid",
    ),
]


@pytest.mark.parametrize(("data", "reason", "kind", "hang_up"), CALL_ENDERS)
async def test_bad_input_ends_only_its_own_call(
    caplog: pytest.LogCaptureFixture, data: bytes, reason: str, kind: str, hang_up: bool
) -> None:
    caplog.set_level(logging.INFO, logger="cadence.web.transports.audiosocket")
    async with running() as (server, events), dial(server) as good:
        good.talk()
        async with dial(server) as bad:
            await wait_until(lambda: len(server.calls) == 2, "both calls to be admitted")
            bad.send_raw(data)
            if "truncated" in reason:
                bad.stop_sending()  # the connection closes in the middle of the frame
            frames = await bad.hung_up()
            assert (Hangup() in frames) == hang_up
            await wait_until(lambda: list(server.calls) == [good.call_id], "the bad call to end")
        assert any(
            bad.call_id in record.getMessage() and reason in record.getMessage()
            for record in caplog.records
        ), caplog.text
        assert errors(server, kind) == 1

        good.send(DTMF("7"))  # the other call carries on
        await wait_until(
            lambda: any(isinstance(e, DTMFEvent) for e in events.of(good.call_id)), "the key"
        )
        assert good.call_id in server.calls
        await good.hang_up()
        await wait_until(lambda: not server.calls, "the good call to end")


@pytest.mark.parametrize(("data", "reason"), FIRST_FRAME_ENDERS)
async def test_a_connection_that_does_not_open_with_a_uuid_is_hung_up(
    caplog: pytest.LogCaptureFixture, data: bytes, reason: str
) -> None:
    async with running() as (server, _), dial(server, send_uuid=False) as asterisk:
        asterisk.send_raw(data)
        assert await asterisk.hung_up() == [Hangup()]
        assert not server.calls
        assert f"protocol error: {reason}" in caplog.text
        assert errors(server, "telephony") == 1


async def test_past_the_limit_a_call_is_refused_and_closing_the_server_ends_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = audiosocket_config(max_sessions=1)
    async with running(config) as (server, _), dial(server) as first:
        await wait_until(lambda: first.call_id in server.calls, "the first call")
        async with dial(server, send_uuid=False) as silent:  # connected, no call yet
            async with dial(server) as second:  # accepted after the silent one
                assert await second.hung_up() == [Hangup()]
            assert f"{second.call_id}: refused: the server is full" in caplog.text
            assert errors(server, "refused") == 1
            assert list(server.calls) == [first.call_id]
            call = server.calls[first.call_id]
            await server.close()
            assert await first.hung_up() == [Hangup()]
            assert await silent.hung_up() == []
        assert not server.calls
        assert call.tasks == []


async def test_a_failing_session_hangs_up(monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(self: VADStage, frame: object) -> None:
        raise RuntimeError("injected fault")

    monkeypatch.setattr(VADStage, "process", broken)
    async with running() as (server, _), dial(server) as asterisk:
        asterisk.talk()  # silence is audio too: the first frame trips the fault
        assert await asterisk.hung_up() == [Hangup()]
        await wait_until(lambda: not server.calls, "the call to end")
        assert errors(server, "session_failed") == 1


async def test_a_peer_that_stops_reading_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "DRAIN_TIMEOUT_S", 0.2)
    accepted: asyncio.Future[asyncio.StreamWriter] = asyncio.get_running_loop().create_future()
    listener = await asyncio.start_server(
        lambda _, writer: accepted.set_result(writer), "127.0.0.1", 0
    )
    peer = socket.socket()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window fills soon
    peer.setblocking(False)
    await asyncio.get_running_loop().sock_connect(peer, listener.sockets[0].getsockname())
    _, peer_writer = await asyncio.open_connection(sock=peer)  # and never reads
    writer = await accepted
    stalled = asyncio.Event()
    output = AudioSocketAudioOutput(writer, on_stalled=stalled.set)
    frame = AudioOutFrame(pcm=SILENCE, sample_rate=SAMPLE_RATE, timestamp_ms=0.0, reply_index=0)
    try:
        sent = 0
        while not stalled.is_set():
            await output.send(frame)
            sent += 1
            assert sent < 100_000, "the output never noticed"
        assert sent > 10  # the socket took what it could first
        async with asyncio.timeout(0.1):
            await output.send(frame)  # dropped at once now
    finally:
        writer.transport.abort()
        peer_writer.close()
        listener.close()
        await listener.wait_closed()


def test_cadence_serve_takes_asterisk_calls(tmp_path: Path) -> None:
    path = tmp_path / "cadence.yaml"
    path.write_text(render_config(web_config()))
    cadence = str(Path(sys.executable).parent / "cadence")
    bad = subprocess.run(
        [cadence, "serve", "--config", str(path), "--audiosocket", "9092"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert "expected HOST:PORT" in bad.stderr

    address = f"127.0.0.1:{free_port()}"
    command = [cadence, "serve", "--config", str(path), "--audiosocket", address]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        assert f"AudioSocket on {address}" in process.stdout.readline()
        host, port = address.split(":")
        with socket.create_connection((host, int(port)), timeout=10) as asterisk:
            asterisk.sendall(encode_frame(CallUUID(uuid.uuid4())) + encode_frame(Hangup()))
            assert asterisk.recv(1) == b""  # the server closed the call
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
