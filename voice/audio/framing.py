"""``AudioFramer``: cuts a stream of arbitrary chunks into fixed-length frames."""

from __future__ import annotations

import numpy as np

from cadence.voice.audio.pcm import PCM16


class AudioFramer:
    """Carries the remainder of each chunk over to the next, so no sample is lost or doubled
    whatever chunk sizes a transport delivers (Twilio sends 20 ms, WebRTC 10-20 ms, files
    anything)."""

    def __init__(self, sample_rate: int, frame_ms: int = 20) -> None:
        samples = sample_rate * frame_ms / 1000
        if samples != int(samples) or samples <= 0:
            raise ValueError(f"{frame_ms} ms is not a whole number of samples at {sample_rate} Hz")
        self.sample_rate = sample_rate
        self.frame_ms = frame_ms
        self.frame_samples = int(samples)
        self._pending = np.zeros(0, dtype=np.int16)

    @property
    def pending_samples(self) -> int:
        return len(self._pending)

    def push(self, pcm: PCM16) -> list[PCM16]:
        """Add a chunk; return every frame now complete, in order."""
        if pcm.dtype != np.int16 or pcm.ndim != 1:
            raise ValueError(f"expected 1-D int16 PCM, got {pcm.ndim}-D {pcm.dtype}")
        data = np.concatenate([self._pending, pcm]) if len(self._pending) else pcm
        whole = len(data) // self.frame_samples * self.frame_samples
        self._pending = data[whole:].copy()
        return [data[i : i + self.frame_samples] for i in range(0, whole, self.frame_samples)]

    def flush(self) -> PCM16 | None:
        """The last partial frame, zero-padded to full length; ``None`` if nothing is pending."""
        if not len(self._pending):
            return None
        frame = np.zeros(self.frame_samples, dtype=np.int16)
        frame[: len(self._pending)] = self._pending
        self._pending = np.zeros(0, dtype=np.int16)
        return frame
