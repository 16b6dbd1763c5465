"""The anchor events of a turn and the stage latencies derived from them (docs/trace-schema.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class AnchorEvent(StrEnum):
    """A moment in a turn; each has one fixed meaning in every report and test."""

    USER_SPEECH_START = "user_speech_start"
    """Start of the first voiced frame of the user's utterance."""
    USER_SPEECH_END = "user_speech_end"
    """End of the last voiced frame (in benchmarks, the ground-truth end of speech)."""
    ENDPOINT = "endpoint"
    """The engine commits to "the user's turn is over"."""
    STT_FINAL = "stt_final"
    """The transcript the reply is generated from is available."""
    LLM_FIRST_EMIT = "llm_first_emit"
    """First text handed from the generator to TTS."""
    LLM_DONE = "llm_done"
    """The generator finished the reply."""
    TTS_FIRST_AUDIO = "tts_first_audio"
    """First synthesized audio of the reply is ready."""
    AUDIO_OUT_FIRST = "audio_out_first"
    """First reply audio frame handed to the transport for sending."""
    AUDIO_HEARD_FIRST = "audio_heard_first"
    """First audible reply sound at the caller's end, as the caller measures it (benchmarks:
    the emulated phone or page, after its jitter buffer and playout; the rule is in
    docs/report.md). A server alone cannot know it: live traces do not have it."""
    INTERRUPTED = "interrupted"
    """Barge-in: user speech cut the reply off."""


@dataclass(frozen=True)
class DerivedLatency:
    """``end - start`` in milliseconds; its name is also its budget key."""

    name: str
    start: AnchorEvent
    end: AnchorEvent


STAGE_LATENCIES: tuple[DerivedLatency, ...] = (
    DerivedLatency("endpoint", AnchorEvent.USER_SPEECH_END, AnchorEvent.ENDPOINT),
    DerivedLatency("stt", AnchorEvent.ENDPOINT, AnchorEvent.STT_FINAL),
    DerivedLatency("llm_first_emit", AnchorEvent.STT_FINAL, AnchorEvent.LLM_FIRST_EMIT),
    DerivedLatency("tts_first_audio", AnchorEvent.LLM_FIRST_EMIT, AnchorEvent.TTS_FIRST_AUDIO),
    DerivedLatency("transport", AnchorEvent.TTS_FIRST_AUDIO, AnchorEvent.AUDIO_OUT_FIRST),
)
"""The server's stages of a turn in the order they happen; together they sum to
``voice_to_voice``. Each is measured along the caller's wait (:func:`stage_latencies_ms`)."""


def stage_latencies_ms(events: Mapping[AnchorEvent, float]) -> dict[str, float | None]:
    """How long the caller waited on each stage: from the later of its start anchor and the
    moment the stages before it were done, to its end — zero for work done ahead of that.

    Preemptive work makes a plain ``end − start`` misleading: a reply whose audio was ready
    during the caller's pause, held while the end of turn was decided, would count that hold
    as *transport* (and the transcript and text decoded ahead as negative time). Along the
    wait, the hold is the end-of-turn decision's (``endpoint``), later stages count only what
    came after it, and the five still add up to ``voice_to_voice`` exactly. The first stage
    keeps its sign: a commit before the true end of speech is a talk-over, not zero."""
    out: dict[str, float | None] = {}
    done: float | None = None
    for latency in STAGE_LATENCIES:
        start, end = events.get(latency.start), events.get(latency.end)
        if start is None or end is None:
            out[latency.name] = None
            continue
        if done is None:
            out[latency.name], done = end - start, end
            continue
        begin = max(start, done)
        out[latency.name] = max(end - begin, 0.0)
        done = max(begin, end)
    return out


PLAYBACK = DerivedLatency("playback", AnchorEvent.AUDIO_OUT_FIRST, AnchorEvent.AUDIO_HEARD_FIRST)
"""From the server's first frame to the caller's first audible sound: the network, the
caller's jitter buffer and playout, and any near-silence the reply starts with."""

VOICE_TO_VOICE = DerivedLatency(
    "voice_to_voice", AnchorEvent.USER_SPEECH_END, AnchorEvent.AUDIO_OUT_FIRST
)
"""As the server sees it: from the end of the caller's speech to the first reply frame sent."""

HEARD_VOICE_TO_VOICE = DerivedLatency(
    "heard_voice_to_voice", AnchorEvent.USER_SPEECH_END, AnchorEvent.AUDIO_HEARD_FIRST
)
"""What the caller feels: from the end of their speech to the first sound of the answer they
hear — ``voice_to_voice`` plus ``playback``."""

ALL_LATENCIES: tuple[DerivedLatency, ...] = (
    HEARD_VOICE_TO_VOICE,
    VOICE_TO_VOICE,
    *STAGE_LATENCIES,
    PLAYBACK,
)
