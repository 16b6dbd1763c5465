"""The embedded models, loaded once per test process (as in a server: shared by sessions)."""

from __future__ import annotations

from voice.stt import Transcriber, load_transcriber
from voice.stt.transcriber import WhisperOptions
from voice.tts import Synthesizer, load_synthesizer


def transcriber() -> Transcriber:
    return load_transcriber(WhisperOptions(model="embedded:tiny.en"))


def synthesizer() -> Synthesizer:
    return load_synthesizer("embedded:en_US-joe-medium")
