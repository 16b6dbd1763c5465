"""Sample-rate conversion with soxr (band-limited; ``np.interp`` aliases badly)."""

from __future__ import annotations

import numpy as np
import soxr

from voice.audio.pcm import Pcm16


class StreamResampler:
    """Resamples a PCM16 stream chunk by chunk; the filter state carries across chunks, so
    the output is continuous as if the stream had been converted in one piece."""

    def __init__(self, in_rate: int, out_rate: int, quality: str = "HQ") -> None:
        if in_rate <= 0 or out_rate <= 0:
            raise ValueError(f"sample rates must be positive, got {in_rate} → {out_rate}")
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._stream = (
            None
            if in_rate == out_rate
            else soxr.ResampleStream(in_rate, out_rate, 1, dtype="int16", quality=quality)
        )

    def process(self, pcm: Pcm16, *, last: bool = False) -> Pcm16:
        """Resample the next chunk; ``last=True`` flushes the filter's tail (once, at the end)."""
        if pcm.dtype != np.int16 or pcm.ndim != 1:
            raise ValueError(f"expected 1-D int16 PCM, got {pcm.ndim}-D {pcm.dtype}")
        if self._stream is None:
            return pcm
        out: Pcm16 = self._stream.resample_chunk(pcm, last=last)
        return out


def resample(pcm: Pcm16, in_rate: int, out_rate: int) -> Pcm16:
    """Resample a whole signal at once."""
    return StreamResampler(in_rate, out_rate).process(pcm, last=True)
