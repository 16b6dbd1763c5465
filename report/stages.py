"""The stages a report breaks a turn into, in the order they happen, with the names a reader
sees. The keys are the derived latency names of a trace, which are also the budget keys, so
a stage's measurements and its budget share are looked up by one name."""

from __future__ import annotations

from typing import Final

from cadence.pipeline.tracing import STAGE_LATENCIES, VOICE_TO_VOICE

STAGE_NAMES: Final = tuple(latency.name for latency in STAGE_LATENCIES)
"""endpoint, stt, llm_first_emit, tts_first_audio, transport."""

LABELS: Final = {
    VOICE_TO_VOICE.name: "voice-to-voice",
    "endpoint": "endpoint",
    "stt": "STT",
    "llm_first_emit": "LLM first emit",
    "tts_first_audio": "TTS first audio",
    "transport": "transport",
}
"""Short display names of the latencies, for tables and plot legends."""
