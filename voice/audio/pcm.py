"""Conversions between signed 16-bit PCM and float samples in [-1, 1)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

PCM16 = npt.NDArray[np.int16]
"""Mono signed 16-bit PCM: the one in-memory audio format of Cadence."""
Float32 = npt.NDArray[np.float32]

_SCALE = 32768.0


def pcm16_to_float(pcm: PCM16) -> Float32:
    """Exact: every int16 maps to a distinct float32 and back."""
    return pcm.astype(np.float32) / np.float32(_SCALE)


def float_to_pcm16(samples: npt.NDArray[np.floating]) -> PCM16:
    """Round to nearest and clip, so out-of-range synthesis saturates instead of wrapping."""
    scaled = np.rint(np.asarray(samples, dtype=np.float64) * _SCALE)
    return np.clip(scaled, -32768, 32767).astype(np.int16)


def level_db(pcm: PCM16) -> float:
    """RMS level in dB relative to full scale (digital silence gives −inf)."""
    if not len(pcm):
        return float("-inf")
    power = float(np.mean(np.square(pcm, dtype=np.float64))) / (_SCALE * _SCALE)
    return 10.0 * float(np.log10(power)) if power > 0 else float("-inf")
