"""``RecordingAudioOutput``: an ``AudioOutput`` that keeps what would have been played, with the
time each frame was handed over — the transport of ``cadence converse`` and ``cadence bench``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cadence.core.clock import Clock
from cadence.pipeline.frames import AudioOutFrame
from cadence.tooling.emulators.hearing import PlayedAudio, audible_at_ms
from cadence.voice.audio import PCM16


@dataclass(frozen=True)
class SentFrame:
    at_ms: float
    frame: AudioOutFrame


@dataclass
class RecordingAudioOutput:
    clock: Clock
    sent: list[SentFrame] = field(default_factory=list)
    clears: list[float] = field(default_factory=list)
    """Times the buffer was flushed (barge-in)."""

    async def send(self, frame: AudioOutFrame) -> None:
        self.sent.append(SentFrame(self.clock.now_ms(), frame))

    async def clear(self) -> None:
        self.clears.append(self.clock.now_ms())

    def audio(self, reply_index: int | None = None) -> PCM16:
        """Everything sent (for one reply, if ``reply_index`` is given), end to end."""
        chunks = [
            s.frame.pcm
            for s in self.sent
            if reply_index is None or s.frame.reply_index == reply_index
        ]
        return np.concatenate(chunks) if chunks else np.zeros(0, np.int16)

    def heard_at_ms(self) -> list[float]:
        """When each audible window of what was sent would have been heard: as it was handed
        over, there being no network in between (``hearing``'s rule)."""
        return audible_at_ms(
            PlayedAudio(s.at_ms, s.frame.pcm, s.frame.sample_rate) for s in self.sent
        )

    def reply_indices(self) -> list[int]:
        return sorted({s.frame.reply_index for s in self.sent})
