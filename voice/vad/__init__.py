"""Voice activity detection and endpointing: per-frame speech decisions, and the state machine
that turns them into speech start, pause, resumption and end-of-turn events."""

from cadence.voice.vad.detector import VoiceDetector, make_voice_detector
from cadence.voice.vad.endpointer import Endpointer, VADEvent, VADEventKind

__all__ = ["Endpointer", "VADEvent", "VADEventKind", "VoiceDetector", "make_voice_detector"]
