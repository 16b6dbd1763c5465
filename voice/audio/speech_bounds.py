"""Where speech starts and ends in a recorded clip, from its energy envelope alone.

Benchmarks need the true end of speech of each clip, independent of the VAD under test. For
clean read speech the envelope gives it: the first and last 10 ms frame more than 15 dB above
the clip's background and within 40 dB of its loudest frame.
"""

from __future__ import annotations

import numpy as np

from cadence.core.stats import percentile
from cadence.voice.audio.pcm import PCM16


def speech_bounds_ms(pcm: PCM16, sample_rate: int) -> tuple[float, float]:
    hop = sample_rate // 100
    frames = pcm[: len(pcm) // hop * hop].reshape(-1, hop).astype(np.float64)
    if not len(frames):
        raise ValueError("clip shorter than 10 ms")
    level = 10 * np.log10((frames**2).mean(axis=1) + 1e-9)
    background, peak = percentile(level, 10), level.max()
    active = np.flatnonzero(level > max(background + 15, peak - 40))
    return float(active[0] * 10), float((active[-1] + 1) * 10)
