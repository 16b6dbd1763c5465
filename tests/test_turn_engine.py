"""The turn engine end to end: real speech in, real models, a spoken reply out.

When the reply is heard is checked against the truth — where the caller's speech really starts
and ends in each clip (its energy envelope, ``speech_bounds_ms``), placed on the session clock
where the caller started saying it — never against the engine's own VAD: a reply that talks
over the caller fails whatever the VAD thought.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from speech_data import clip, with_pause
from voice_call import DEFAULT, Call, open_call

from cadence.pipeline.tracing import STAGE_LATENCIES, VOICE_TO_VOICE, AnchorEvent

A = AnchorEvent


@pytest.fixture
async def call(request: pytest.FixtureRequest) -> AsyncIterator[Call]:
    async with open_call(getattr(request, "param", DEFAULT)) as opened:
        yield opened


SERVER_LATENCIES = (VOICE_TO_VOICE, *STAGE_LATENCIES)
"""What a server's own trace of a turn measures (a caller's measures come from benchmarks)."""


async def test_a_spoken_question_gets_a_spoken_reply_and_a_complete_trace(call: Call) -> None:
    await call.caller.pause(500)
    question = await call.say(clip("sb_spk2_snt4").audio())
    await call.until_replying()
    await call.session.close()  # once the reply in progress has been sent to its end

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
    await call.until_replying()
    await call.caller.pause(800)  # 0.8 s into the reply, the caller talks over it
    interruption = await call.say(clip("sb_spk2_snt4").audio())
    first_reply = call.output.sent[0].frame.reply_index
    await call.until(
        lambda: any(s.frame.reply_index != first_reply for s in call.output.sent),
        "the answer to the interruption",
    )
    await call.session.close()

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
    assert min(later) >= interruption.end_ms
    interrupted = call.traces.turns[0]
    assert A.INTERRUPTED in interrupted.events
    heard = interrupted.annotations["heard"]
    assert heard  # 0.8 s into the reply: the first words were heard, in mid-phrase
    history = call.session.history
    assert history[1].speaker == "agent"
    assert history[1].text == heard
    assert history[2].speaker == "user"
    assert "coat" in history[2].text.lower()


async def test_a_mid_utterance_pause_discards_the_speculative_work(call: Call) -> None:
    # With live captions on (the default): a caption being decoded when the pause begins is
    # dropped, and the speculative decode starts all the same.
    await call.caller.pause(500)
    utterance = await call.say(with_pause(clip("sb_spk2_snt4").audio(), 170))
    await call.until_replying()
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
