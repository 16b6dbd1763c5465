"""Speech-to-text with faster-whisper: one shared model per process, decodes off the loop."""

from cadence.voice.stt.normalize import normalize_transcript, word_error_rate
from cadence.voice.stt.transcriber import Transcriber, Transcription, load_transcriber

__all__ = [
    "Transcriber",
    "Transcription",
    "load_transcriber",
    "normalize_transcript",
    "word_error_rate",
]
