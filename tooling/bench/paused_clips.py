"""``cadence make-paused-clips``: real utterances with a silence inserted mid-sentence, for the
turn-taking benchmark (``cadence bench-turns``).

The recipe, deterministic from the committed inputs:

1. **Word timestamps** (``--align``, which (re)writes ``words.jsonl``): faster-whisper with
   ``word_timestamps=True`` on each clip's 16 kHz file, the model ``models.stt`` names (the
   embedded tiny.en by default, loaded offline as the pipeline loads it), greedy at
   temperature 0. One line per clip: ``{"id", "words": [[word, start_s, end_s], ...]}``.
2. **Where to pause**: a word boundary inside the sentence — never after the first word nor
   before the last, never after a word that ends a sentence (``.?!``). Boundaries after a word
   that cannot end an English sentence (an article, a preposition, a conjunction, an auxiliary,
   … — ``UNFINISHED``) are preferred when they lie in the middle 60 % of the speech; among the
   preferred (or, with none, among all) the boundary closest to the middle of the speech wins,
   the earlier on a tie. A boundary where the speaker already paused (``MAX_EXISTING_S``, as
   the engine hears it) is passed over for the next best. A clip with no such boundary (under
   four words, or a pause at every one) gets no pause.
3. **Where to cut**: whisper's boundary is a guess within ~0.1 s, so the cut goes to the
   quietest stretch of the audio near it: within ``SEARCH_S`` of the boundary (and inside the
   two words), the quietest 10 ms frame, widened to the frames within ``GAP_DB`` of it; the cut
   is the middle of that stretch, on a sample.
4. **What fills the pause**: the clip's own background — its quietest ``BED_MS`` (the
   stretch, in 10 ms steps, whose loudest 10 ms is the quietest), looped forwards and
   backwards so that the seams are continuous — never digital zero. A bed that webrtcvad (the
   configured mode and frame) calls speech anywhere, alone or in place (hearing the clip from
   its start, past its ~0.1 s hangover), is lowered 6 dB at a time until it does not.
5. **What is written**: for each clip, the original (``kind: complete``, copied byte for byte)
   and one clip per pause length (``kind: paused``): the original's samples up to the cut, the
   bed for ``pause_s``, the original's samples from the cut — at 16 kHz, and for a clip with a
   ``file_8k`` the same from its 8 kHz file, cut at the same time with its own bed. The
   manifest has the bench's fields (``id``, ``file``, ``text``, ``file_8k``) and
   ``source_id``, ``kind``, ``pause_at_s`` (where the pause starts, in the new clip),
   ``pause_s``, ``prefix_text`` (whisper's words before the pause), ``silence_s`` (the silence
   around the pause as the engine measures its wait: from the end of speech its endpointer
   dates to where speech resumes — the pause plus the quiet already there) and ``boundary``
   (the index of the word after which the pause falls). ``words.jsonl`` is copied beside it.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cadence.pipeline.config import STTConfig, ThreadsConfig, VADConfig
from cadence.pipeline.model_loading import load_stt
from cadence.tooling.bench.manifest import ManifestClip, read_manifest
from cadence.voice.audio import level_db
from cadence.voice.audio.pcm import PCM16
from cadence.voice.audio.wavfile import read_audio, write_wav
from cadence.voice.vad import Endpointer, VADEventKind, make_voice_detector

SPEECH_RATE = 16000
TELEPHONE_RATE = 8000
PAUSES_S = (0.3, 0.5, 0.7, 1.0, 1.5)
"""The pause lengths of the benchmark; 0.5–1 s is issue 17's target bucket."""
SEARCH_S = 0.12
"""How far from whisper's word boundary the cut may move to find the quiet between words."""
GAP_DB = 6.0
"""Frames within this many dB of the quietest one near the boundary are the gap."""
BED_MS = 250
"""Length of the quietest stretch taken as the clip's background."""
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


# ---------------------------------------------------------------------------------- what


def quietest_stretch(pcm: PCM16, sample_rate: int, length_ms: int = BED_MS) -> PCM16:
    """The clip's quietest ``length_ms``, starting on a 10 ms step: the stretch whose loudest
    10 ms frame is the quietest (a speech tail inside it would be its loudest), then the one of
    least energy."""
    hop, size = sample_rate // 100, sample_rate * length_ms // 1000
    if len(pcm) <= size:
        return pcm.copy()
    levels = frame_levels_db(pcm, sample_rate)
    span = size // hop
    windows = np.lib.stride_tricks.sliding_window_view(levels, span)
    loudest, mean = windows.max(axis=1), windows.mean(axis=1)
    start = int(np.lexsort((mean, np.round(loudest, 1)))[0]) * hop
    return pcm[start : start + size].copy()


def noise_bed(
    pcm: PCM16,
    sample_rate: int,
    samples: int,
    vad: VADConfig | None = None,
    *,
    at_s: float | None = None,
) -> PCM16:
    """``samples`` of the clip's background (the module's step 4), quiet enough that
    webrtcvad hears no speech in it — alone, and, given the cut ``at_s``, in place: inserted
    there, past the VAD's own hangover (``HANGOVER_S``) after the speech before it."""
    if samples <= 0:
        return np.zeros(0, np.int16)
    stretch = quietest_stretch(pcm, sample_rate)
    if not len(stretch):
        return np.zeros(samples, np.int16)
    looped = np.concatenate([stretch, stretch[::-1]])
    bed = np.resize(looped, samples).astype(np.float64)
    for _ in range(20):
        candidate = np.rint(bed).astype(np.int16)
        if not any_speech(candidate, sample_rate, vad) and (
            at_s is None or not _speech_in_place(pcm, sample_rate, at_s, candidate, vad)
        ):
            return candidate
        bed /= 2.0  # 6 dB
    return np.zeros(samples, np.int16)


HANGOVER_S = 0.2
"""webrtcvad goes on calling frames speech for ~0.1 s after speech stops, whatever follows."""


def _speech_in_place(
    pcm: PCM16, sample_rate: int, at_s: float, bed: PCM16, vad: VADConfig | None
) -> bool:
    """Whether webrtcvad, hearing the clip with ``bed`` inserted at ``at_s`` from its start
    (it adapts to everything it heard before), calls a frame inside the bed speech once its
    hangover is over."""
    cut = round(at_s * sample_rate)
    frame = sample_rate * (vad or VADConfig()).frame_ms // 1000
    voiced = voiced_frames(np.concatenate([pcm[:cut], bed, pcm[cut:]]), sample_rate, vad)
    first = -(-(cut + round(HANGOVER_S * sample_rate)) // frame)
    last = (cut + len(bed)) // frame  # frames wholly inside the bed
    return bool(voiced[first:last].any())


def any_speech(pcm: PCM16, sample_rate: int, vad: VADConfig | None = None) -> bool:
    """Whether webrtcvad, as configured, calls any whole frame of ``pcm`` speech."""
    return bool(voiced_frames(pcm, sample_rate, vad).any())


def voiced_frames(
    pcm: PCM16, sample_rate: int, vad: VADConfig | None = None
) -> np.ndarray[Any, np.dtype[np.bool_]]:
    settings = vad or VADConfig()
    detector = make_voice_detector(
        "webrtc", sample_rate=sample_rate, frame_ms=settings.frame_ms, mode=settings.mode
    )
    size = detector.frame_samples
    return np.array(
        [detector.is_speech(pcm[i : i + size]) for i in range(0, len(pcm) - size + 1, size)],
        dtype=np.bool_,
    )


def with_pause(pcm: PCM16, sample_rate: int, at_s: float, pause_s: float, bed: PCM16) -> PCM16:
    """``pcm`` with ``bed`` (``pause_s`` of it) inserted at ``at_s``."""
    cut = round(at_s * sample_rate)
    length = round(pause_s * sample_rate)
    return np.concatenate([pcm[:cut], bed[:length], pcm[cut:]]).astype(np.int16)


def engine_silence_s(
    pcm: PCM16, sample_rate: int, at_s: float, vad: VADConfig | None = None
) -> float:
    """The silence around ``at_s`` as the engine measures its wait: from the end of speech its
    endpointer dates (webrtcvad and ``Endpointer`` as configured, tail trim included) to where
    speech resumes (back-dated to its first voiced frame); 0 if it hears none there."""
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
    size, at_ms = detector.frame_samples, 1000.0 * at_s
    paused_at: float | None = None
    for start in range(0, len(pcm) - size + 1, size):
        frame = pcm[start : start + size]
        begin = 1000.0 * start / sample_rate
        for event in endpointer.update(detector.is_speech(frame), begin, level_db(frame)):
            if event.kind is VADEventKind.PAUSE_START:
                paused_at = event.at_ms
            elif event.kind is VADEventKind.SPEECH_RESUMED and paused_at is not None:
                if paused_at <= at_ms <= event.at_ms:
                    return round((event.at_ms - paused_at) / 1000.0, 3)
                paused_at = None
    return 0.0


def paused_id(source_id: str, pause_s: float) -> str:
    return f"{source_id}+pause{round(pause_s * 1000)}ms"


def make_paused_clips(
    manifest: Path,
    words_path: Path,
    out: Path,
    *,
    pauses_s: Sequence[float] = PAUSES_S,
    vad: VADConfig | None = None,
) -> list[dict[str, Any]]:
    """Write the clips and ``out/manifest.jsonl`` (the module's step 5); the manifest rows."""
    clips = read_manifest(manifest)
    raw = {
        json.loads(line)["id"]: json.loads(line)
        for line in manifest.read_text(encoding="utf-8").splitlines()
        if line.strip()
    }
    timestamps = read_words(words_path)
    rows: list[dict[str, Any]] = []
    for clip in clips:
        rows.append(_copy_original(clip, raw[clip.id], out))
        words = timestamps.get(clip.id)
        if words is None:
            raise ValueError(f"{words_path}: no words for clip {clip.id!r}; rerun --align")
        audio = read_audio(clip.path, SPEECH_RATE)
        cut = choose_cut(audio, SPEECH_RATE, words, vad)
        if cut is None:
            continue
        boundary = cut.boundary
        prefix = " ".join(w.text for w in words[: boundary + 1])
        longest = round(max(pauses_s) * SPEECH_RATE)
        bed = noise_bed(audio, SPEECH_RATE, longest, vad, at_s=cut.at_s)
        telephone = None
        if clip.telephone_path is not None:
            telephone = read_audio(clip.telephone_path, TELEPHONE_RATE)
            bed_8k = noise_bed(
                telephone,
                TELEPHONE_RATE,
                round(max(pauses_s) * TELEPHONE_RATE),
                vad,
                at_s=cut.at_s,
            )
        for pause in pauses_s:
            clip_id = paused_id(clip.id, pause)
            paused = with_pause(audio, SPEECH_RATE, cut.at_s, pause, bed)
            row: dict[str, Any] = {
                "id": clip_id,
                "file": f"wav16k/{clip_id}.wav",
                "text": clip.text,
            }
            write_wav(out / row["file"], paused, SPEECH_RATE)
            if telephone is not None:
                row["file_8k"] = f"wav8k/{clip_id}.wav"
                paused_8k = with_pause(telephone, TELEPHONE_RATE, cut.at_s, pause, bed_8k)
                write_wav(out / row["file_8k"], paused_8k, TELEPHONE_RATE)
            row |= provenance(raw[clip.id]) | {
                "source_id": clip.id,
                "kind": "paused",
                "pause_at_s": round(cut.at_s, 4),
                "pause_s": pause,
                "prefix_text": prefix,
                "silence_s": engine_silence_s(paused, SPEECH_RATE, cut.at_s + pause / 2, vad),
                "boundary": boundary,
            }
            rows.append(row)
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # The words travel with the clips: the bench cuts its backchannels out by them.
    shutil.copyfile(words_path, out / WORDS_FILE)
    return rows


def provenance(raw: dict[str, Any]) -> dict[str, Any]:
    """The source's attribution fields, carried into every clip made from it."""
    return {key: raw[key] for key in ("source_repo", "source_path", "license") if key in raw}


def _copy_original(clip: ManifestClip, raw: dict[str, Any], out: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"id": clip.id, "file": f"wav16k/{clip.id}.wav", "text": clip.text}
    (out / "wav16k").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(clip.path, out / row["file"])
    if clip.telephone_path is not None:
        row["file_8k"] = f"wav8k/{clip.id}.wav"
        (out / "wav8k").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(clip.telephone_path, out / row["file_8k"])
    return (
        row
        | provenance(raw)
        | {
            "source_id": clip.id,
            "kind": "complete",
            "pause_at_s": None,
            "pause_s": None,
            "prefix_text": None,
        }
    )
