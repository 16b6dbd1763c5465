"""Where a pause goes in a real utterance, for ``cadence make-paused-clips``
(``paused_clips.py``): whisper's word timestamps, the word boundary chosen inside the
sentence, and the cut moved to the quiet between the two words. The recipe is steps 1–3 of
``paused_clips.py``'s docstring; the words after which an English sentence cannot be over
(``UNFINISHED``) serve the turn-taking bench and the end-of-turn calibration too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cadence.pipeline.config import STTConfig, ThreadsConfig, VADConfig
from cadence.pipeline.model_loading import load_stt
from cadence.tooling.bench.manifest import ManifestClip
from cadence.voice.audio import level_db
from cadence.voice.audio.pcm import PCM16
from cadence.voice.audio.wavfile import read_audio
from cadence.voice.vad import Endpointer, VADEventKind, make_voice_detector

SPEECH_RATE = 16000
SEARCH_S = 0.12
"""How far from whisper's word boundary the cut may move to find the quiet between words."""
GAP_DB = 6.0
"""Frames within this many dB of the quietest one near the boundary are the gap."""
CENTRAL = 0.6
"""The share of the speech, around its middle, where an unfinished boundary is preferred."""
WORDS_FILE = "words.jsonl"
MAX_EXISTING_S = 0.25
"""A boundary where the speaker already paused this long is passed over."""
MIN_WORDS = 4
"""Fewer words leave no boundary that is neither after the first nor before the last."""

_UNFINISHED_WORDS = """
    a an the this that these those my your his her its our their some any no every each
    of in on at to for from with by about into onto over under after before through between
    against without within during and or but nor so if when while because although though
    unless until than as where whether which who whom whose what how why
    is are was were be been being am do does did have has had will would shall should can
    could may might must not very too more most less"""
UNFINISHED = frozenset(_UNFINISHED_WORDS.split())
"""Words after which an English sentence cannot be over: a pause after one of them is clearly
mid-sentence, whatever a text model makes of it."""

_SENTENCE_END = re.compile(r"[.?!][\"')\]]*$")


@dataclass(frozen=True)
class Word:
    text: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Cut:
    boundary: int
    """Index of the word after which the pause falls."""
    at_s: float
    """Where the cut is (the pause starts), in seconds of the original clip."""
    gap_s: float
    """How long the quiet stretch already there around the cut is."""


# ---------------------------------------------------------------------------------- alignment


def align_words(
    clips: Sequence[ManifestClip], stt: STTConfig | None = None
) -> list[dict[str, Any]]:
    """Word timestamps of every clip, one row each (``words.jsonl``), by faster-whisper with
    ``word_timestamps=True`` on its 16 kHz file."""
    # The pipeline's own transcriber, so that the model is the one the engine hears with.
    transcriber = load_stt(stt or STTConfig(), ThreadsConfig())
    rows: list[dict[str, Any]] = []
    for clip in clips:
        timed = transcriber.words_blocking(read_audio(clip.path, SPEECH_RATE))
        words = [[word, round(start, 3), round(end, 3)] for word, start, end in timed]
        rows.append({"id": clip.id, "words": words})
    return rows


def write_words(rows: Iterable[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def read_words(path: Path) -> dict[str, list[Word]]:
    """``words.jsonl``: clip id → its words, in order."""
    result: dict[str, list[Word]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            result[row["id"]] = [Word(str(w), float(s), float(e)) for w, s, e in row["words"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: not a words line ({exc!r})") from exc
    return result


# ---------------------------------------------------------------------------------- where


def normalised(word: str) -> str:
    return re.sub(r"[^a-z0-9']", "", word.lower())


def ends_sentence(word: str) -> bool:
    return bool(_SENTENCE_END.search(word))


def is_unfinished(word: str) -> bool:
    """Whether a sentence clearly goes on after ``word``."""
    return not ends_sentence(word) and normalised(word) in UNFINISHED


def candidate_boundaries(words: Sequence[Word]) -> list[int]:
    """Indices ``i`` of the words a pause may follow: not the first, not the one before the
    last, not one that ends a sentence."""
    if len(words) < MIN_WORDS:
        return []
    return [i for i in range(1, len(words) - 2) if not ends_sentence(words[i].text)]


def boundary_time_s(words: Sequence[Word], i: int) -> float:
    return (words[i].end_s + words[i + 1].start_s) / 2


def choose_boundary(words: Sequence[Word]) -> int | None:
    """The boundary the pause goes at by the words alone (the module's step 2), or ``None``."""
    ranked = ranked_boundaries(words)
    return ranked[0] if ranked else None


def ranked_boundaries(words: Sequence[Word]) -> list[int]:
    """The candidate boundaries, best first (the module's step 2)."""
    candidates = candidate_boundaries(words)
    if not candidates:
        return []
    start, end = words[0].start_s, words[-1].end_s
    middle, half = (start + end) / 2, CENTRAL * (end - start) / 2

    def key(i: int) -> tuple[bool, float, int]:
        at = boundary_time_s(words, i)
        preferred = is_unfinished(words[i].text) and abs(at - middle) <= half
        return (not preferred, abs(at - middle), i)

    return sorted(candidates, key=key)


def choose_cut(
    pcm: PCM16, sample_rate: int, words: Sequence[Word], vad: VADConfig | None = None
) -> Cut | None:
    """The cut at the best boundary where the speaker did not already pause (the engine
    hears under ``MAX_EXISTING_S`` of silence there): a pause inserted into a pause would be
    longer than asked."""
    for boundary in ranked_boundaries(words):
        cut = find_cut(pcm, sample_rate, words, boundary)
        if engine_silence_s(pcm, sample_rate, cut.at_s, vad) < MAX_EXISTING_S:
            return cut
    return None


def frame_levels_db(pcm: PCM16, sample_rate: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """RMS level of each whole 10 ms frame, in dB (digital silence at −120)."""
    hop = sample_rate // 100
    frames = pcm[: len(pcm) // hop * hop].reshape(-1, hop).astype(np.float64)
    power = (frames**2).mean(axis=1) / 32768.0**2
    return np.asarray(10 * np.log10(power + 1e-12), np.float64)


def find_cut(pcm: PCM16, sample_rate: int, words: Sequence[Word], boundary: int) -> Cut:
    """The cut near the boundary after ``words[boundary]`` (the module's step 3)."""
    levels = frame_levels_db(pcm, sample_rate)
    left, right = words[boundary], words[boundary + 1]
    at = boundary_time_s(words, boundary)
    low = max(at - SEARCH_S, left.start_s + 0.03)
    high = min(at + SEARCH_S, right.end_s - 0.03)
    first = max(0, int(np.floor(low * 100)))
    last = min(len(levels), max(first + 1, int(np.ceil(high * 100))))
    if first >= len(levels):
        first, last = len(levels) - 1, len(levels)
    quietest = first + int(np.argmin(levels[first:last]))
    floor = levels[quietest] + GAP_DB
    begin = quietest
    while begin > first and levels[begin - 1] <= floor:
        begin -= 1
    stop = quietest + 1
    while stop < last and levels[stop] <= floor:
        stop += 1
    at_sample = round((begin + stop) / 2 * sample_rate / 100)
    return Cut(boundary, at_sample / sample_rate, (stop - begin) / 100)


def engine_silence_s(
    pcm: PCM16, sample_rate: int, at_s: float, vad: VADConfig | None = None
) -> float:
    """The silence around ``at_s`` as the engine measures its wait (:func:`engine_pauses`);
    0 if it hears none there."""
    at_ms = 1000.0 * at_s
    pauses, _ = engine_pauses(pcm, sample_rate, vad)
    for start_ms, end_ms in pauses:
        if start_ms <= at_ms <= end_ms:
            return round((end_ms - start_ms) / 1000.0, 3)
    return 0.0


def engine_pauses(
    pcm: PCM16, sample_rate: int, vad: VADConfig | None = None
) -> tuple[list[tuple[float, float]], float | None]:
    """Every pause inside the speech of ``pcm`` as the engine hears it — (start, end) in ms,
    from the end of speech its endpointer dates (webrtcvad and ``Endpointer`` as configured,
    tail trim included, ``pause_ms`` of silence at least) to where speech resumes (back-dated
    to its first voiced frame) — and where the last speech ended (``None``: no speech)."""
    settings = vad or VADConfig()
    detector = make_voice_detector(
        "webrtc", sample_rate=sample_rate, frame_ms=settings.frame_ms, mode=settings.mode
    )
    endpointer = Endpointer(
        frame_ms=settings.frame_ms,
        onset_ms=settings.onset_ms,
        pause_ms=settings.pause_ms,
        endpoint_silence_ms=1e12,  # a pause, never an endpoint: the wait is what is measured
        max_utterance_ms=1e12,
        tail_trim_db=settings.tail_trim_db,
    )
    size = detector.frame_samples
    pauses: list[tuple[float, float]] = []
    paused_at: float | None = None
    spoke = False
    for start in range(0, len(pcm) - size + 1, size):
        frame = pcm[start : start + size]
        begin = 1000.0 * start / sample_rate
        for event in endpointer.update(detector.is_speech(frame), begin, level_db(frame)):
            if event.kind is VADEventKind.SPEECH_START:
                spoke = True
            elif event.kind is VADEventKind.PAUSE_START:
                paused_at = event.at_ms
            elif event.kind is VADEventKind.SPEECH_RESUMED and paused_at is not None:
                pauses.append((paused_at, event.at_ms))
                paused_at = None
    if not spoke:
        return [], None
    return pauses, paused_at if paused_at is not None else 1000.0 * len(pcm) / sample_rate
