"""The turn-taking clips (`cadence make-paused-clips`): real utterances with a silence inserted
mid-sentence, where the word timestamps say, filled with the clip's own background."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cadence.pipeline.config import VADConfig
from cadence.tooling.bench.manifest import read_manifest
from cadence.tooling.bench.pause_points import (
    SEARCH_S,
    Word,
    boundary_time_s,
    choose_boundary,
    read_words,
)
from cadence.tooling.bench.paused_clips import HANGOVER_S, make_paused_clips
from cadence.tooling.bench.turn_taking import read_turn_manifest
from cadence.voice.audio.wavfile import read_audio
from cadence.voice.vad import make_voice_detector

SPEECH = Path(__file__).parent / "data" / "speech"
MANIFEST = SPEECH / "manifest.jsonl"
WORDS = SPEECH / "words.jsonl"
CHOSEN = ("sb_spk1_snt1", "osr_us_0034_8k_s10", "libri_2830-3980-0043", "an4_10001-90210-01803")
"""A 16 kHz read sentence, a real 8 kHz telephone one, one of three words (no pause) and a
digit string read with a long pause at every boundary whisper found (no pause either: a
pause inserted into one would be longer than asked)."""
PAUSES = (0.3, 1.0)


def _manifest(tmp_path: Path) -> Path:
    rows = [json.loads(line) for line in MANIFEST.read_text().splitlines() if line.strip()]
    chosen = []
    for row in rows:
        if row["id"] in CHOSEN:
            row["file"] = str(SPEECH / row["file"])
            if "file_8k" in row:
                row["file_8k"] = str(SPEECH / row["file_8k"])
            chosen.append(row)
    path = tmp_path / "manifest.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    return path


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, object]]]:
    tmp = tmp_path_factory.mktemp("paused")
    out = tmp / "out"
    return out, make_paused_clips(_manifest(tmp), WORDS, out, pauses_s=PAUSES)


def _speech_frames(pcm: np.ndarray, rate: int) -> list[bool]:
    vad = VADConfig()
    detector = make_voice_detector("webrtc", sample_rate=rate, frame_ms=vad.frame_ms, mode=vad.mode)
    size = detector.frame_samples
    return [detector.is_speech(pcm[i : i + size]) for i in range(0, len(pcm) - size + 1, size)]


def test_the_word_timestamps_cover_every_clip_in_order() -> None:
    ids = [json.loads(line)["id"] for line in MANIFEST.read_text().splitlines() if line.strip()]
    rows = [json.loads(line) for line in WORDS.read_text().splitlines() if line.strip()]
    assert [r["id"] for r in rows] == ids
    for row in rows:
        assert row["words"], row["id"]
        starts = [start for _, start, _ in row["words"]]
        assert starts == sorted(starts)
        assert all(end >= start for _, start, end in row["words"])
        assert all(isinstance(word, str) and word for word, _, _ in row["words"])


def test_the_boundary_is_mid_sentence_and_prefers_an_unfinished_one() -> None:
    def words(text: str) -> list[Word]:
        return [Word(w, i * 0.5, i * 0.5 + 0.4) for i, w in enumerate(text.split())]

    # Closest to the middle are "almost" and "hurt"; "the" (index 4) is unfinished, and central.
    assert choose_boundary(words("The child almost hurt the small dog.")) == 4
    # Never after the first word nor before the last, never at a sentence end.
    assert choose_boundary(words("Yes. Please go")) is None
    assert choose_boundary(words("Stop. Now. Go. Fine")) is None
    assert choose_boundary(words("one two three")) is None
    # No unfinished word: the boundary closest to the middle.
    assert choose_boundary(words("red green blue yellow purple orange")) == 2


def test_each_pause_is_where_the_words_say_of_the_length_asked_between_original_samples(
    made: tuple[Path, list[dict[str, object]]],
) -> None:
    out, rows = made
    words = read_words(WORDS)
    paused = [r for r in rows if r["kind"] == "paused"]
    assert {r["source_id"] for r in paused} == {"sb_spk1_snt1", "osr_us_0034_8k_s10"}
    assert sorted({float(str(r["pause_s"])) for r in paused}) == list(PAUSES)
    for row in paused:
        source = str(row["source_id"])
        timed = words[source]
        boundary = int(str(row["boundary"]))
        assert 1 <= boundary <= len(timed) - 3  # not after the first, not before the last
        at = float(str(row["pause_at_s"]))
        assert abs(at - boundary_time_s(timed, boundary)) <= SEARCH_S + 0.011
        assert row["prefix_text"] == " ".join(w.text for w in timed[: boundary + 1])
        pause = float(str(row["pause_s"]))
        files = [(f"wav16k/{source}.wav", str(row["file"]), 16000)]
        if "file_8k" in row:
            files.append((f"wav8k/{source}.wav", str(row["file_8k"]), 8000))
        for original_file, paused_file, rate in files:
            original = read_audio(out / original_file, rate)
            audio = read_audio(out / paused_file, rate)
            cut, length = round(at * rate), round(pause * rate)
            assert len(audio) == len(original) + length
            np.testing.assert_array_equal(audio[:cut], original[:cut])
            np.testing.assert_array_equal(audio[cut + length :], original[cut:])
            bed = audio[cut : cut + length]
            assert np.any(bed != 0), "the pause is the clip's background, not digital zero"
            # The real webrtcvad hears no speech in the bed, alone or in place.
            assert not any(_speech_frames(bed, rate))
            frame = rate * VADConfig().frame_ms // 1000
            voiced = _speech_frames(audio, rate)
            first = -(-(cut + round(HANGOVER_S * rate)) // frame)
            assert not any(voiced[first : (cut + length) // frame])
        # The VAD's silence is the pause, give or take the quiet already there and its hangover.
        assert abs(float(str(row["silence_s"])) - pause) <= 0.25


def test_the_manifest_has_the_bench_fields_and_the_complete_originals(
    made: tuple[Path, list[dict[str, object]]],
) -> None:
    out, rows = made
    manifest = out / "manifest.jsonl"
    assert [json.loads(line) for line in manifest.read_text().splitlines()] == rows
    complete = [r for r in rows if r["kind"] == "complete"]
    assert sorted(str(r["id"]) for r in complete) == sorted(CHOSEN)
    for row in complete:
        assert row["source_id"] == row["id"]
        assert row["pause_s"] is None
        assert row["pause_at_s"] is None
        original = SPEECH / "wav16k" / f"{row['id']}.wav"
        assert (out / str(row["file"])).read_bytes() == original.read_bytes()
    for row in rows:
        assert {"id", "file", "text", "source_id", "kind", "pause_at_s", "pause_s"} <= set(row)
        assert ("file_8k" in row) == (row["source_id"] == "osr_us_0034_8k_s10")
    clips = read_manifest(manifest)  # the bench reads it as any manifest
    assert all(c.path.is_file() for c in clips)
    assert all(c.telephone_path is None or c.telephone_path.is_file() for c in clips)
    turns = read_turn_manifest(manifest)
    assert [t.kind for t in turns] == [r["kind"] for r in rows]
    assert (out / "words.jsonl").read_text() == WORDS.read_text()


def test_the_recipe_is_deterministic(
    made: tuple[Path, list[dict[str, object]]], tmp_path: Path
) -> None:
    out, _ = made
    again = tmp_path / "again"
    make_paused_clips(_manifest(tmp_path), WORDS, again, pauses_s=PAUSES)
    assert (again / "manifest.jsonl").read_text() == (out / "manifest.jsonl").read_text()
    for path in sorted((out / "wav16k").glob("*.wav")) + sorted((out / "wav8k").glob("*.wav")):
        assert (again / path.relative_to(out)).read_bytes() == path.read_bytes(), path.name


def test_the_command_writes_the_clips(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("cadence")
    result = subprocess.run(
        [str(exe), "make-paused-clips", "--manifest", str(_manifest(tmp_path)),
         "--words", str(WORDS), "--out", str(tmp_path / "out"), "--pauses", "0.5"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "4 complete clips, 2 paused ones" in result.stderr
    rows = [
        json.loads(line) for line in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 6
    refused = subprocess.run(
        [str(exe), "make-paused-clips", "--manifest", str(MANIFEST), "--words", str(WORDS)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert refused.returncode == 2
