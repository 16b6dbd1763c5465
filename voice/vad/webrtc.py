"""webrtcvad (Google's WebRTC GMM VAD): ~2 µs per frame. Mode 3 is the only one that does
not call white noise speech, hence the default."""

from __future__ import annotations

import webrtcvad

from cadence.voice.audio.pcm import PCM16

SUPPORTED_RATES = (8000, 16000, 32000, 48000)


class WebRTCVoiceDetector:
    def __init__(self, *, sample_rate: int, frame_ms: int, mode: int) -> None:
        if sample_rate not in SUPPORTED_RATES:
            raise ValueError(f"webrtcvad runs at {SUPPORTED_RATES} Hz, not {sample_rate}")
        if frame_ms not in (10, 20, 30):
            raise ValueError(f"webrtcvad takes 10, 20 or 30 ms frames, not {frame_ms}")
        self.sample_rate = sample_rate
        self.frame_samples = sample_rate * frame_ms // 1000
        self._vad = webrtcvad.Vad(mode)

    def is_speech(self, frame: PCM16) -> bool:
        if len(frame) != self.frame_samples:
            raise ValueError(f"expected {self.frame_samples} samples, got {len(frame)}")
        return bool(self._vad.is_speech(frame.tobytes(), self.sample_rate))
