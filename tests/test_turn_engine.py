"""The turn engine end to end: real speech in, real models, a spoken reply out.

When the reply is heard is checked against the truth — where the caller's speech really starts
and ends in each clip (its energy envelope, ``speech_bounds_ms``), placed on the session clock
where the caller started saying it — never against the engine's own VAD: a reply that talks
over the caller fails whatever the VAD thought.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from speech_data import clip, speech_bounds_ms, with_pause

from cadence.core.clock import MonotonicClock
from cadence.pipeline.config import CadenceConfig, STTConfig, TracingConfig
from cadence.pipeline.frames import Frame, SpeechStartFrame
from cadence.pipeline.session import SAMPLE_RATE, VoiceSession
from cadence.pipeline.tracing import STAGE_LATENCIES, VOICE_TO_VOICE, AnchorEvent, MemoryTraceSink
from cadence.tooling.caller import SimulatedCaller
from cadence.tooling.recording_output import RecordingAudioOutput
from cadence.voice.audio import PCM16

A = AnchorEvent


@dataclass
class SpeechStarts:
    """When the VAD announced each utterance (wall time on the session clock)."""

    clock: MonotonicClock
    at_ms: list[float] = field(default_factory=list)

    def on_frame(self, source: str, frame: Frame) -> None:
        if source == "vad" and isinstance(frame, SpeechStartFrame):
            self.at_ms.append(self.clock.now_ms())


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

    async def say(self, pcm: PCM16) -> Utterance:
        """The caller says ``pcm``; where its speech truly started and ended."""
        start, end = speech_bounds_ms(pcm, SAMPLE_RATE)
        at = self.caller.position_ms
        await self.caller.say(pcm)
        return Utterance(at + start, at + end)

    def sent_ms(self, reply_index: int | None = None) -> list[float]:
        """When each frame of reply audio (of one reply, if given) was handed over."""
        return [
            s.at_ms
            for s in self.output.sent
            if reply_index is None or s.frame.reply_index == reply_index
        ]


DEFAULT = CadenceConfig(tracing=TracingConfig(jsonl_path=None))
NO_CAPTIONS = DEFAULT.model_copy(
    update={
        "models": DEFAULT.models.model_copy(update={"stt": STTConfig(partials_interval_ms=None)})
    }
)
"""Without live captions: a caption decode in flight when a pause begins makes the engine skip
the speculative decode (by design: it would wait for the caption), so whether there is one to
discard would depend on how fast the machine decodes."""


@pytest.fixture
async def call(request: pytest.FixtureRequest) -> AsyncIterator[Call]:
    config: CadenceConfig = getattr(request, "param", DEFAULT)
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


SERVER_LATENCIES = (VOICE_TO_VOICE, *STAGE_LATENCIES)
"""What a server's own trace of a turn measures (a caller's measures come from benchmarks)."""


async def test_a_spoken_question_gets_a_spoken_reply_and_a_complete_trace(call: Call) -> None:
    await call.caller.pause(500)
    question = await call.say(clip("sb_spk2_snt4").audio())
    await call.caller.pause(3000)
    await call.session.close()

    assert len(call.output.audio()) > 16000 * 0.5  # at least half a second of reply
    [turn] = call.traces.turns
    expected = {A.USER_SPEECH_START, A.LLM_DONE}
    expected |= {event for latency in SERVER_LATENCIES for event in (latency.start, latency.end)}
    assert set(turn.events) == expected
    assert all(turn.latencies_ms[latency.name] is not None for latency in SERVER_LATENCIES)
    # Not a word of the reply before the caller had really finished, nor the endpoint.
    assert min(call.sent_ms()) >= question.end_ms
    assert turn.events[A.AUDIO_OUT_FIRST] >= question.end_ms
    assert turn.events[A.ENDPOINT] >= question.end_ms
    history = call.session.history
    assert [t.speaker for t in history] == ["user", "agent"]
    assert "coat" in history[0].text.lower()
    assert history[1].text


async def test_barge_in_stops_the_reply_and_truncates_the_history(call: Call) -> None:
    await call.caller.pause(500)
    question = await call.say(clip("sb_spk2_snt1").audio())
    for _ in range(3000):  # until the reply is being heard (a minute at most)
        if call.output.sent:
            break
        await call.caller.pause(20)
    await call.caller.pause(300)
    interruption = await call.say(clip("sb_spk2_snt4").audio())
    await call.caller.pause(2500)
    await call.session.close()

    first_reply = call.output.sent[0].frame.reply_index
    assert min(call.sent_ms(first_reply)) >= question.end_ms
    # The caller really talked over the reply; the engine heard them, not something before.
    last_sent = max(call.sent_ms(first_reply))
    assert last_sent > interruption.start_ms
    detected = next(t for t in call.speech_starts.at_ms if t > call.output.sent[0].at_ms)
    assert detected >= interruption.start_ms
    # And stopped the reply while they were still talking: nothing of it after the clear.
    cleared = next(at for at in call.output.clears if at > call.output.sent[0].at_ms)
    assert interruption.start_ms <= cleared < interruption.end_ms
    assert last_sent <= cleared
    # The answer to the interruption waited for its end.
    later = [s.at_ms for s in call.output.sent if s.frame.reply_index != first_reply]
    assert not later or min(later) >= interruption.end_ms
    interrupted = call.traces.turns[0]
    assert A.INTERRUPTED in interrupted.events
    heard = interrupted.annotations["heard"]
    history = call.session.history
    assert history[1].speaker == "agent"
    assert history[1].text == heard
    assert history[2].speaker == "user"
    assert "coat" in history[2].text.lower()


@pytest.mark.parametrize("call", [NO_CAPTIONS], indirect=True, ids=["no captions"])
async def test_a_mid_utterance_pause_discards_the_speculative_work(call: Call) -> None:
    await call.caller.pause(500)
    utterance = await call.say(with_pause(clip("sb_spk2_snt4").audio(), 170))
    await call.caller.pause(3000)
    await call.session.close()

    # The speculative reply made in the pause was not heard in it: the reply came after the
    # caller's true end of speech.
    assert call.output.sent
    assert min(call.sent_ms()) >= utterance.end_ms
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
