"""``cadence converse``: recorded clips as the caller's side of one conversation.

Each clip is spoken in real time; between clips the line carries silence until the agent has
finished its reply (or ``max_reply_s`` passed) and then ``gap_ms`` more, as a caller who
listens before speaking again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cadence.core.clock import MonotonicClock
from cadence.llm import Turn
from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.frames import EndOfReplyFrame, Frame
from cadence.pipeline.session import VoiceSession
from cadence.pipeline.tools import Tool
from cadence.tooling.caller import SimulatedCaller
from cadence.tooling.recording_output import RecordingAudioOutput
from cadence.voice.audio import PCM16


@dataclass(frozen=True)
class Conversation:
    history: list[Turn]
    output: RecordingAudioOutput
    """Everything the agent said, frame by frame, with when it was sent."""


class _RepliesHeard:
    """Counts replies played to their end."""

    def __init__(self) -> None:
        self.count = 0

    def on_frame(self, source: str, frame: Frame) -> None:
        if source == "playout" and isinstance(frame, EndOfReplyFrame):
            self.count += 1


async def converse(
    utterances: list[PCM16],
    config: CadenceConfig,
    *,
    output_sample_rate: int = 16000,
    gap_ms: float = 700.0,
    max_reply_s: float = 15.0,
    tools: Sequence[Tool] | None = None,
) -> Conversation:
    """Speak each 16 kHz utterance in turn and wait for the agent's answer. The session
    offers ``tools`` if given, else what the configuration's ``tools`` section names."""
    clock = MonotonicClock()
    output = RecordingAudioOutput(clock)
    heard = _RepliesHeard()
    session = VoiceSession(
        config, output, session_id="converse", output_sample_rate=output_sample_rate,
        clock=clock, observers=[heard], tools=tools,
    )  # fmt: skip
    await session.start()
    caller = SimulatedCaller(session)
    try:
        await caller.pause(gap_ms)
        for pcm in utterances:
            replies = heard.count
            await caller.say(pcm)
            waited = 0.0
            while heard.count == replies and waited < max_reply_s * 1000:
                await caller.pause(100)
                waited += 100
            await caller.pause(gap_ms)
        await session.close()
    finally:
        await session.cancel("conversation over")
    return Conversation(session.history, output)
