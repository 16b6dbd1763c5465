"""The real speech clips of tests/data/speech (see ATTRIBUTION.md there)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voice.audio.pcm import Pcm16
from voice.audio.wavfile import read_audio

SPEECH_DIR = Path(__file__).parent / "data" / "speech"
MANIFEST = SPEECH_DIR / "manifest.jsonl"


@dataclass(frozen=True)
class Clip:
    id: str
    text: str
    path: Path
    source: str

    def audio(self, sample_rate: int = 16000) -> Pcm16:
        return read_audio(self.path, sample_rate)


def clips() -> list[Clip]:
    rows = [json.loads(line) for line in MANIFEST.read_text().splitlines() if line.strip()]
    return [Clip(r["id"], r["text"], SPEECH_DIR / r["file"], r["source_repo"]) for r in rows]


def clip(clip_id: str) -> Clip:
    return next(c for c in clips() if c.id == clip_id)


def speech_bounds_ms(pcm: Pcm16, sample_rate: int = 16000) -> tuple[float, float]:
    """Reference start and end of speech in a clean clip, from its energy envelope alone
    (independent of any VAD): the first and last 10 ms frame more than 15 dB above the
    clip's noise floor and within 40 dB of its peak."""
    hop = sample_rate // 100
    frames = pcm[: len(pcm) // hop * hop].reshape(-1, hop).astype(np.float64)
    level = 10 * np.log10((frames**2).mean(axis=1) + 1e-9)
    floor, peak = np.percentile(level, 10), level.max()
    active = np.flatnonzero(level > max(floor + 15, peak - 40))
    return active[0] * 10.0, (active[-1] + 1) * 10.0


def with_silence(pcm: Pcm16, before_ms: int, after_ms: int, sample_rate: int = 16000) -> Pcm16:
    before = np.zeros(sample_rate * before_ms // 1000, dtype=np.int16)
    after = np.zeros(sample_rate * after_ms // 1000, dtype=np.int16)
    return np.concatenate([before, pcm, after])


def with_pause(pcm: Pcm16, pause_ms: int, sample_rate: int = 16000) -> Pcm16:
    """Cut the clip at its loudest 10 ms in the middle third (inside a word, so the pause is
    exactly ``pause_ms`` of silence, not extended by quiet edges) and insert silence there."""
    third, hop = len(pcm) // 3, sample_rate // 100
    middle = pcm[third : 2 * third]
    frames = middle[: len(middle) // hop * hop].reshape(-1, hop).astype(np.float64)
    cut = third + int(np.argmax((frames**2).mean(axis=1))) * hop
    silence = np.zeros(sample_rate * pause_ms // 1000, dtype=np.int16)
    return np.concatenate([pcm[:cut], silence, pcm[cut:]])
