"""``SimulatedCaller``: plays recorded audio into a session as a caller would speak it — in
20 ms frames at the pace of speech, with silence between utterances (a line is never
quiet-by-absence: telephony and WebRTC keep sending frames)."""

from __future__ import annotations

import numpy as np

from cadence.pipeline.session import SAMPLE_RATE, VoiceSession
from cadence.voice.audio import PCM16

FRAME = SAMPLE_RATE // 50  # 20 ms


class SimulatedCaller:
    def __init__(self, session: VoiceSession) -> None:
        self._session = session
        self._clock = session.clock
        self._sent_ms = 0.0
        self._origin = self._clock.now_ms()

    @property
    def position_ms(self) -> float:
        """Session time at which the next frame of audio starts."""
        return self._origin + self._sent_ms

    async def say(self, pcm: PCM16) -> None:
        """Stream ``pcm`` (16 kHz) frame by frame, each when its time has come."""
        for start in range(0, len(pcm), FRAME):
            frame = pcm[start : start + FRAME]
            self._sent_ms += 1000.0 * len(frame) / SAMPLE_RATE
            await self._clock.sleep_until(self.position_ms)
            await self._session.feed(frame, SAMPLE_RATE)

    async def pause(self, ms: float) -> None:
        await self.say(np.zeros(int(SAMPLE_RATE * ms / 1000), dtype=np.int16))
