"""The embedding example of the README, run as a user would: a program of its own, on a real
8 kHz recording, with the default (offline) configuration."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from speech_data import clip

from cadence.voice.audio import level_db
from cadence.voice.audio.wavfile import read_audio
from cadence.voice.stt import word_error_rate

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "examples" / "embed.py"


def test_the_readme_shows_the_example_as_it_is() -> None:
    code = EXAMPLE.read_text()
    body = code[code.index("import asyncio") :]
    assert body in (ROOT / "README.md").read_text()


def test_the_example_answers_a_recorded_caller(tmp_path: Path) -> None:
    caller = clip("osr_us_0034_8k_s03")
    reply = tmp_path / "reply.wav"
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), str(caller.telephone_path), str(reply)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    heard = re.findall(r"^caller: (.*)$", run.stdout, re.MULTILINE)
    assert word_error_rate([caller.text], [" ".join(heard)]) <= 0.25
    assert "agent:" in run.stdout
    audio = read_audio(reply, 16000)
    assert len(audio) > 16000 // 2  # at least half a second of reply
    assert level_db(audio) > -40  # and it is speech, not silence
    assert (tmp_path / "runs" / "traces.jsonl").read_text().strip()  # the turn was traced
