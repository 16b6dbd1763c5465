"""``PacedAudioTrack``: an outbound WebRTC audio track that plays whatever audio it is given
and silence in between, one 20 ms frame per 20 ms of wall time.

A peer connection pulls frames from its tracks as fast as ``recv`` returns them, so the track
itself keeps the pace: the RTP timestamps and the send times then agree, and the browser's
jitter buffer stays short. The voice session's playout stage already hands audio over in real
time (at most 60 ms ahead), so the buffer here holds a few frames at most; ``clear`` (barge-in)
drops them, and the next frame is silence.
"""

from __future__ import annotations

import asyncio
from fractions import Fraction

import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame

from cadence.pipeline.frames import AudioOutFrame
from cadence.voice.audio import PCM16

FRAME_MS = 20
"""The packetisation interval: one Opus frame per RTP packet."""

RESYNC_S = 0.1
"""When the event loop stalled this long past a frame's due time, the schedule restarts from
now instead of bursting the missed frames out back to back."""

_BYTES_PER_SAMPLE = 2


class PacedAudioTrack(MediaStreamTrack):
    """Mono 16-bit audio at ``sample_rate``; an ``AudioOutput`` for a voice session."""

    kind = "audio"

    def __init__(self, sample_rate: int = 48000) -> None:
        super().__init__()
        self.sample_rate = sample_rate
        self._frame_samples = sample_rate * FRAME_MS // 1000
        self._time_base = Fraction(1, sample_rate)
        self._pending = bytearray()
        self._pts = 0
        self._start: float | None = None

    def play(self, pcm: PCM16) -> None:
        """Queue ``pcm`` (at the track's rate) behind what is already waiting."""
        self._pending += pcm.astype(np.int16, copy=False).tobytes()

    async def send(self, frame: AudioOutFrame) -> None:
        if frame.sample_rate != self.sample_rate:
            raise ValueError(
                f"track plays {self.sample_rate} Hz audio, got a frame at {frame.sample_rate} Hz"
            )
        self.play(frame.pcm)

    async def clear(self) -> None:
        self._pending.clear()

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        await self._wait_for_slot()
        size = self._frame_samples * _BYTES_PER_SAMPLE
        chunk = bytes(self._pending[:size]).ljust(size, b"\0")
        del self._pending[:size]
        samples = np.frombuffer(chunk, dtype=np.int16).reshape(1, -1)
        frame = AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = self.sample_rate
        frame.pts = self._pts
        frame.time_base = self._time_base
        self._pts += self._frame_samples
        return frame

    async def _wait_for_slot(self) -> None:
        now = asyncio.get_running_loop().time()
        if self._start is None:
            self._start = now
            return
        due = self._start + self._pts / self.sample_rate
        if due > now:
            await asyncio.sleep(due - now)
        elif now - due > RESYNC_S:
            self._start = now - self._pts / self.sample_rate
