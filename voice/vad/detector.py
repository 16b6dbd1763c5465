"""``VoiceDetector``: is this frame speech? One implementation per VAD engine."""

from __future__ import annotations

from typing import Literal, Protocol

from cadence.voice.audio.pcm import PCM16


class VoiceDetector(Protocol):
    sample_rate: int
    frame_samples: int

    def is_speech(self, frame: PCM16) -> bool:
        """Classify one frame of exactly ``frame_samples`` samples."""
        ...


def make_voice_detector(
    engine: Literal["webrtc", "silero"], *, sample_rate: int, frame_ms: int, mode: int
) -> VoiceDetector:
    """The detector for ``engine``; ``mode`` is webrtcvad's aggressiveness (0-3)."""
    if engine == "webrtc":
        from cadence.voice.vad.webrtc import WebRTCVoiceDetector

        return WebRTCVoiceDetector(sample_rate=sample_rate, frame_ms=frame_ms, mode=mode)
    from cadence.voice.vad.silero import SileroVoiceDetector

    return SileroVoiceDetector(sample_rate=sample_rate, frame_ms=frame_ms)
