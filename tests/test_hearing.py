"""The caller's ear: when reply audio becomes audible, against audio whose onset is known."""

from __future__ import annotations

import numpy as np

from cadence.tooling.emulators.hearing import (
    PlayedAudio,
    audible_at_ms,
    first_heard_after,
)
from cadence.voice.audio import PCM16, ulaw_decode, ulaw_encode

RATE = 8000


def tone(ms: float, db: float, rate: int = RATE) -> PCM16:
    t = np.arange(round(rate * ms / 1000)) / rate
    amplitude = 32767 * 10 ** (db / 20) * np.sqrt(2)  # RMS of the sine at `db` dBFS
    pcm: PCM16 = (amplitude * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    return pcm


def silence(ms: float, rate: int = RATE) -> PCM16:
    return np.zeros(round(rate * ms / 1000), np.int16)


def test_a_reply_is_heard_where_its_sound_starts() -> None:
    # 130 ms of silence, then a quiet vowel: the window it starts in is heard (20 ms windows).
    audio = np.concatenate([silence(130), tone(300, -30.0)])
    onsets = audible_at_ms([PlayedAudio(1000.0, audio, RATE)])
    assert onsets[0] == 1120.0  # the 120–140 ms window holds its first 10 ms
    assert onsets[-1] == 1000.0 + 420.0


def test_line_noise_and_codec_noise_are_not_heard() -> None:
    rng = np.random.default_rng(7)
    hiss = (rng.normal(0, 32767 * 10 ** (-60 / 20), RATE)).astype(np.int16)
    through_the_codec = ulaw_decode(ulaw_encode(hiss))
    played = [PlayedAudio(0.0, silence(500), RATE), PlayedAudio(500.0, through_the_codec, RATE)]
    assert audible_at_ms(played) == []


def test_chunks_played_at_their_own_times_are_timed_by_them() -> None:
    # Twilio plays 20 ms chunks as they come; a gap in arrival is a gap in playout.
    chunks = [PlayedAudio(at, tone(20, -20.0), RATE) for at in (0.0, 20.0, 400.0)]
    assert audible_at_ms(chunks) == [0.0, 20.0, 400.0]
    # At 48 kHz the window is 960 samples: the same rule at any rate.
    wide = np.concatenate([silence(40, 48000), tone(40, -20.0, 48000)])
    assert audible_at_ms([PlayedAudio(0.0, wide, 48000)]) == [40.0, 60.0]


def test_the_first_sound_after_a_moment() -> None:
    onsets = [100.0, 120.0, 900.0]
    assert first_heard_after(onsets, 0.0) == 100.0
    assert first_heard_after(onsets, 120.0) == 120.0
    assert first_heard_after(onsets, 121.0) == 900.0
    assert first_heard_after(onsets, 901.0) is None
