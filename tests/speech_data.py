"""The real speech clips of tests/data/speech (see ATTRIBUTION.md there)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cadence.voice.audio.pcm import PCM16
from cadence.voice.audio.resample import resample
from cadence.voice.audio.speech_bounds import speech_bounds_ms
from cadence.voice.audio.wavfile import read_audio
from cadence.voice.tts import load_synthesizer

__all__ = [
    "Clip",
    "clip",
    "clips",
    "speech_bounds_ms",
    "spoken",
    "with_pause",
    "with_silence",
    "words",
]

SPEECH_DIR = Path(__file__).parent / "data" / "speech"
MANIFEST = SPEECH_DIR / "manifest.jsonl"
WORDS = SPEECH_DIR / "words.jsonl"
"""Each clip's words with their times, by whisper (``cadence make-paused-clips --align``)."""


@dataclass(frozen=True)
class Clip:
    id: str
    text: str
    path: Path
    source: str
    telephone_path: Path | None = None
    """The 8 kHz telephone-band file of the clip, where it has one."""

    def audio(self, sample_rate: int = 16000) -> PCM16:
        return read_audio(self.path, sample_rate)

    def telephone_audio(self) -> PCM16:
        """The 8 kHz file, at 8 kHz."""
        assert self.telephone_path is not None, f"{self.id} has no 8 kHz file"
        return read_audio(self.telephone_path, 8000)


def clips() -> list[Clip]:
    rows = [json.loads(line) for line in MANIFEST.read_text().splitlines() if line.strip()]
    return [
        Clip(
            r["id"],
            r["text"],
            SPEECH_DIR / r["file"],
            r["source_repo"],
            SPEECH_DIR / r["file_8k"] if "file_8k" in r else None,
        )
        for r in rows
    ]


def clip(clip_id: str) -> Clip:
    return next(c for c in clips() if c.id == clip_id)


def with_silence(pcm: PCM16, before_ms: int, after_ms: int, sample_rate: int = 16000) -> PCM16:
    before = np.zeros(sample_rate * before_ms // 1000, dtype=np.int16)
    after = np.zeros(sample_rate * after_ms // 1000, dtype=np.int16)
    return np.concatenate([before, pcm, after])


def with_pause(pcm: PCM16, pause_ms: int, sample_rate: int = 16000) -> PCM16:
    """Cut the clip at its loudest 10 ms in the middle third (inside a word, so the pause is
    exactly ``pause_ms`` of silence, not extended by quiet edges) and insert silence there."""
    third, hop = len(pcm) // 3, sample_rate // 100
    middle = pcm[third : 2 * third]
    frames = middle[: len(middle) // hop * hop].reshape(-1, hop).astype(np.float64)
    cut = third + int(np.argmax((frames**2).mean(axis=1))) * hop
    silence = np.zeros(sample_rate * pause_ms // 1000, dtype=np.int16)
    return np.concatenate([pcm[:cut], silence, pcm[cut:]])


def spoken(text: str, sample_rate: int = 16000) -> PCM16:
    """``text`` said by the embedded Piper voice — for what no recording here says ("uh-huh",
    "hold on"): the caller's side of a test, never its ground truth. Always the same audio
    for the same text: a test must not pass or fail with Piper's sampling noise."""
    synthesizer = load_synthesizer("embedded:en_US-joe-medium")
    pcm = np.concatenate(list(synthesizer.synthesize_blocking(text, varied=False)))
    return resample(pcm, synthesizer.sample_rate, sample_rate)


def words(clip_id: str) -> list[tuple[str, float, float]]:
    """The words of a clip with their start and end in seconds."""
    for line in WORDS.read_text().splitlines():
        row = json.loads(line)
        if row["id"] == clip_id:
            return [(str(w), float(start), float(end)) for w, start, end in row["words"]]
    raise KeyError(clip_id)
