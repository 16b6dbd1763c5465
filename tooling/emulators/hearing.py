"""When a caller hears the reply: one rule for every emulated caller (the phone, the page, the
in-process recording), so that every transport — and any peer framework measured beside
Cadence — is timed the same way (docs/report.md, "What the caller hears").

Audio is heard at the start of the first 20 ms window, of the audio as played at the
caller's end, whose RMS level is above −45 dBFS: well above a silent line's dither and the
μ-law codec's noise floor, well below the quietest syllable of a reply.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cadence.voice.audio import PCM16, level_db

HEARD_DB = -45.0
"""A window of reply audio louder than this (RMS, dBFS) is audible."""

WINDOW_MS = 20.0
"""The window the level is taken over."""


@dataclass(frozen=True)
class PlayedAudio:
    at_ms: float
    """When this audio started playing to the caller."""
    pcm: PCM16
    sample_rate: int


def audible_at_ms(played: Iterable[PlayedAudio]) -> list[float]:
    """The start of every audible window of the ``played`` audio, in time order."""
    onsets: list[float] = []
    for chunk in played:
        window = max(1, round(chunk.sample_rate * WINDOW_MS / 1000))
        for start in range(0, len(chunk.pcm), window):
            if level_db(chunk.pcm[start : start + window]) > HEARD_DB:
                onsets.append(chunk.at_ms + 1000.0 * start / chunk.sample_rate)
    return sorted(onsets)


def first_heard_after(onsets: list[float], after_ms: float) -> float | None:
    """The first audible moment at or after ``after_ms``; ``None`` if there is none."""
    return next((at for at in onsets if at >= after_ms), None)
