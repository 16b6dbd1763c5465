"""The demo server's protocol without a browser: HTTP routes, hostile signaling, the session
limit, and a visitor who vanishes in the middle of a turn (a Python WebRTC client)."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from speech_data import clip, with_silence
from web_harness import free_port, running_server, wait_until, web_config
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from cadence.pipeline.config import render_config
from cadence.pipeline.frames import Frame
from cadence.pipeline.stages import VADStage
from cadence.voice.audio import resample
from cadence.web.server import CadenceServer
from cadence.web.signaling import MAX_MESSAGE_BYTES, CloseCode
from cadence.web.transports import PacedAudioTrack
from cadence.web.transports import webrtc as webrtc_transport
from cadence.web.transports.webrtc import SIGNALING_PATH, WebRTCCall


@pytest.fixture
async def server() -> AsyncIterator[CadenceServer]:
    async with running_server(web_config(max_sessions=2)) as running:
        yield running


def get(server: CadenceServer, path: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(server.url.rstrip("/") + path, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


@asynccontextmanager
async def visitor(server: CadenceServer) -> AsyncIterator[ClientConnection]:
    """A signaling connection whose ``hello`` was read."""
    async with connect(f"ws://127.0.0.1:{server.port}{SIGNALING_PATH}") as websocket:
        hello = json.loads(await websocket.recv())
        assert hello["type"] == "hello"
        yield websocket


async def next_event(websocket: ClientConnection, kind: str, timeout_s: float = 30) -> Any:
    """The next event of type ``kind``, skipping the others."""
    async with asyncio.timeout(timeout_s):
        while (event := json.loads(await websocket.recv()))["type"] != kind:
            pass
    return event


async def closed_with(websocket: ClientConnection) -> int | None:
    with pytest.raises(ConnectionClosed):
        async with asyncio.timeout(10):
            await websocket.recv()
    return websocket.close_code


async def offer(pc: RTCPeerConnection) -> str:
    """An offer with one audio stream; aiortc gathers every candidate before it returns."""
    await pc.setLocalDescription(await pc.createOffer())
    sdp: str = pc.localDescription.sdp
    return sdp


def errors(server: CadenceServer, kind: str) -> float | None:
    return server.metrics.registry.get_sample_value("cadence_errors_total", {"kind": kind})


async def test_the_page_health_and_metrics_are_served(server: CadenceServer) -> None:
    status, content_type, body = await asyncio.to_thread(get, server, "/")
    assert (status, content_type) == (200, "text/html; charset=utf-8")
    assert b"Start talking" in body
    status, content_type, _ = await asyncio.to_thread(get, server, "/static/app.js")
    assert (status, content_type) == (200, "text/javascript; charset=utf-8")
    status, _, body = await asyncio.to_thread(get, server, "/healthz")
    assert status == 200
    assert json.loads(body) == {
        "status": "ok",
        "sessions": 0,
        "max_sessions": 2,
        "draining": False,
        "pid": os.getpid(),
    }
    status, _, body = await asyncio.to_thread(get, server, "/metrics")
    assert status == 200
    assert b"cadence_sessions 0.0" in body
    assert b'cadence_errors_total{kind="refused"} 0.0' in body
    for outside in ("/static/%2e%2e/server.py", "/static/../call.py", "/nowhere"):
        status, _, _ = await asyncio.to_thread(get, server, outside)
        assert status == 404, outside


HOSTILE = [
    pytest.param(b"\x00\x01", "bad_message", CloseCode.POLICY_VIOLATION, id="binary"),
    pytest.param("hello?", "bad_json", CloseCode.POLICY_VIOLATION, id="not-json"),
    pytest.param("[1, 2]", "bad_message", CloseCode.POLICY_VIOLATION, id="not-an-object"),
    pytest.param('{"type": "subscribe"}', "unknown_type", CloseCode.POLICY_VIOLATION, id="type"),
    pytest.param('{"type": "offer"}', "bad_offer", CloseCode.POLICY_VIOLATION, id="no-sdp"),
    pytest.param(
        json.dumps({"type": "offer", "sdp": "v=0\r\nm=audio 9 RTP/AVP 0\r\nm=video 9 RTP/AVP 96"}),
        "bad_offer",
        CloseCode.POLICY_VIOLATION,
        id="video",
    ),
    pytest.param(
        json.dumps({"type": "offer", "sdp": "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=🙃"}),
        "bad_offer",
        CloseCode.POLICY_VIOLATION,
        id="garbled-sdp",
    ),
    pytest.param(
        json.dumps({"type": "offer", "sdp": "v=0" + "x" * MAX_MESSAGE_BYTES}),
        "too_large",
        CloseCode.TOO_LARGE,
        id="too-large",
    ),
]


@pytest.mark.parametrize(("message", "code", "close_code"), HOSTILE)
async def test_bad_signaling_gets_an_error_and_a_clean_close(
    server: CadenceServer, message: str | bytes, code: str, close_code: CloseCode
) -> None:
    async with visitor(server) as websocket:
        await websocket.send(message)
        error = await next_event(websocket, "error")
        assert error["code"] == code
        assert error["message"]
        assert await closed_with(websocket) == close_code
    await wait_until(lambda: not server.calls, "the call to end")
    assert errors(server, "signaling") == 1
    assert server.metrics.registry.get_sample_value("cadence_sessions") == 0


async def test_a_message_beyond_any_limit_is_cut_off_unread(server: CadenceServer) -> None:
    async with visitor(server) as websocket:
        await websocket.send("x" * (4 * MAX_MESSAGE_BYTES))
        assert await closed_with(websocket) == CloseCode.TOO_LARGE
    await wait_until(lambda: not server.calls, "the call to end")


async def test_a_second_offer_is_refused(server: CadenceServer) -> None:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTrack(PacedAudioTrack())
    try:
        async with visitor(server) as websocket:
            sdp = await offer(pc)
            await websocket.send(json.dumps({"type": "offer", "sdp": sdp}))
            await next_event(websocket, "answer")
            await websocket.send(json.dumps({"type": "offer", "sdp": sdp}))
            assert (await next_event(websocket, "error"))["code"] == "duplicate_offer"
            assert await closed_with(websocket) == CloseCode.POLICY_VIOLATION
    finally:
        await pc.close()
    await wait_until(lambda: not server.calls, "the call to end")


async def test_a_visitor_who_sends_no_offer_gives_the_place_back(
    server: CadenceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webrtc_transport, "OFFER_TIMEOUT_S", 0.3)
    async with visitor(server) as websocket:
        assert (await next_event(websocket, "error"))["code"] == "no_offer"
        assert await closed_with(websocket) == CloseCode.POLICY_VIOLATION
    await wait_until(lambda: not server.calls, "the call to end")


async def test_past_the_session_limit_a_newcomer_is_refused(server: CadenceServer) -> None:
    async with visitor(server), visitor(server):
        async with connect(f"ws://127.0.0.1:{server.port}{SIGNALING_PATH}") as third:
            refusal = json.loads(await third.recv())
            assert refusal["type"] == "error"
            assert refusal["code"] == "busy"
            assert "full (2 calls at once)" in refusal["message"]
            assert await closed_with(third) == CloseCode.TRY_AGAIN_LATER
        _, _, health = await asyncio.to_thread(get, server, "/healthz")
        assert json.loads(health)["sessions"] == 2
    await wait_until(lambda: not server.calls, "the calls to end")
    assert errors(server, "refused") == 1
    async with visitor(server):  # the places are free again
        pass


async def test_a_visitor_who_vanishes_mid_turn_leaves_nothing_behind(
    server: CadenceServer,
) -> None:
    speech = with_silence(clip("ds_ldc93s1_16k").audio(), before_ms=500, after_ms=3000)
    microphone = PacedAudioTrack()
    microphone.play(resample(speech, 16000, microphone.sample_rate))
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTrack(microphone)
    try:
        async with visitor(server) as websocket:
            await websocket.send(json.dumps({"type": "offer", "sdp": await offer(pc)}))
            answer = await next_event(websocket, "answer")
            await pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
            await next_event(websocket, "agent_text")  # the reply is under way
            [call] = server.calls.values()
            assert isinstance(call, WebRTCCall)
            tasks = call.tasks
            assert len(tasks) > 5, [t.get_name() for t in tasks]  # stages at work
            assert call.peer is not None
            assert call.session is not None
            server_pc = call.peer.pc
            gone = [weakref.ref(x) for x in (call, call.session, call.peer, server_pc)]
            del call
            websocket.transport.abort()  # no close frame: the tab died
        await wait_until(lambda: not server.calls, "the server to notice")
    finally:
        await pc.close()
    assert server.metrics.registry.get_sample_value("cadence_sessions") == 0
    assert all(task.done() for task in tasks), [t.get_name() for t in tasks if not t.done()]
    assert server_pc.connectionState == "closed"
    del tasks, server_pc
    gc.collect()
    assert [ref() for ref in gone] == [None] * len(gone), "the call is still referenced"


async def test_a_peer_connection_closed_by_the_browser_ends_the_call(
    server: CadenceServer,
) -> None:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTrack(PacedAudioTrack())
    try:
        async with visitor(server) as websocket:
            await websocket.send(json.dumps({"type": "offer", "sdp": await offer(pc)}))
            answer = await next_event(websocket, "answer")
            await pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
            await wait_until(lambda: pc.connectionState == "connected", "the connection")
            await pc.close()  # the websocket stays open
            assert (await next_event(websocket, "error"))["code"] == "connection_lost"
            assert await closed_with(websocket) == CloseCode.GOING_AWAY
    finally:
        await pc.close()
    await wait_until(lambda: not server.calls, "the call to end")
    assert errors(server, "connection_lost") == 1


async def test_a_failing_session_ends_the_call_with_an_error(
    server: CadenceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: VADStage, frame: Frame) -> None:
        raise RuntimeError("injected fault")

    monkeypatch.setattr(VADStage, "process", broken)
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTrack(PacedAudioTrack())  # silence is audio too: the first frame trips the fault
    try:
        async with visitor(server) as websocket:
            await websocket.send(json.dumps({"type": "offer", "sdp": await offer(pc)}))
            answer = await next_event(websocket, "answer")
            await pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
            assert (await next_event(websocket, "error"))["code"] == "session_failed"
            assert await closed_with(websocket) == CloseCode.INTERNAL_ERROR
    finally:
        await pc.close()
    await wait_until(lambda: not server.calls, "the call to end")
    assert errors(server, "session_failed") == 1


def test_cadence_serve_prints_its_url_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    config = web_config()
    path = tmp_path / "cadence.yaml"
    path.write_text(render_config(config))
    command = [str(Path(sys.executable).parent / "cadence"), "serve", "--config", str(path)]
    port = free_port()
    with subprocess.Popen(
        [*command, "--port", str(port)], stdout=subprocess.PIPE, text=True
    ) as process:
        assert process.stdout is not None
        banner = process.stdout.readline()
        url = f"http://127.0.0.1:{port}/"
        assert url in banner
        with urllib.request.urlopen(url + "healthz", timeout=10) as response:
            assert json.loads(response.read())["status"] == "ok"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
