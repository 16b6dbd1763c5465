"""Hostile input, generated: property-based fuzzing (hypothesis) of the three wire parsers —
Twilio's JSON messages, AudioSocket's frames, the page's signaling — then the same kinds of
input sent to a running server's ``/twilio``, ``/ws`` and AudioSocket port, which must go on
serving a normal call with nothing leaked; and hostile configuration files.

Each parser may only answer with its own error or a value; a generated input that makes one
raise anything else, hang, or return something it cannot encode again is a bug.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from speech_data import clip
from web_harness import free_port, wait_until, web_config
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from cadence.pipeline.config import CadenceConfig, ConfigError, TelephonyConfig, load_config
from cadence.tooling.emulators.twilio import TwilioEmulator
from cadence.web.serializers import audiosocket, twilio
from cadence.web.server import CadenceServer
from cadence.web.signaling import (
    ClientMessage,
    CloseCode,
    Hangup,
    Offer,
    SignalingError,
    parse_client_message,
)
from cadence.web.transports.webrtc import SIGNALING_PATH

PARSER = settings(max_examples=200, deadline=None, database=None)
LIVE = settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# --- what hostile peers send ------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=10,
)
"""Any JSON value (NaN and infinities included, as Python's json writes and reads them)."""


Fields = dict[str, st.SearchStrategy[Any]]


def shaped(fields: Fields) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with ``fields`` — each mostly of its own shape, sometimes any JSON, now and then
    missing — and stray keys."""
    values = st.fixed_dictionaries({name: st.one_of(s, s, JSON) for name, s in fields.items()})
    missing = st.sets(st.sampled_from(sorted(fields)), max_size=1) if fields else st.just(set())
    strays = st.dictionaries(st.text(max_size=6), JSON, max_size=2)
    return st.builds(
        lambda known, gone, extra: extra | {k: v for k, v in known.items() if k not in gone},
        values,
        missing,
        strays,
    )


BASE64ISH = st.text(alphabet="ABCDEFabcdef0123456789+/=é\n", max_size=40)
"""Base64 mostly, sometimes not (a character outside it, padding in the middle, no ASCII)."""


def twilio_message(event: str, body: dict[str, Fields]) -> st.SearchStrategy[dict[str, Any]]:
    """A message of ``event`` whose body has the right fields, each sometimes the wrong shape."""
    parts: Fields = {"event": st.just(event)}
    parts |= {name: shaped(fields) for name, fields in body.items()}
    return st.fixed_dictionaries(
        parts,
        optional={"streamSid": st.text(max_size=70), "sequenceNumber": st.text(max_size=4) | JSON},
    )


MEDIA_FORMAT: Fields = {
    "encoding": st.sampled_from(["audio/x-mulaw", "audio/l16"]),
    "sampleRate": st.sampled_from([8000, 16000]),
    "channels": st.sampled_from([1, 2]),
}
TWILIO_OBJECT = st.one_of(
    twilio_message(
        "media",
        {"media": {"payload": BASE64ISH, "track": st.sampled_from(["inbound", "outbound"])}},
    ),
    twilio_message(
        "start",
        {
            "start": {
                "streamSid": st.text(max_size=70),
                "customParameters": st.dictionaries(st.text(max_size=5), st.text(max_size=5)),
                "mediaFormat": shaped(MEDIA_FORMAT),
            }
        },
    ),
    twilio_message("dtmf", {"dtmf": {"digit": st.text(max_size=2)}}),
    twilio_message("mark", {"mark": {"name": st.text(max_size=8)}}),
    twilio_message("stop", {"stop": {}}),
    twilio_message("connected", {}),
    twilio_message("clear", {}),
    st.builds(
        lambda event, body: {"event": event, **body},
        st.text(max_size=8) | JSON,
        st.dictionaries(st.text(max_size=8), JSON, max_size=3),
    ),
)
OVERSIZE = st.integers(twilio.MAX_MESSAGE_BYTES - 64, 150_000).map(
    lambda n: json.dumps({"event": "media", "media": {"payload": "A" * n}})
)
TWILIO_WIRE = (
    st.text(max_size=60)
    | st.binary(max_size=60)
    | JSON.map(json.dumps)
    | TWILIO_OBJECT.map(json.dumps)
    | OVERSIZE
)

SDPISH = st.lists(
    st.sampled_from(["v=0", "m=audio 9 UDP/TLS/RTP/SAVPF 111", "m=video 9 RTP/AVP 96", "a=x", "🙃"])
    | st.text(max_size=12),
    max_size=6,
).map("\r\n".join)
SIGNALING_WIRE = (
    st.text(max_size=60)
    | st.binary(max_size=60)
    | JSON.map(json.dumps)
    | shaped({"type": st.sampled_from(["offer", "hangup"]), "sdp": SDPISH}).map(json.dumps)
    | st.integers(64 * 1024 - 32, 100_000).map(
        lambda n: json.dumps({"type": "offer", "sdp": "v=0" + "x" * n})
    )
)

KINDS = st.sampled_from([kind.value for kind in audiosocket.Kind]) | st.integers(0, 255)
FRAMES = st.lists(
    st.tuples(KINDS, st.binary(max_size=400), st.none() | st.integers(0, 0xFFFF)).map(
        lambda f: bytes([f[0]]) + (len(f[1]) if f[2] is None else f[2]).to_bytes(2, "big") + f[1]
    ),
    max_size=5,
).map(b"".join)
"""AudioSocket frames: a known kind or any, a payload, and its own length or any other."""
AUDIOSOCKET_WIRE = st.binary(max_size=1200) | FRAMES


# --- the parsers ------------------------------------------------------------------------------


@PARSER
@given(TWILIO_WIRE)
def test_any_message_to_the_twilio_parser_is_a_model_or_a_twilio_message_error(
    raw: str | bytes,
) -> None:
    check_twilio_message(raw)


@PARSER
@given(TWILIO_OBJECT)
def test_a_twilio_shaped_message_is_a_model_or_a_twilio_message_error(raw: Any) -> None:
    check_twilio_message(json.dumps(raw))


def check_twilio_message(raw: str | bytes) -> None:
    try:
        message = twilio.parse_message(raw)
    except twilio.TwilioMessageError:
        return
    assert twilio.parse_message(twilio.encode(message)) == message
    if isinstance(message, twilio.MediaMessage):
        with contextlib.suppress(twilio.TwilioMessageError):
            message.media.audio()


def stream_of(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


@PARSER
@given(AUDIOSOCKET_WIRE)
async def test_an_audiosocket_stream_is_frames_then_an_end_or_a_protocol_error(data: bytes) -> None:
    reader = stream_of(data)
    read = 0
    async with asyncio.timeout(10):  # never waits for more than the stream holds
        while True:
            try:
                frame = await audiosocket.read_frame(reader)
            except audiosocket.AudioSocketProtocolError:
                return
            if frame is None:
                assert read == len(data)
                return
            wire = audiosocket.encode_frame(frame)  # what it read, byte for byte
            assert data[read : read + len(wire)] == wire
            read += len(wire)


@PARSER
@given(SIGNALING_WIRE)
def test_a_signaling_message_is_an_offer_a_hangup_or_a_signaling_error(raw: str | bytes) -> None:
    match parsed(raw):
        case SignalingError() as error:
            assert error.message
            assert error.close_code in (CloseCode.POLICY_VIOLATION, CloseCode.TOO_LARGE)
        case Offer(sdp=sdp):
            media = [line for line in sdp.splitlines() if line.startswith("m=")]
            assert sdp.startswith("v=0")
            assert len(media) == 1
            assert media[0].startswith("m=audio ")
        case parsed_message:
            assert isinstance(parsed_message, Hangup)


def parsed(raw: str | bytes) -> ClientMessage | SignalingError:
    try:
        return parse_client_message(raw)
    except SignalingError as exc:
        return exc


# --- a running server -------------------------------------------------------------------------


@pytest.fixture
async def server() -> AsyncIterator[CadenceServer]:
    config = web_config().model_copy(
        update={"telephony": TelephonyConfig(audiosocket=f"127.0.0.1:{free_port()}")}
    )
    async with CadenceServer(config) as running:
        yield running


START = [
    twilio.encode(twilio.ConnectedMessage()),
    twilio.encode(
        twilio.StartMessage(
            start=twilio.StreamStart(stream_sid="MZfuzz", media_format=twilio.TELEPHONE_FORMAT)
        )
    ),
]


async def hostile_twilio(server: CadenceServer, messages: list[str | bytes], started: bool) -> None:
    async with connect(f"ws://127.0.0.1:{server.port}/twilio") as websocket:
        with contextlib.suppress(ConnectionClosed):
            for message in [*START, *messages] if started else messages:
                await websocket.send(message)
    assert websocket.close_code != CloseCode.INTERNAL_ERROR


async def hostile_page(server: CadenceServer, messages: list[str | bytes]) -> None:
    async with connect(f"ws://127.0.0.1:{server.port}{SIGNALING_PATH}") as websocket:
        with contextlib.suppress(ConnectionClosed):
            for message in messages:
                await websocket.send(message)
            async with asyncio.timeout(10):
                async for event in websocket:  # to its close, if the server closes it
                    assert (
                        json.loads(event)["type"] != "error"
                        or json.loads(event)["code"] != "internal"
                    )
        await websocket.close()


async def hostile_asterisk(server: CadenceServer, data: bytes, call: uuid.UUID | None) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.audiosocket_port)
    try:
        if call is not None:
            writer.write(audiosocket.encode_frame(audiosocket.CallUUID(call)))
        writer.write(data)
        writer.write_eof()  # the server hangs up on anything that is not a whole frame
        async with asyncio.timeout(10):
            replies = await reader.read()
    finally:
        writer.close()
    frames = stream_of(replies)
    while (frame := await audiosocket.read_frame(frames)) is not None:
        assert isinstance(frame, audiosocket.Audio | audiosocket.Hangup)


async def test_hostile_input_leaves_the_server_serving_normal_calls(
    server: CadenceServer, caplog: pytest.LogCaptureFixture
) -> None:
    loop = asyncio.get_running_loop()

    def on_the_loop(coroutine: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout=30)

    @LIVE
    @given(st.lists(TWILIO_WIRE, min_size=1, max_size=6), st.booleans())
    def twilio_streams(messages: list[str | bytes], started: bool) -> None:
        on_the_loop(hostile_twilio(server, messages, started))

    @LIVE
    @given(st.lists(SIGNALING_WIRE, min_size=1, max_size=3))
    def pages(messages: list[str | bytes]) -> None:
        on_the_loop(hostile_page(server, messages))

    @LIVE
    @given(AUDIOSOCKET_WIRE, st.none() | st.uuids())
    def asterisks(data: bytes, call: uuid.UUID | None) -> None:
        on_the_loop(hostile_asterisk(server, data, call))

    # Hypothesis drives each from a thread of its own; the server runs on this loop.
    for fuzz in (twilio_streams, pages, asterisks):
        await asyncio.to_thread(fuzz)
    await wait_until(lambda: not server.calls, "the hostile calls to end")
    internal = server.metrics.registry.get_sample_value(
        "cadence_errors_total", {"kind": "internal"}
    )
    assert internal == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

    async with TwilioEmulator(f"ws://127.0.0.1:{server.port}/twilio") as phone:
        await phone.say(clip("osr_us_0034_8k_s01").telephone_audio(), 8000)
        deadline = time.monotonic() + 60  # a minute: however busy the machine
        while not phone.played and time.monotonic() < deadline:
            await phone.pause(100)
    assert phone.played, "no reply after the fuzzing"
    await wait_until(lambda: not server.calls, "the call to end")


# --- hostile configuration files --------------------------------------------------------------


def billion_laughs(opening: Callable[[int], str]) -> str:
    """Nine levels of nine aliases each: 9⁹ values once expanded, from ten lines."""
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &l{i} {opening(i)}" for i in range(1, 10)]
    return "overlays:\n  bomb:\n" + "".join(f"    {line}\n" for line in lines)


HOSTILE_CONFIGS = [
    pytest.param(
        "server:\n  port: eighty\n",
        r":2: server\.port: Input should be a valid integer",
        id="wrong-type",
    ),
    pytest.param(
        "server: [1, 2]\n", r":1: server: Input should be a valid dictionary", id="list-for-section"
    ),
    pytest.param(
        "servr:\n  port: 1\n",
        r":1: servr: unknown key \(did you mean `server`\?\)",
        id="unknown-key",
    ),
    pytest.param(
        "server:\n  prot: 1\n",
        r":2: server\.prot: unknown key \(did you mean `port`\?\)",
        id="unknown-nested-key",
    ),
    pytest.param(
        "server:\n  port: " + "9" * 40 + "\n",
        r"server\.port: Input should be less than or equal to 65535",
        id="huge-int",
    ),
    pytest.param(
        "budget:\n  stt: " + "9" * 400 + "\n",
        r"budget\.stt: Input should be a valid number",
        id="huge-for-float",
    ),
    pytest.param(
        "telephony:\n  twilio_max_messages_per_s: 1.0e+400\n",
        r"finite number",
        id="overflow-to-inf",
    ),
    pytest.param("vad:\n  mode: .nan\n", r"vad\.mode: Input should be a finite number", id="nan"),
    pytest.param(
        "server: !!python/object/apply:os.system [echo]\n",
        r"not valid YAML: could not determine a constructor",
        id="python-tag",
    ),
    pytest.param("just words\n", r":1: expected a mapping of sections", id="scalar"),
    pytest.param(
        billion_laughs(lambda i: "[" + ", ".join([f"*l{i - 1}"] * 9) + "]"),
        r"aliases expand it to .* \(a YAML bomb\?\)",
        id="billion-laughs",
    ),
    pytest.param(
        billion_laughs(lambda i: "{" + ", ".join(f"k{j}: *l{i - 1}" for j in range(9)) + "}"),
        r"aliases expand it to .* \(a YAML bomb\?\)",
        id="billion-laughs-of-mappings",
    ),
    pytest.param(
        "overlays: &me {x: *me}\n", r":1: an alias that contains itself", id="recursive-alias"
    ),
    pytest.param(
        "overlays: " + "[" * 5000 + "]" * 5000 + "\n", r"nested too deeply", id="deep-nesting"
    ),
]


@pytest.mark.parametrize(("text", "expected"), HOSTILE_CONFIGS)
def test_a_hostile_configuration_is_refused_with_a_clear_message(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=expected) as error:
        load_config(path)
    assert str(error.value).startswith(str(path))
    assert len(str(error.value)) < 1000


EXPANDED_BYTES = 10_000_000
"""Refusing a bomb takes kilobytes; anything that walked its expansion (9⁹ values; even one
level of it quoted in a message is megabytes) would take gigabytes, and minutes. Memory, unlike
time, does not depend on how busy the machine is."""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        p
        for p in HOSTILE_CONFIGS
        if p.id in {"billion-laughs", "billion-laughs-of-mappings", "recursive-alias"}
    ],
)
def test_a_yaml_bomb_is_refused_without_being_expanded(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        with pytest.raises(ConfigError, match=expected):
            load_config(path)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        if not tracing:
            tracemalloc.stop()
    assert peak < EXPANDED_BYTES


def test_a_file_that_is_not_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00server\x80")
    with pytest.raises(ConfigError, match=r"binary\.yaml: not UTF-8 text"):
        load_config(path)


def test_aliases_of_a_sensible_size_still_load(tmp_path: Path) -> None:
    path = tmp_path / "anchors.yaml"
    path.write_text(
        "overlays:\n  brisk: &brisk\n    turn: {end_of_turn: {max_wait_ms: 800}}\n"
        "  brisker: *brisk\n"
    )
    config = load_config(path)
    assert config.with_overlay("brisker") == config.with_overlay("brisk") != CadenceConfig()
