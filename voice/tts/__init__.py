"""Text-to-speech with Piper: phrase splitting and a shared, cancellable synthesizer."""

from cadence.voice.tts.phrases import FIRST_PHRASE_MAX_WORDS, PhraseSplitter
from cadence.voice.tts.synthesizer import Synthesizer, load_synthesizer, without_leading_silence

__all__ = [
    "FIRST_PHRASE_MAX_WORDS",
    "PhraseSplitter",
    "Synthesizer",
    "load_synthesizer",
    "without_leading_silence",
]
