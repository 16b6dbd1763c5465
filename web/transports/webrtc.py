"""``WebRTCTransport``: one visitor's peer connection — their microphone in, the agent's voice
out.

The browser offers one audio stream (send and receive); the answer attaches a
:class:`PacedAudioTrack` to it. Every frame the browser sends is decoded by aiortc (Opus,
48 kHz, usually stereo), mixed down to mono 16-bit and handed to ``on_audio`` as it is; the
voice session resamples. No STUN or TURN server is configured: the demo serves visitors that
can reach this machine's own addresses.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame

from voice.audio import PCM16
from web.transports.audio_track import PacedAudioTrack

logger = logging.getLogger(__name__)

OUTPUT_SAMPLE_RATE = 48000
"""The rate of the agent's voice on the track: Opus's own, so aiortc never resamples it."""

AudioHandler = Callable[[PCM16, int], Awaitable[None]]
"""Receives each chunk of the caller's audio: mono PCM16 and its sample rate."""


class WebRTCTransport:
    def __init__(self, *, name: str, on_audio: AudioHandler, on_lost: Callable[[], None]) -> None:
        self.name = name
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.output = PacedAudioTrack(OUTPUT_SAMPLE_RATE)
        self._on_audio = on_audio
        self._on_lost = on_lost
        self._closing = False
        self._inbound: asyncio.Task[None] | None = None
        self.pc.on("track", self._on_track)
        self.pc.on("connectionstatechange", self._on_connection_state)

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The task this transport runs (the inbound audio pump), while it runs."""
        return [t for t in (self._inbound,) if t is not None and not t.done()]

    async def answer(self, offer_sdp: str) -> str:
        """Accept the browser's offer (with its ICE candidates) and return the answer's SDP,
        with ours: ICE gathering finishes before this returns."""
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
        self.pc.addTrack(self.output)
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        return self.pc.localDescription.sdp

    async def close(self) -> None:
        """Stop reading the caller, close the peer connection; every task of it is over."""
        self._closing = True
        if self._inbound is not None:
            self._inbound.cancel()
            await asyncio.gather(self._inbound, return_exceptions=True)
        self.output.stop()
        await self.pc.close()

    def _on_track(self, track: MediaStreamTrack) -> None:
        # The offer was checked to carry exactly one audio stream.
        if track.kind == "audio" and self._inbound is None:
            self._inbound = asyncio.create_task(self._pump(track), name=f"{self.name}:inbound")

    def _on_connection_state(self) -> None:
        state = self.pc.connectionState
        logger.info("%s: WebRTC connection %s", self.name, state)
        # ICE or DTLS failed, or the browser closed its side (DTLS close_notify).
        if state == "failed" or (state == "closed" and not self._closing):
            self._on_lost()

    async def _pump(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return  # the browser stopped sending
            if isinstance(frame, AudioFrame):
                await self._on_audio(mono_pcm16(frame), frame.sample_rate)


def mono_pcm16(frame: AudioFrame) -> PCM16:
    """The frame's samples as one channel of 16-bit PCM (channels averaged)."""
    if frame.format.name not in ("s16", "s16p"):
        raise ValueError(f"expected 16-bit audio from the decoder, got {frame.format.name}")
    channels = len(frame.layout.channels)
    samples = frame.to_ndarray().astype(np.int16, copy=False)
    # Packed audio comes as one row of interleaved samples, planar as one row per channel.
    per_channel = samples if frame.format.is_planar else samples.reshape(-1, channels).T
    if channels == 1:
        return np.ascontiguousarray(per_channel[0])
    mono: PCM16 = per_channel.mean(axis=0).astype(np.int16)
    return mono
