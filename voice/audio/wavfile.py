"""Reading and writing audio files, converted to Cadence's one format (mono PCM16).

libsndfile (through soundfile) reads every WAV flavour — 8-bit, 24-bit, float, μ-law — and
FLAC or OGG too; whatever comes in leaves as mono int16 at the rate asked for.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile

from cadence.voice.audio.pcm import PCM16, float_to_pcm16
from cadence.voice.audio.resample import resample


class AudioFileError(ValueError):
    """The file is missing, unreadable or not audio."""


def read_audio(path: Path, sample_rate: int) -> PCM16:
    """Read ``path`` as mono PCM16 at ``sample_rate``: channels are averaged, samples of any
    width or float converted, other rates resampled."""
    try:
        samples, rate = soundfile.read(path, dtype="float64", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, OSError) as exc:
        raise AudioFileError(f"{path}: not a readable audio file ({exc})") from exc
    if samples.shape[0] == 0:
        raise AudioFileError(f"{path}: holds no audio samples")
    mono = float_to_pcm16(samples.mean(axis=1))
    return resample(mono, int(rate), sample_rate)


def write_wav(path: Path, pcm: PCM16, sample_rate: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, np.asarray(pcm, dtype=np.int16), sample_rate, subtype="PCM_16")
