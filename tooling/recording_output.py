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
    _heard_at: list[float] = field(default_factory=list)
    """The audible windows of ``sent``, judged once each, as it is handed over."""

    async def send(self, frame: AudioOutFrame) -> None:
        at_ms = self.clock.now_ms()
        self.sent.append(SentFrame(at_ms, frame))
        self._heard_at += audible_at_ms([PlayedAudio(at_ms, frame.pcm, frame.sample_rate)])

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
        return list(self._heard_at)

    def reply_indices(self) -> list[int]:
        return sorted({s.frame.reply_index for s in self.sent})
