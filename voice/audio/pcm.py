"""Conversions between signed 16-bit PCM and float samples in [-1, 1)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pipeline.frames import Pcm16

Float32 = npt.NDArray[np.float32]

_SCALE = 32768.0


def pcm16_to_float(pcm: Pcm16) -> Float32:
    """Exact: every int16 maps to a distinct float32 and back."""
    return pcm.astype(np.float32) / np.float32(_SCALE)


def float_to_pcm16(samples: npt.NDArray[np.floating]) -> Pcm16:
    """Round to nearest and clip, so out-of-range synthesis saturates instead of wrapping."""
    scaled = np.rint(np.asarray(samples, dtype=np.float64) * _SCALE)
    return np.clip(scaled, -32768, 32767).astype(np.int16)
