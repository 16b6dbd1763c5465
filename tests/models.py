"""The embedded models as the default configuration loads them, once per test process (as in
a server: shared by every session)."""

from __future__ import annotations

from cadence.pipeline.config import STTConfig, ThreadsConfig, TTSConfig
from cadence.pipeline.model_loading import load_stt, load_tts
from cadence.voice.stt import Transcriber
from cadence.voice.tts import Synthesizer


def transcriber() -> Transcriber:
    return load_stt(STTConfig(), ThreadsConfig())


def synthesizer() -> Synthesizer:
    return load_tts(TTSConfig(), ThreadsConfig())
