"""Reading audio files of any common format into mono PCM16, and the voice CLI commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
from speech_data import clip

from cadence.voice.audio import float_to_pcm16, pcm16_to_float
from cadence.voice.audio.wavfile import AudioFileError, read_audio

SPEECH = clip("sb_spk1_snt1")


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return SPEECH.audio()


def test_stereo_is_mixed_down(tmp_path: Path, speech: np.ndarray) -> None:
    path = tmp_path / "stereo.wav"
    soundfile.write(path, np.stack([speech, speech], axis=1), 16000, subtype="PCM_16")
    assert np.array_equal(read_audio(path, 16000), speech)


@pytest.mark.parametrize(
    ("subtype", "tolerance"), [("PCM_U8", 256), ("FLOAT", 1), ("PCM_24", 1), ("ULAW", 1100)]
)
def test_sample_formats_are_converted(
    tmp_path: Path, speech: np.ndarray, subtype: str, tolerance: int
) -> None:
    path = tmp_path / f"{subtype}.wav"
    soundfile.write(path, pcm16_to_float(speech), 16000, subtype=subtype)
    out = read_audio(path, 16000)
    assert out.dtype == np.int16
    assert np.max(np.abs(out.astype(int) - speech.astype(int))) <= tolerance


def test_other_rates_are_resampled(tmp_path: Path, speech: np.ndarray) -> None:
    path = tmp_path / "44k.wav"
    t = np.arange(44100) / 44100
    soundfile.write(path, float_to_pcm16(0.5 * np.sin(2 * np.pi * 440 * t)), 44100)
    out = read_audio(path, 16000)
    assert len(out) == 16000
    assert abs(np.argmax(np.abs(np.fft.rfft(out))) - 440) <= 1


def test_a_non_audio_file_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "notes.wav"
    path.write_text("not audio at all")
    with pytest.raises(AudioFileError, match=r"notes\.wav: not a readable audio file"):
        read_audio(path, 16000)
    with pytest.raises(AudioFileError, match="not a readable audio file"):
        read_audio(tmp_path / "missing.wav", 16000)


def test_an_empty_recording_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "empty.wav"
    soundfile.write(path, np.zeros(0, np.int16), 16000)
    with pytest.raises(AudioFileError, match="holds no audio"):
        read_audio(path, 16000)


def cadence(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("cadence")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)


def test_cli_say_then_transcribe(tmp_path: Path) -> None:
    out = tmp_path / "hello.wav"
    said = cadence("say", "Thanks for calling, how can I help?", "-o", str(out), "--rate", "16000")
    assert said.returncode == 0, said.stderr
    assert soundfile.info(out).samplerate == 16000
    heard = cadence("transcribe", str(out), str(SPEECH.path))
    assert heard.returncode == 0, heard.stderr
    lines = heard.stdout.strip().splitlines()
    assert len(lines) == 2
    assert "how can i help" in lines[0].lower()
    assert "the child almost hurt the small dog" in lines[1].lower()
    assert " ms\t" in lines[0]  # decode time per file


def test_cli_transcribe_reports_a_bad_file_and_continues(tmp_path: Path) -> None:
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF....garbage")
    result = cadence("transcribe", str(bad), str(SPEECH.path))
    assert result.returncode == 3
    assert "bad.wav: not a readable audio file" in result.stderr
    assert "small dog" in result.stdout


def test_cli_names_the_config_key_of_a_missing_model(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("models:\n  tts:\n    voice: /nowhere/voice.onnx\n")
    result = cadence("say", "hi", "-o", str(tmp_path / "x.wav"), "--config", str(config))
    assert result.returncode == 3
    assert "models.tts.voice" in result.stderr
