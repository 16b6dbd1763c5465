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
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cadence.pipeline.config import VADConfig
from cadence.tooling.bench.manifest import ManifestClip, read_manifest
from cadence.tooling.bench.pause_points import (
    WORDS_FILE,
    choose_cut,
    engine_silence_s,
    frame_levels_db,
    read_words,
)
from cadence.voice.audio.pcm import PCM16
from cadence.voice.audio.wavfile import read_audio, write_wav
from cadence.voice.vad import make_voice_detector

SPEECH_RATE = 16000
TELEPHONE_RATE = 8000
PAUSES_S = (0.3, 0.5, 0.7, 1.0, 1.5)
"""The pause lengths of the benchmark; 0.5–1 s is issue 17's target bucket."""
BED_MS = 250
"""Length of the quietest stretch taken as the clip's background."""

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
