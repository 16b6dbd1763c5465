"""Access control (docs/security.md): shared-secret tokens on the signaling and Twilio
websockets, Twilio's request signature on the stream and the TwiML webhook, the Origin of
browser pages, message rates, the AudioSocket allow-list, and no secret in any log line.

Twilio's signatures are computed here independently, from the algorithm Twilio documents,
and checked against its documented example.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import urllib.error
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection
from twilio_phone import TwilioPhone
from web_harness import (
    chromium_page,
    fake_microphone,
    free_port,
    needs_chromium,
    wait_until,
    web_config,
)
from websockets.asyncio.client import ClientConnection, connect
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.http11 import Request
from websockets.typing import Origin

from cadence.pipeline.config import CadenceConfig, ConfigError, load_config
from cadence.tooling.emulators.twilio import TwilioEmulator
from cadence.web.access import (
    AccessConfigError,
    AccessPolicy,
    CredentialFilter,
    Secrets,
    peer_allowed,
    twilio_signature,
)
from cadence.web.rate_limit import MessageRate
from cadence.web.serializers.audiosocket import Audio, CallUUID, Hangup, encode_frame, read_frame
from cadence.web.serializers.twilio import encode, media_message
from cadence.web.server import CadenceServer
from cadence.web.signaling import CloseCode
from cadence.web.transports import PacedAudioTrack
from cadence.web.transports.webrtc import SIGNALING_PATH

TOKEN = "s3cret-token-0123456789abcdef"
TWILIO_AUTH_TOKEN = "f0e1d2c3b4a5968778695a4b3c2d1e0f"
TOKEN_ENV = "CADENCE_TEST_TOKEN"
TWILIO_ENV = "CADENCE_TEST_TWILIO_AUTH_TOKEN"


def sign(auth_token: str, url: str, params: dict[str, str] | None = None) -> str:
    """Twilio's documented algorithm: the URL, then each POST parameter's name and value in
    the order of the names; HMAC-SHA1 keyed with the auth token; base64."""
    text = url + "".join(f"{name}{value}" for name, value in sorted((params or {}).items()))
    return base64.b64encode(
        hmac.new(auth_token.encode(), text.encode(), hashlib.sha1).digest()
    ).decode()


def configured(**sections: dict[str, Any]) -> CadenceConfig:
    """``web_config()`` with the given keys of its sections changed."""
    base = web_config().model_dump()
    for name, changes in sections.items():
        base[name] = base[name] | changes
    return CadenceConfig.model_validate(base)


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setenv(TWILIO_ENV, TWILIO_AUTH_TOKEN)


@asynccontextmanager
async def serving(config: CadenceConfig) -> AsyncIterator[CadenceServer]:
    async with CadenceServer(config) as server:
        yield server
        await wait_until(lambda: not server.calls, "the calls to end")


def ws_url(server: CadenceServer, path: str) -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


async def refused_with(url: str, **options: Any) -> int:
    """The HTTP status a websocket handshake to ``url`` is refused with."""
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url, **options):
            pass
    status: int = refused.value.response.status_code
    return status


async def hello(websocket: ClientConnection) -> None:
    async with asyncio.timeout(10):
        assert json.loads(await websocket.recv())["type"] == "hello"


def get(url: str, headers: dict[str, str]) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


# --- the checks, without a server -------------------------------------------------------------


def test_the_signature_is_twilios_on_its_documented_example() -> None:
    # Twilio's security documentation (twilio-php's validation guide): this POST, signed with
    # the auth token 12345, carries this X-Twilio-Signature.
    url = "https://mycompany.com/myapp.php?foo=1&bar=2"
    params = {
        "CallSid": "CA1234567890ABCDE",
        "Caller": "+14158675309",
        "Digits": "1234",
        "From": "+14158675309",
        "To": "+18005551212",
    }
    expected = "RSOYDt4T1cUTdK1PDd93/VVr8B8="
    assert sign("12345", url, params) == expected
    assert twilio_signature("12345", url, {k: [v] for k, v in params.items()}) == expected
    # A name with several values: the name before each of its values, in sorted order.
    several = twilio_signature("k", "https://h/", {"b": ["2", "1"], "a": ["x"]})
    assert several == sign("k", "https://h/" + "ax" + "b1" + "b2")


def request_to(path: str, headers: dict[str, str]) -> Request:
    return Request(path, Headers(headers))


def test_a_signature_with_or_without_the_default_port_is_accepted() -> None:
    config = configured(telephony={"twilio_auth_token_env": TWILIO_ENV})
    policy = AccessPolicy(config, Secrets(twilio_auth_token=TWILIO_AUTH_TOKEN))
    for signed_url in ("wss://voice.example.com/twilio", "wss://voice.example.com:443/twilio"):
        headers = {
            "Host": "voice.example.com",
            "X-Twilio-Signature": sign(TWILIO_AUTH_TOKEN, signed_url),
        }
        assert policy.websocket(request_to("/twilio", headers), twilio=True) is None
    forged = {
        "Host": "voice.example.com",
        "X-Twilio-Signature": sign("another", "wss://voice.example.com/twilio"),
    }
    refusal = policy.websocket(request_to("/twilio", forged), twilio=True)
    assert refusal is not None
    assert refusal.status == 401
    # Signed for another host (the Host header is the attacker's to choose, the URL is not).
    elsewhere = {
        "Host": "evil.example",
        "X-Twilio-Signature": sign(TWILIO_AUTH_TOKEN, "wss://voice.example.com/twilio"),
    }
    refusal = policy.websocket(request_to("/twilio", elsewhere), twilio=True)
    assert refusal is not None
    assert refusal.status == 401


def test_a_message_rate_lets_a_burst_pass_and_stops_a_flood() -> None:
    now = [0.0]
    rate = MessageRate(10, clock=lambda: now[0])
    assert all(rate.allow() for _ in range(20))  # two seconds' worth at once
    assert not rate.allow()
    now[0] += 0.1  # one more message's worth
    assert rate.allow()
    assert not rate.allow()
    now[0] += 100.0  # a long quiet fills the bucket, no more
    assert sum(rate.allow() for _ in range(25)) == 20
    assert str(rate) == "10 messages per second"


def test_secrets_come_from_the_environment_and_are_never_shown() -> None:
    config = configured(
        server={"auth_token_env": TOKEN_ENV}, telephony={"twilio_auth_token_env": TWILIO_ENV}
    )
    secrets = Secrets.from_environment(config, {TOKEN_ENV: TOKEN, TWILIO_ENV: TWILIO_AUTH_TOKEN})
    assert (secrets.token, secrets.twilio_auth_token) == (TOKEN, TWILIO_AUTH_TOKEN)
    assert TOKEN not in repr(secrets)
    assert TWILIO_AUTH_TOKEN not in repr(secrets)
    with pytest.raises(AccessConfigError, match=rf"server.auth_token_env names \${TOKEN_ENV}"):
        Secrets.from_environment(config, {TWILIO_ENV: TWILIO_AUTH_TOKEN})
    with pytest.raises(AccessConfigError, match=rf"twilio_auth_token_env names \${TWILIO_ENV}"):
        Secrets.from_environment(config, {TOKEN_ENV: TOKEN, TWILIO_ENV: ""})
    with pytest.raises(AccessConfigError, match="at least 16 visible ASCII"):
        Secrets.from_environment(config, {TOKEN_ENV: "short", TWILIO_ENV: TWILIO_AUTH_TOKEN})
    assert Secrets.from_environment(web_config(), {}) == Secrets()


def test_the_audiosocket_allow_list() -> None:
    allow = ["10.0.0.5", "192.168.1.0/24", "fd00::/8"]
    assert peer_allowed("10.0.0.5", allow)
    assert peer_allowed("192.168.1.77", allow)
    assert peer_allowed("::ffff:10.0.0.5", allow)  # IPv4 on a dual-stack socket
    assert peer_allowed("fd00::1", allow)
    assert not peer_allowed("10.0.0.6", allow)
    assert not peer_allowed("127.0.0.1", allow)
    assert not peer_allowed("not an address", allow)
    assert peer_allowed("203.0.113.9", None)


def test_credentials_are_masked_in_log_records() -> None:
    masking = CredentialFilter()
    for message, args, secret in [
        ("< GET %s HTTP/1.1", ("/ws?a=1&token=" + TOKEN,), TOKEN),
        ("< %s: %s", ("Authorization", "Bearer " + TOKEN), TOKEN),
        ("< %s: %s", ("X-Twilio-Signature", "abc+/="), "abc+/="),
        ("headers %r", ({"authorization": "Bearer " + TOKEN},), TOKEN),
    ]:
        record = logging.LogRecord("websockets.server", logging.DEBUG, "", 0, message, args, None)
        assert masking.filter(record)
        assert secret not in record.getMessage()
        assert "***" in record.getMessage()


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        ("server", "allowed_origins", "[https://a.example/path]", "expected a scheme and a host"),
        ("server", "allowed_origins", "[ftp://a.example]", "expected a scheme and a host"),
        ("telephony", "public_url", "https://voice.example.com:99999", "Port out of range"),
        ("telephony", "public_url", "voice.example.com", "expected a scheme and a host"),
        ("telephony", "audiosocket_allow", "[10.0.0.300]", "does not appear to be an IPv4"),
        ("server", "max_messages_per_s", "0", "greater than 0"),
        ("telephony", "twilio_max_messages_per_s", ".inf", "finite number"),
        ("server", "auth_token_env", "[A, B]", "valid string"),
    ],
)
def test_bad_access_settings_are_refused_at_load(
    tmp_path: Path, section: str, key: str, value: str, expected: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"{section}:\n  {key}: {value}\n")
    with pytest.raises(ConfigError, match=expected) as error:
        load_config(path)
    assert f"{section}." in str(error.value)


def test_a_missing_secret_stops_the_server_before_it_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(AccessConfigError, match=TOKEN_ENV):
        CadenceServer(configured(server={"auth_token_env": TOKEN_ENV}))


# --- tokens -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("secrets")
async def test_the_websockets_need_the_token_when_one_is_configured() -> None:
    async with serving(configured(server={"auth_token_env": TOKEN_ENV})) as server:
        signaling = ws_url(server, SIGNALING_PATH)
        assert await refused_with(signaling) == 401
        assert await refused_with(signaling + "?token=not-the-token-at-all") == 401
        wrong = {"Authorization": "Bearer " + TOKEN[:-1] + "x"}
        assert await refused_with(signaling, additional_headers=wrong) == 401
        async with connect(f"{signaling}?token={TOKEN}") as websocket:
            await hello(websocket)
        async with connect(
            signaling, additional_headers={"Authorization": f"Bearer {TOKEN}"}
        ) as websocket:
            await hello(websocket)
        twilio = ws_url(server, "/twilio")
        assert await refused_with(twilio) == 401
        async with TwilioEmulator(twilio, headers={"Authorization": f"Bearer {TOKEN}"}) as phone:
            await wait_until(lambda: f"twilio-{phone.stream_sid}" in server.calls, "the call")
        # The page, health and metrics stay open: they carry no secret.
        status, _ = await asyncio.to_thread(get, server.url, {})
        assert status == 200
        assert (
            server.metrics.registry.get_sample_value("cadence_errors_total", {"kind": "internal"})
            == 0
        )


@needs_chromium
@pytest.mark.usefixtures("secrets")
async def test_the_page_forwards_the_token_it_was_opened_with(tmp_path: Path) -> None:
    microphone = fake_microphone(tmp_path / "mic.wav", [np.zeros(16000, dtype=np.int16)])
    async with (
        serving(configured(server={"auth_token_env": TOKEN_ENV})) as server,
        chromium_page(tmp_path / "profile", microphone) as page,
    ):
        await page.goto(server.url)
        await page.get_by_role("button", name="Start talking").click()
        # The handshake was refused (401): the call ends before it began.
        await page.wait_for_selector("#status[data-state=ended]", timeout=10_000)
        assert not server.calls

        await page.goto(f"{server.url}?token={TOKEN}&echo-cancellation=off")
        await page.get_by_role("button", name="Start talking").click()
        await wait_until(lambda: any(c.startswith("web-") for c in server.calls), "the page's call")
        await page.get_by_role("button", name="Hang up").click()


# --- Twilio's signature -----------------------------------------------------------------------


@pytest.mark.usefixtures("secrets")
async def test_the_twilio_stream_needs_twilios_signature_or_the_token() -> None:
    config = configured(
        server={"auth_token_env": TOKEN_ENV}, telephony={"twilio_auth_token_env": TWILIO_ENV}
    )
    async with serving(config) as server:
        twilio = ws_url(server, "/twilio")
        signed = f"wss://127.0.0.1:{server.port}/twilio"  # the URL Twilio was given, over TLS
        assert await refused_with(twilio) == 401
        forged = {"X-Twilio-Signature": sign("not-the-auth-token", signed)}
        assert await refused_with(twilio, additional_headers=forged) == 401
        plain = {"X-Twilio-Signature": sign(TWILIO_AUTH_TOKEN, signed.replace("wss:", "https:"))}
        assert await refused_with(twilio, additional_headers=plain) == 401
        genuine = {"X-Twilio-Signature": sign(TWILIO_AUTH_TOKEN, signed)}
        async with TwilioEmulator(twilio, headers=genuine) as phone:
            await wait_until(lambda: f"twilio-{phone.stream_sid}" in server.calls, "the call")
        async with TwilioEmulator(twilio, headers={"Authorization": f"Bearer {TOKEN}"}) as phone:
            await wait_until(lambda: f"twilio-{phone.stream_sid}" in server.calls, "the call")
        # The signaling socket takes the token only.
        assert await refused_with(ws_url(server, SIGNALING_PATH), additional_headers=genuine) == 401


def stream_of_twiml(document: str) -> tuple[str, dict[str, str]]:
    stream = ET.fromstring(document).find("./Connect/Stream")
    assert stream is not None
    parameters = {p.attrib["name"]: p.attrib["value"] for p in stream.findall("Parameter")}
    return stream.attrib["url"], parameters


@pytest.mark.usefixtures("secrets")
async def test_the_twiml_webhook_is_served_to_twilios_signed_get() -> None:
    config = configured(telephony={"twilio_auth_token_env": TWILIO_ENV})
    async with serving(config) as server:
        query = "?CallSid=CA0123&From=%2B14155550100&overlay=brisk"
        url = f"http://127.0.0.1:{server.port}/twilio/twiml{query}"
        signed = f"https://127.0.0.1:{server.port}/twilio/twiml{query}"
        status, _ = await asyncio.to_thread(get, url, {})
        assert status == 401
        status, _ = await asyncio.to_thread(get, url, {"X-Twilio-Signature": sign("other", signed)})
        assert status == 401
        headers = {"X-Twilio-Signature": sign(TWILIO_AUTH_TOKEN, signed)}
        status, document = await asyncio.to_thread(get, url, headers)
        assert status == 200
        assert stream_of_twiml(document) == (
            f"wss://127.0.0.1:{server.port}/twilio",
            {"overlay": "brisk"},
        )

    public = configured(
        telephony={"twilio_auth_token_env": TWILIO_ENV, "public_url": "https://voice.example.com"}
    )
    async with serving(public) as server:
        url = f"http://127.0.0.1:{server.port}/twilio/twiml"
        headers = {
            "X-Twilio-Signature": sign(TWILIO_AUTH_TOKEN, "https://voice.example.com/twilio/twiml")
        }
        status, document = await asyncio.to_thread(get, url, headers)
        assert status == 200
        assert stream_of_twiml(document) == ("wss://voice.example.com/twilio", {})


async def test_without_secrets_the_twiml_is_open_and_names_the_requested_host() -> None:
    async with serving(web_config()) as server:
        status, document = await asyncio.to_thread(
            get, f"http://127.0.0.1:{server.port}/twilio/twiml", {"Host": "voice.example.com"}
        )
        assert status == 200
        assert stream_of_twiml(document) == ("wss://voice.example.com/twilio", {})


# --- origins ----------------------------------------------------------------------------------


async def test_only_the_servers_own_pages_may_open_its_websockets() -> None:
    async with serving(web_config()) as server:
        signaling = ws_url(server, SIGNALING_PATH)
        own = f"http://127.0.0.1:{server.port}"
        async with connect(signaling, origin=Origin(own)) as websocket:
            await hello(websocket)
        async with connect(signaling) as websocket:  # no Origin: not a browser
            await hello(websocket)
        for other in ("http://evil.example", f"http://localhost:{server.port}", "null"):
            assert await refused_with(signaling, origin=other) == 403, other
        assert await refused_with(ws_url(server, "/twilio"), origin="http://evil.example") == 403


async def test_allowed_origins_replace_the_servers_own() -> None:
    config = configured(server={"allowed_origins": ["https://voice.example.com:443"]})
    async with serving(config) as server:
        signaling = ws_url(server, SIGNALING_PATH)
        async with connect(signaling, origin=Origin("https://voice.example.com")) as websocket:
            await hello(websocket)
        assert await refused_with(signaling, origin=f"http://127.0.0.1:{server.port}") == 403


# --- rates ------------------------------------------------------------------------------------


async def test_a_page_over_its_message_rate_is_closed_with_1008() -> None:
    async with serving(configured(server={"max_messages_per_s": 0.1})) as server:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTrack(PacedAudioTrack())
        try:
            await pc.setLocalDescription(await pc.createOffer())
            async with connect(ws_url(server, SIGNALING_PATH)) as websocket:
                await hello(websocket)
                await websocket.send(json.dumps({"type": "offer", "sdp": pc.localDescription.sdp}))
                await websocket.send(json.dumps({"type": "offer", "sdp": pc.localDescription.sdp}))
                async with asyncio.timeout(15):
                    while (event := json.loads(await websocket.recv()))["type"] != "error":
                        pass
                assert event["code"] == "rate_limited"
                assert event["message"] == "over 0.1 messages per second"
                with pytest.raises(ConnectionClosed):
                    await websocket.recv()
                assert websocket.close_code == CloseCode.POLICY_VIOLATION
        finally:
            await pc.close()


async def test_a_twilio_stream_over_its_message_rate_is_closed_with_1008(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with serving(configured(telephony={"twilio_max_messages_per_s": 10.0})) as server:
        async with TwilioPhone(ws_url(server, "/twilio")) as phone:
            silence = encode(media_message(phone.stream_sid, bytes(160)))
            with contextlib.suppress(ConnectionClosed):
                for _ in range(100):  # five times the burst (20 at 10 per second), at once
                    await phone.send_raw(silence)
            await phone.closed()
        assert phone.close_code == CloseCode.POLICY_VIOLATION
        assert phone.close_reason == "over 10 messages per second"
        assert "closing the stream: over 10 messages per second" in caplog.text


async def test_an_audiosocket_call_over_its_frame_rate_is_hung_up() -> None:
    config = configured(
        telephony={"audiosocket": f"127.0.0.1:{free_port()}", "audiosocket_max_frames_per_s": 10.0}
    )
    async with serving(config) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.audiosocket_port)
        silence = encode_frame(Audio(np.zeros(160, dtype=np.int16)))
        writer.write(encode_frame(CallUUID(uuid.uuid4())) + silence * 40)
        async with asyncio.timeout(10):
            frames = [frame async for frame in frames_until_closed(reader)]
        writer.close()
        assert frames[-1:] == [Hangup()]


async def frames_until_closed(reader: asyncio.StreamReader) -> AsyncIterator[object]:
    while (frame := await read_frame(reader)) is not None:
        yield frame


# --- the AudioSocket allow-list ---------------------------------------------------------------


@pytest.mark.parametrize(("allow", "admitted"), [(["10.0.0.0/8"], False), (["127.0.0.1"], True)])
async def test_audiosocket_peers_outside_the_allow_list_are_hung_up_on(
    caplog: pytest.LogCaptureFixture, allow: list[str], admitted: bool
) -> None:
    config = configured(
        telephony={"audiosocket": f"127.0.0.1:{free_port()}", "audiosocket_allow": allow}
    )
    async with serving(config) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.audiosocket_port)
        if admitted:  # (a refused peer is hung up on before anything of it is read)
            call = uuid.uuid4()
            writer.write(encode_frame(CallUUID(call)))
            await wait_until(lambda: f"audiosocket-{call}" in server.calls, "the call")
            writer.write(encode_frame(Hangup()))
        async with asyncio.timeout(10):
            frames = [frame async for frame in frames_until_closed(reader)]
        writer.close()
    refused = "refused: not in telephony.audiosocket_allow" in caplog.text
    assert refused is not admitted
    assert frames == ([] if admitted else [Hangup()])


# --- no secret in the logs --------------------------------------------------------------------


@pytest.mark.usefixtures("secrets")
async def test_no_token_or_signature_is_ever_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # websockets logs requests' lines and headers at debug
    wrong = "wrong-token-abcdef0123456789"
    config = configured(
        server={"auth_token_env": TOKEN_ENV}, telephony={"twilio_auth_token_env": TWILIO_ENV}
    )
    async with serving(config) as server:
        signaling = ws_url(server, SIGNALING_PATH)
        assert await refused_with(f"{signaling}?token={wrong}") == 401
        assert (
            await refused_with(signaling, additional_headers={"Authorization": f"Bearer {wrong}"})
            == 401
        )
        async with connect(f"{signaling}?token={TOKEN}") as websocket:
            await hello(websocket)
            await websocket.send(json.dumps({"type": "hangup"}))
        signature = sign(TWILIO_AUTH_TOKEN, f"wss://127.0.0.1:{server.port}/twilio")
        async with TwilioEmulator(
            ws_url(server, "/twilio"), headers={"X-Twilio-Signature": signature}
        ) as phone:
            await wait_until(lambda: f"twilio-{phone.stream_sid}" in server.calls, "the call")
    server_side = [r for r in caplog.records if not r.name.startswith("websockets.client")]
    text = "\n".join(record.getMessage() for record in server_side)
    assert "refused /ws from 127.0.0.1:" in text
    assert "token=***" in text  # the request lines were logged, masked
    for secret in (TOKEN, wrong, signature, TWILIO_AUTH_TOKEN):
        assert secret not in text
