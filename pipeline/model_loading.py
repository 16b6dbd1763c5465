"""Load the models a configuration names: the one place where config meets ``voice/``.

Each loader is cached per process in ``voice/``, so every session shares one copy.
"""

from __future__ import annotations

from cadence.pipeline.config import STTConfig, TTSConfig
from cadence.voice.stt import Transcriber, load_transcriber
from cadence.voice.stt.transcriber import WhisperOptions
from cadence.voice.tts import Synthesizer, load_synthesizer


def load_stt(config: STTConfig) -> Transcriber:
    return load_transcriber(
        WhisperOptions(
            model=config.model,
            device=config.device,
            compute_type=config.compute_type,
            cpu_threads=config.cpu_threads,
            beam_size=config.beam_size,
            language=config.language,
            encoder_window_s=config.encoder_window_s,
        )
    )


def load_tts(config: TTSConfig) -> Synthesizer:
    return load_synthesizer(config.voice)
