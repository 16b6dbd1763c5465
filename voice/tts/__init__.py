"""Text-to-speech (hibari by default, Piper as a choice): phrase splitting and a shared,
cancellable synthesizer."""

from cadence.voice.tts.phrases import FIRST_PHRASE_MAX_WORDS, PhraseSplitter
from cadence.voice.tts.synthesizer import (
    DEFAULT_VOICE,
    EMBEDDED_VOICES,
    Synthesizer,
    load_synthesizer,
    without_leading_silence,
)

__all__ = [
    "DEFAULT_VOICE",
    "EMBEDDED_VOICES",
    "FIRST_PHRASE_MAX_WORDS",
    "PhraseSplitter",
    "Synthesizer",
    "load_synthesizer",
    "without_leading_silence",
]
