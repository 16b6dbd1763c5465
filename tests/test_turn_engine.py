"""The turn engine end to end: real speech in, real models, a spoken reply out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from speech_data import clip, with_pause

from cadence.core.clock import MonotonicClock
from cadence.pipeline.config import CadenceConfig, TracingConfig
from cadence.pipeline.frames import Frame, SpeechStartFrame
from cadence.pipeline.session import VoiceSession
from cadence.pipeline.tracing import AnchorEvent, MemoryTraceSink
from cadence.tooling.caller import SimulatedCaller
from cadence.tooling.recording_output import RecordingAudioOutput

A = AnchorEvent


@dataclass
class SpeechStarts:
    """When the VAD announced each utterance (wall time on the session clock)."""

    clock: MonotonicClock
    at_ms: list[float] = field(default_factory=list)

    def on_frame(self, source: str, frame: Frame) -> None:
        if source == "vad" and isinstance(frame, SpeechStartFrame):
            self.at_ms.append(self.clock.now_ms())


@dataclass
class Call:
    session: VoiceSession
    caller: SimulatedCaller
    output: RecordingAudioOutput
    traces: MemoryTraceSink
    speech_starts: SpeechStarts


@pytest.fixture
async def call() -> AsyncIterator[Call]:
    config = CadenceConfig(tracing=TracingConfig(jsonl_path=None))
    clock = MonotonicClock()
    output, traces, starts = RecordingAudioOutput(clock), MemoryTraceSink(), SpeechStarts(clock)
    session = VoiceSession(
        config,
        output,
        session_id="test",
        output_sample_rate=16000,
        clock=clock,
        trace_sinks=[traces],
        observers=[starts],
    )
    await session.start()
    try:
        yield Call(session, SimulatedCaller(session), output, traces, starts)
    finally:
        await session.cancel("test over")


async def test_a_spoken_question_gets_a_spoken_reply_and_a_complete_trace(call: Call) -> None:
    await call.caller.pause(500)
    await call.caller.say(clip("sb_spk2_snt4").audio())
    await call.caller.pause(3000)
    await call.session.close()

    assert len(call.output.audio()) > 16000 * 0.5  # at least half a second of reply
    [turn] = call.traces.turns
    expected = {e for e in AnchorEvent if e is not A.INTERRUPTED}
    assert set(turn.events) == expected
    latencies = turn.latencies_ms
    assert all(value is not None for value in latencies.values())
    # The engine never answers before the caller stopped, and the stages add up.
    assert turn.events[A.AUDIO_OUT_FIRST] > turn.events[A.USER_SPEECH_END]
    assert turn.events[A.ENDPOINT] >= turn.events[A.USER_SPEECH_END]
    history = call.session.history
    assert [t.speaker for t in history] == ["user", "agent"]
    assert "coat" in history[0].text.lower()
    assert history[1].text


async def test_barge_in_stops_the_reply_and_truncates_the_history(call: Call) -> None:
    await call.caller.pause(500)
    await call.caller.say(clip("sb_spk2_snt1").audio())
    while not call.output.sent:  # until the reply is being heard
        await call.caller.pause(20)
    await call.caller.pause(300)
    await call.caller.say(clip("sb_spk2_snt4").audio())
    await call.caller.pause(2500)
    await call.session.close()

    first_reply = call.output.sent[0].frame.reply_index
    detected = next(t for t in call.speech_starts.at_ms if t > call.output.sent[0].at_ms)
    last_sent = max(s.at_ms for s in call.output.sent if s.frame.reply_index == first_reply)
    assert last_sent - detected <= 100
    assert call.output.clears
    interrupted = call.traces.turns[0]
    assert A.INTERRUPTED in interrupted.events
    heard = interrupted.annotations["heard"]
    history = call.session.history
    assert history[1].speaker == "agent"
    assert history[1].text == heard
    assert history[2].speaker == "user"
    assert "coat" in history[2].text.lower()


async def test_a_mid_utterance_pause_discards_the_speculative_work(call: Call) -> None:
    await call.caller.pause(500)
    await call.caller.say(with_pause(clip("sb_spk2_snt4").audio(), 170))
    await call.caller.pause(3000)
    await call.session.close()

    [turn] = call.traces.turns
    kinds = {(d.kind, d.reason) for d in turn.discarded}
    assert ("stt_decode", "speech resumed") in kinds
    starts = [(d.kind, d.start_ms) for d in turn.discarded]
    assert len(starts) == len(set(starts))  # each piece of work once, however many hops
    transcript = str(turn.annotations["transcript"]).lower()
    assert "before you go out" in transcript
    assert transcript.count("go out") == 1  # the words before the pause are not joined twice


async def test_silence_makes_no_turn(call: Call) -> None:
    await call.caller.pause(2000)
    await call.session.close()
    assert call.traces.turns == []
    assert call.output.sent == []
    await asyncio.sleep(0)
