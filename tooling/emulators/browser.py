"""``BrowserEmulator``: the demo page's side of a call, without a browser — the signaling
websocket and an aiortc peer connection whose microphone plays recorded speech — for
``cadence loadtest --transport webrtc``, where a headless Chromium per caller would not fit
on the machine beside the server.

It speaks the page's protocol (docs/web.md): reads ``hello``, sends the ``offer``, applies
the ``answer``; the reply arrives as WebRTC audio, which it reads and times (the first
frame with sound is when the caller starts hearing the reply), and the server's turn traces
arrive as ``trace`` events. Times are milliseconds on the emulator's own monotonic clock.
"""

from __future__ import annotations

import asyncio
import json
import time
from types import TracebackType

import numpy as np
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from av import AudioFrame
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from cadence.pipeline.tracing import TurnTrace
from cadence.tooling.emulators.hearing import PlayedAudio, audible_at_ms
from cadence.voice.audio import PCM16, resample
from cadence.web.transports.audio_track import PacedAudioTrack


class BrowserEmulator:
    def __init__(self, url: str) -> None:
        self.url = url
        self.session_id = ""
        self.traces: list[TurnTrace] = []
        self.heard_at_ms: list[float] = []
        """When each audible window of the reply audio came out of aiortc's jitter buffer
        (``hearing``'s rule) — a lower bound of when a browser plays it."""
        self.refused = False
        self._origin = time.perf_counter()
        self._microphone = PacedAudioTrack()
        self._pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self._ws: ClientConnection | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._spoken_until_ms = 0.0
        self._connected = asyncio.Event()

    def now_ms(self) -> float:
        return (time.perf_counter() - self._origin) * 1000.0

    async def __aenter__(self) -> BrowserEmulator:
        self._ws = await connect(self.url)
        hello = json.loads(await self._ws.recv())
        if hello["type"] == "error":  # the server is full
            self.refused = True
            return self
        self.session_id = hello["session_id"]
        self._pc.addTrack(self._microphone)
        self._pc.on("track", self._on_track)
        self._pc.on("connectionstatechange", self._on_state)
        await self._pc.setLocalDescription(await self._pc.createOffer())
        await self._ws.send(json.dumps({"type": "offer", "sdp": self._pc.localDescription.sdp}))
        self._tasks.append(asyncio.create_task(self._events(), name=f"{self.session_id}:events"))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._ws is not None and not self.refused:
            try:
                await self._ws.send(json.dumps({"type": "hangup"}))
                await self._ws.wait_closed()  # after the last trace event
            except ConnectionClosed:
                pass
        if self._ws is not None:
            await self._ws.close()
        await self._pc.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def say(self, pcm: PCM16, sample_rate: int) -> float:
        """Queue ``pcm`` on the microphone after what is queued; returns when (on this clock)
        it will start being sent."""
        start = max(self.now_ms(), self._spoken_until_ms)
        self._microphone.play(resample(pcm, sample_rate, self._microphone.sample_rate))
        self._spoken_until_ms = start + 1000.0 * len(pcm) / sample_rate
        return start

    async def pause(self, ms: float) -> None:
        """Let ``ms`` go by, the microphone playing on what is queued (silence after it)."""
        await asyncio.sleep(ms / 1000.0)

    async def connected(self, timeout_s: float = 10.0) -> None:
        """Wait until the media flows (ICE and DTLS are done)."""
        async with asyncio.timeout(timeout_s):
            await self._connected.wait()

    def _on_state(self) -> None:
        if self._pc.connectionState == "connected":
            self._connected.set()

    def _on_track(self, track: MediaStreamTrack) -> None:
        self._tasks.append(asyncio.create_task(self._listen(track), name="browser:listen"))

    async def _listen(self, track: MediaStreamTrack) -> None:
        while True:
            frame = await track.recv()
            if isinstance(frame, AudioFrame):
                samples = np.asarray(frame.to_ndarray(), dtype=np.int16).reshape(-1)
                rate = frame.sample_rate * len(samples) // frame.samples  # channels interleaved
                self.heard_at_ms += audible_at_ms([PlayedAudio(self.now_ms(), samples, rate)])

    @property
    def first_heard_ms(self) -> float | None:
        """When the page first heard the reply; ``None`` if nothing audible has come."""
        return next(iter(self.heard_at_ms), None)

    async def _events(self) -> None:
        assert self._ws is not None
        try:
            async for raw in self._ws:
                event = json.loads(raw)
                if event["type"] == "answer":
                    answer = RTCSessionDescription(event["sdp"], "answer")
                    await self._pc.setRemoteDescription(answer)
                elif event["type"] == "trace":
                    self.traces.append(TurnTrace.model_validate(event["trace"]))
        except ConnectionClosed:
            pass
