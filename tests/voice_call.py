"""A call to a real ``VoiceSession`` in process: a simulated caller speaks real audio in real
time, the reply is recorded, and each utterance's true bounds are known on the session clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from speech_data import speech_bounds_ms

from cadence.core.clock import MonotonicClock
from cadence.pipeline.config import CadenceConfig, TracingConfig
from cadence.pipeline.frames import EndOfReplyFrame, Frame, SpeechStartFrame
from cadence.pipeline.pipeline import FrameObserver
from cadence.pipeline.session import SAMPLE_RATE, VoiceSession
from cadence.pipeline.tracing import MemoryTraceSink
from cadence.tooling.caller import SimulatedCaller
from cadence.tooling.recording_output import RecordingAudioOutput
from cadence.voice.audio import PCM16


@dataclass
class SpeechStarts:
    """When the VAD announced each utterance (wall time on the session clock)."""

    clock: MonotonicClock
    at_ms: list[float] = field(default_factory=list)

    def on_frame(self, source: str, frame: Frame) -> None:
        if source == "vad" and isinstance(frame, SpeechStartFrame):
            self.at_ms.append(self.clock.now_ms())


@dataclass
class PlayedOut:
    """The replies the playout has handed over to their last frame, in order."""

    replies: list[int] = field(default_factory=list)

    def on_frame(self, source: str, frame: Frame) -> None:
        if source == "playout" and isinstance(frame, EndOfReplyFrame):
            self.replies.append(frame.reply_index)


WAIT_MS = 60_000.0
"""How long the caller stays on the line for what follows from what it did (a reply, its
end): only a broken engine takes this long, however busy the machine."""


@dataclass(frozen=True)
class Utterance:
    """Where the caller's speech in a clip really was, on the session clock."""

    start_ms: float
    end_ms: float


@dataclass
class Call:
    session: VoiceSession
    caller: SimulatedCaller
    output: RecordingAudioOutput
    traces: MemoryTraceSink
    speech_starts: SpeechStarts
    played_out: PlayedOut

    async def say(self, pcm: PCM16) -> Utterance:
        """The caller says ``pcm``; where its speech truly started and ended."""
        start, end = speech_bounds_ms(pcm, SAMPLE_RATE)
        at = self.caller.position_ms
        await self.caller.say(pcm)
        return Utterance(at + start, at + end)

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        """The caller stays silent (a line is never quiet by absence) until ``condition``
        holds; after ``WAIT_MS`` of it, the test fails naming ``what``."""
        for _ in range(int(WAIT_MS / 20)):
            if condition():
                return
            await self.caller.pause(20)
        raise AssertionError(f"not within {WAIT_MS / 1000:.0f} s: {what}")

    async def until_replying(self) -> None:
        """Silence from the caller until reply audio is being sent."""
        await self.until(lambda: bool(self.output.sent), "a reply")

    async def until_played_out(self, replies: int) -> None:
        """Silence from the caller until ``replies`` replies have been played to their end."""
        await self.until(lambda: len(self.played_out.replies) >= replies, f"{replies} replies")

    def sent_ms(self, reply_index: int | None = None) -> list[float]:
        """When each frame of reply audio (of one reply, if given) was handed over."""
        return [
            s.at_ms
            for s in self.output.sent
            if reply_index is None or s.frame.reply_index == reply_index
        ]


DEFAULT = CadenceConfig(tracing=TracingConfig(jsonl_path=None))


@asynccontextmanager
async def open_call(
    config: CadenceConfig = DEFAULT, clock: MonotonicClock | None = None, *observers: FrameObserver
) -> AsyncIterator[Call]:
    """A call on ``config``; ``observers`` see every frame (on ``clock``, the session's)."""
    clock = clock or MonotonicClock()
    output, traces, starts = RecordingAudioOutput(clock), MemoryTraceSink(), SpeechStarts(clock)
    played = PlayedOut()
    session = VoiceSession(
        config,
        output,
        session_id="test",
        output_sample_rate=16000,
        clock=clock,
        trace_sinks=[traces],
        observers=[starts, played, *observers],
    )
    await session.start()
    try:
        yield Call(session, SimulatedCaller(session), output, traces, starts, played)
    finally:
        await session.cancel("test over")
