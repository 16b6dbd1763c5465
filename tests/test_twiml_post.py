"""Twilio's voice webhook as Twilio sends it by default: a form-encoded ``POST`` of the call's
details, signed with ``X-Twilio-Signature`` over the URL and the sorted parameters — answered
with the TwiML on the port that ``websockets`` serves (``web/request_body.py``), and refused
when the signature is wrong, covers other parameters, or covers the URL alone. And what the
other methods get on every path.

The signature is computed here from Twilio's documented algorithm, independently of
``cadence.web.access``; the emulator's webhook (``fetch_twiml``) is checked against it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import socket
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from web_harness import wait_until, web_config

from cadence.pipeline.config import CadenceConfig
from cadence.tooling.emulators.twilio import (
    TwilioEmulator,
    TwiMLStream,
    call_details,
    fetch_twiml,
)
from cadence.web.request_body import MAX_BODY_BYTES
from cadence.web.server import CadenceServer

AUTH_TOKEN = "0123456789abcdef0123456789abcdef"
TWILIO_ENV = "CADENCE_TEST_TWIML_AUTH_TOKEN"
FORM = "application/x-www-form-urlencoded"


def twilio_sign(auth_token: str, url: str, params: dict[str, str]) -> str:
    """Twilio's "Secure your webhooks" algorithm: the full URL, then each POST parameter's
    name and value, sorted by name; HMAC-SHA1 keyed with the auth token; base64."""
    text = url + "".join(name + params[name] for name in sorted(params))
    digest = hmac.new(auth_token.encode(), text.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


@asynccontextmanager
async def serving(config: CadenceConfig) -> AsyncIterator[CadenceServer]:
    async with CadenceServer(config) as server:
        yield server
        await wait_until(lambda: not server.calls, "the calls to end")


def signed_config() -> CadenceConfig:
    base = web_config().model_dump()
    base["telephony"] |= {"twilio_auth_token_env": TWILIO_ENV}
    return CadenceConfig.model_validate(base)


def request(
    url: str, *, method: str = "GET", body: bytes | None = None, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one request (blocking)."""
    sent = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(sent, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def post_form(url: str, params: dict[str, str], headers: dict[str, str]) -> tuple[int, bytes]:
    body = urllib.parse.urlencode(params).encode()
    status, _, answer = request(
        url, method="POST", body=body, headers={"Content-Type": FORM, **headers}
    )
    return status, answer


def post_expecting_continue(port: int, path: str, body: bytes, signature: str) -> bytes:
    """A POST as curl sends a larger one: the head with ``Expect: 100-continue``, the body
    only once the server said ``100 Continue``. Returns what came after it."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {FORM}\r\n"
        f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n"
        f"X-Twilio-Signature: {signature}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(head)
        interim = connection.recv(1024)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), interim
        connection.sendall(body)
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
        return received


def stream_of(document: bytes) -> tuple[str, dict[str, str]]:
    stream = ET.fromstring(document).find("./Connect/Stream")
    assert stream is not None
    return stream.attrib["url"], {p.attrib["name"]: p.attrib["value"] for p in stream}


async def test_the_twiml_answers_a_post_signed_as_twilio_signs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TWILIO_ENV, AUTH_TOKEN)
    async with serving(signed_config()) as server:
        path = "/twilio/twiml?overlay=brisk"
        url = f"http://127.0.0.1:{server.port}{path}"
        signed_url = f"https://127.0.0.1:{server.port}{path}"  # what Twilio was given
        # A caller's number has a `+`, which form encoding writes as %2B; blank values
        # (CalledCity) are signed too.
        params = call_details("CA" + "1" * 32)
        genuine = {"X-Twilio-Signature": twilio_sign(AUTH_TOKEN, signed_url, params)}

        status, document = await asyncio.to_thread(post_form, url, params, genuine)
        assert status == 200, document
        expected = (f"wss://127.0.0.1:{server.port}/twilio", {"overlay": "brisk"})
        assert stream_of(document) == expected

        # The emulator's webhook, signed by the server's own code, is the same request.
        twiml = await asyncio.to_thread(
            fetch_twiml, url, auth_token=AUTH_TOKEN, params=params, signed_url=signed_url
        )
        assert twiml == TwiMLStream(*expected)

        refused = {
            "another auth token": {"X-Twilio-Signature": twilio_sign("x" * 32, signed_url, params)},
            "the URL alone": {"X-Twilio-Signature": twilio_sign(AUTH_TOKEN, signed_url, {})},
            "no signature": {},
        }
        for why, headers in refused.items():
            status, _ = await asyncio.to_thread(post_form, url, params, headers)
            assert status == 401, why
        # A parameter changed after signing: the signature covers the body.
        tampered = params | {"From": "+14155550666"}
        status, _ = await asyncio.to_thread(post_form, url, tampered, genuine)
        assert status == 401

        # GET is kept: the parameters in the query string, the signature over the URL.
        query = "?" + urllib.parse.urlencode(params)
        get_signature = twilio_sign(
            AUTH_TOKEN, f"https://127.0.0.1:{server.port}/twilio/twiml{query}", {}
        )
        status, _, document = await asyncio.to_thread(
            request,
            f"http://127.0.0.1:{server.port}/twilio/twiml{query}",
            headers={"X-Twilio-Signature": get_signature},
        )
        assert status == 200
        assert stream_of(document)[0] == expected[0]

        # A client that waits for `100 Continue` before the body gets it.
        body = urllib.parse.urlencode(params).encode()
        answer = await asyncio.to_thread(
            post_expecting_continue, server.port, path, body, genuine["X-Twilio-Signature"]
        )
        head, _, document = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK"), head
        assert stream_of(document) == expected

        # And the stream it names takes the call, with the overlay's parameter.
        stream_url = twiml.url.replace("wss://", "ws://")  # no TLS proxy in the test
        stream_signature = twilio_sign(AUTH_TOKEN, twiml.url, {})
        async with TwilioEmulator(
            stream_url,
            custom_parameters=twiml.parameters,
            headers={"X-Twilio-Signature": stream_signature},
        ) as phone:
            await wait_until(lambda: f"twilio-{phone.stream_sid}" in server.calls, "the call")


async def test_each_path_answers_its_methods_only() -> None:
    async with serving(web_config()) as server:
        base = f"http://127.0.0.1:{server.port}"
        params = call_details("CA" + "2" * 32)

        # Without an auth token the TwiML is open, by POST as by GET.
        status, document = await asyncio.to_thread(post_form, f"{base}/twilio/twiml", params, {})
        assert status == 200
        assert stream_of(document)[0] == f"wss://127.0.0.1:{server.port}/twilio"

        status, headers, _ = await asyncio.to_thread(
            request, f"{base}/twilio/twiml", method="PUT", body=b"x", headers={}
        )
        assert (status, headers["Allow"]) == (405, "GET, HEAD, POST")
        for path in ("/healthz", "/", "/ws"):
            status, headers, _ = await asyncio.to_thread(
                request,
                f"{base}{path}",
                method="POST",
                body=b"a=1",
                headers={"Content-Type": FORM},
            )
            assert status == 405, path
            assert headers["Allow"] == ("GET" if path == "/ws" else "GET, HEAD")

        status, headers, body = await asyncio.to_thread(
            request, f"{base}/healthz", method="HEAD", headers={}
        )
        assert (status, body) == (200, b"")
        assert int(headers["Content-Length"]) > 0  # the length of what GET would send

        not_a_form = {"Content-Type": "application/json"}
        status, _, _ = await asyncio.to_thread(
            request, f"{base}/twilio/twiml", method="POST", body=b"{}", headers=not_a_form
        )
        assert status == 415
        too_large = urllib.parse.urlencode({"a": "x" * MAX_BODY_BYTES}).encode()
        status, _, _ = await asyncio.to_thread(
            request,
            f"{base}/twilio/twiml",
            method="POST",
            body=too_large,
            headers={"Content-Type": FORM},
        )
        assert status == 413
        # The server still serves after all that.
        status, _, _ = await asyncio.to_thread(request, f"{base}/healthz", headers={})
        assert status == 200
