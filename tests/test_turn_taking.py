"""Turn-taking through the real pipeline: real speech (and, for what no recording here says,
the embedded Piper voice as the caller), real VAD, whisper, end-of-turn model, generator and
TTS. Every timing is checked against where the caller's speech truly was (its energy
envelope), never against the engine's own estimate, and with margins that hold on a loaded
machine: a wrong rule misses them by seconds, not milliseconds.
"""

from __future__ import annotations

import itertools

from speech_data import clip, speech_bounds_ms, spoken, with_silence, words
from voice_call import DEFAULT, open_call

from cadence.core.clock import MonotonicClock
from cadence.pipeline.config import CadenceConfig, EndOfTurnConfig, TurnConfig
from cadence.pipeline.frames import AudioOutFrame, Frame, TurnCommittedFrame
from cadence.pipeline.session import SAMPLE_RATE
from cadence.pipeline.tracing import AnchorEvent
from cadence.tooling.bench.paused_clips import noise_bed, with_pause

A = AnchorEvent


def patient(max_wait_ms: int, **end_of_turn: object) -> CadenceConfig:
    """The default configuration with another maximum wait (and other end-of-turn settings)."""
    options = EndOfTurnConfig.model_validate({"max_wait_ms": max_wait_ms, **end_of_turn})
    turn = DEFAULT.turn.model_copy(update={"end_of_turn": options})
    return DEFAULT.model_copy(update={"turn": turn})


async def test_a_complete_sentence_is_answered_without_the_long_wait() -> None:
    # With a 5 s maximum, a turn the model judged unfinished would wait seconds more.
    async with open_call(patient(5000)) as call:
        await call.caller.pause(500)
        command = await call.say(
            clip("sb_spk2_snt1").audio()
        )  # "we are sure that one war is enough"
        await call.until_replying()
        await call.caller.pause(500)
        await call.session.close()
    [turn] = call.traces.turns
    assert turn.events[A.ENDPOINT] >= command.end_ms
    assert turn.events[A.ENDPOINT] < command.end_ms + 2500
    assert min(call.sent_ms()) >= command.end_ms


async def test_a_mid_sentence_pause_is_not_answered() -> None:
    # "mend the coat before … you go out", with 900 ms of the clip's own background inserted
    # between "before" and "you": the reply comes after "out", not into the pause.
    audio = clip("sb_spk2_snt4").audio()
    before, you = words("sb_spk2_snt4")[3:5]
    assert before[0] == "before"
    at_s = (before[2] + you[1]) / 2
    bed = noise_bed(audio, SAMPLE_RATE, SAMPLE_RATE, at_s=at_s)
    paused = with_pause(audio, SAMPLE_RATE, at_s, 0.9, bed)
    async with open_call() as call:
        await call.caller.pause(500)
        said = await call.say(paused)
        await call.until_replying()
        await call.caller.pause(500)
        await call.session.close()
    assert min(call.sent_ms()) >= said.end_ms
    # An early commit may have been withdrawn unheard; the turn answered is the whole sentence.
    *withdrawn, turn = call.traces.turns
    assert all(t.annotations.get("withdrawn") for t in withdrawn)
    assert "go out" in str(turn.annotations["transcript"]).lower()
    assert A.INTERRUPTED not in turn.events


async def test_a_silence_at_the_maximum_ends_the_turn() -> None:
    # "When you hear the bell" is not a sentence; and with the confidence asked pushed up to
    # P = 1, any utterance waits for as long as the engine may — but never past the maximum.
    bell, come = words("osr_us_0034_8k_s10")[4:6]
    assert bell[0] == "bell,"
    cut_s = (bell[2] + come[1]) / 2  # in the silence between "bell," and "come"
    unfinished = clip("osr_us_0034_8k_s10").audio()[: int(SAMPLE_RATE * cut_s)]
    async with open_call(patient(1200, confidence=0.999999, pause_scale_ms=1e6)) as call:
        await call.caller.pause(500)
        said = await call.say(unfinished)
        await call.until_replying()
        await call.caller.pause(300)
        await call.session.close()
    [turn] = call.traces.turns
    waited = turn.events[A.ENDPOINT] - said.end_ms
    assert 1200 - 150 <= waited < 1200 + 2000  # the VAD's end of speech is within a frame or two
    assert turn.annotations["end_of_turn_wait_ms"] == 1200


class PlayoutTimes:
    """When the reply's first audio frame reached playout, and when the turn was decided."""

    def __init__(self, clock: MonotonicClock) -> None:
        self._clock = clock
        self.first_audio_ms: float | None = None
        self.decided_ms: float | None = None

    def on_frame(self, source: str, frame: Frame) -> None:
        if source == "tts" and isinstance(frame, AudioOutFrame) and self.first_audio_ms is None:
            self.first_audio_ms = self._clock.now_ms()
        if source == "turn" and isinstance(frame, TurnCommittedFrame) and self.decided_ms is None:
            self.decided_ms = self._clock.now_ms()


async def test_the_first_audio_is_waiting_in_playout_when_the_turn_is_decided() -> None:
    # A 2.5 s wait whatever the words (room for a loaded machine: all of it takes ~0.4 s): the
    # reply prepared at pause onset — transcript, first piece, first phrase's audio — is in
    # playout before the decision, and goes out at it.
    clock = MonotonicClock()
    times = PlayoutTimes(clock)
    config = patient(2500, confidence=0.999999, pause_scale_ms=1e6)
    async with open_call(config, clock, times) as call:
        await call.caller.pause(500)
        said = await call.say(clip("sb_spk2_snt1").audio())  # "we are sure that one war is enough"
        await call.until_replying()
        await call.caller.pause(300)
        await call.session.close()
    assert times.first_audio_ms is not None
    assert times.decided_ms is not None
    assert said.end_ms < times.first_audio_ms < times.decided_ms
    assert times.decided_ms >= said.end_ms + 2300  # the wait, from the true end of speech
    assert min(call.sent_ms()) >= times.decided_ms  # held until the decision


async def test_hold_on_gets_no_reply_but_a_short_acknowledgement() -> None:
    async with open_call() as call:
        await call.caller.pause(500)
        await call.say(spoken("Hold on, let me find my card."))
        await call.caller.pause(3000)  # finding the card, after the acknowledgement
        await call.until(lambda: len(call.session.history) >= 2, "the acknowledgement")
        await call.say(with_silence(clip("sb_spk2_snt4").audio(), 0, 0))
        await call.until_played_out(2)  # the acknowledgement, then the answer
        await call.session.close()
    history = call.session.history
    assert "hold on" in history[0].text.lower()
    assert history[1].text == DEFAULT.turn.hold_reply
    assert "coat" in history[2].text.lower()  # the next turn answered as usual
    assert history[3].speaker == "agent"
    assert history[3].text != DEFAULT.turn.hold_reply


async def test_a_backchannel_during_the_reply_resumes_it() -> None:
    async with open_call() as call:
        await call.caller.pause(500)
        await call.say(clip("sb_spk2_snt1").audio())  # "we are sure that one war is enough"
        await call.until_replying()
        await call.caller.pause(800)  # heard for longer than yield_within_ms: an answer to it
        yeah = await call.say(spoken("Yeah."))
        await call.until_played_out(1)
        await call.session.close()
    [turn, *_] = call.traces.turns
    assert A.INTERRUPTED not in turn.events
    assert turn.annotations["backchannels"] == 1
    reply_index = call.output.sent[0].frame.reply_index
    sent = call.sent_ms(reply_index)
    # The reply stopped while the caller said "yeah" and went on after it.
    gaps = [(a, b) for a, b in itertools.pairwise(sent) if b - a > 200]
    assert any(yeah.start_ms - 500 < a < yeah.end_ms and b > yeah.end_ms for a, b in gaps)
    history = call.session.history
    assert [t.speaker for t in history] == ["user", "agent"]
    assert history[1].text == turn.annotations["reply"]  # all of it, nothing cut


async def test_no_backchannels_means_any_speech_cuts_the_reply() -> None:
    turn_config = TurnConfig(interruption={"backchannels": False})
    async with open_call(DEFAULT.model_copy(update={"turn": turn_config})) as call:
        await call.caller.pause(500)
        await call.say(clip("sb_spk2_snt1").audio())
        await call.until_replying()
        await call.caller.pause(800)
        await call.say(spoken("Yeah."))
        await call.until(lambda: bool(call.traces.turns), "the interrupted turn's trace")
        await call.session.close()
    assert A.INTERRUPTED in call.traces.turns[0].events


async def test_a_reply_started_into_a_pause_yields_and_the_turn_goes_on_as_one() -> None:
    # The VAD's silence alone ends the turn here (`silence`: 200 ms), so the agent answers into
    # the caller's pause after "we are sure that"; the caller goes on the moment the reply is
    # heard. The reply stops within a syllable, is taken back, and the whole sentence is
    # answered as one turn. (A wide yield_within_ms: a loaded machine's lag must not make the
    # caller's going on look like an answer to the reply.)
    end_of_turn = EndOfTurnConfig(model="silence")
    turn = TurnConfig(end_of_turn=end_of_turn, interruption={"yield_within_ms": 1500})
    audio = clip("sb_spk2_snt1").audio()  # "we are sure that one war is enough"
    that, one = words("sb_spk2_snt1")[3:5]
    assert (that[0], one[0]) == ("that", "one")
    cut = int(SAMPLE_RATE * (that[2] + one[1]) / 2)
    async with open_call(DEFAULT.model_copy(update={"turn": turn})) as call:
        await call.caller.pause(500)
        await call.say(audio[:cut])
        await call.until_replying()
        went_on = await call.say(audio[cut:])
        await call.until_played_out(1)
        await call.session.close()
    first, *_ = call.traces.turns
    assert first.annotations.get("withdrawn") is True
    yielded_after_ms = first.annotations["yielded_after_ms"]
    assert isinstance(yielded_after_ms, float)
    assert 0 < yielded_after_ms <= 1500
    yielded = call.output.sent[0].frame.reply_index
    heard = call.sent_ms(yielded)
    assert max(heard) < went_on.start_ms + 1500  # nothing more of it once the caller went on
    history = call.session.history
    assert [t.speaker for t in history] == ["user", "agent"]
    said = history[0].text.lower()
    assert "sure" in said
    assert "enough" in said


async def test_a_phone_number_read_in_groups_is_not_answered_between_them() -> None:
    # "My number is four one five," reads as finished to a language model (P ~0.8); the
    # engine counts the digits: three of a phone number, so the caller goes on. A second of
    # silence, then the rest: no reply before its true end, and one turn with all ten digits.
    first = spoken("My number is four one five,")
    rest = spoken("five five five, one two three four.")
    async with open_call() as call:
        await call.caller.pause(500)
        await call.say(first)
        await call.caller.pause(1000)
        said = await call.say(rest)
        await call.until_replying()
        await call.caller.pause(300)
        await call.session.close()
    assert min(call.sent_ms()) >= said.end_ms
    answered = [t for t in call.traces.turns if not t.annotations.get("withdrawn")]
    digits = "".join(c for c in str(answered[0].annotations["transcript"]) if c.isdigit())
    assert digits.endswith("1234")
    assert len(digits) >= 10


def test_the_spoken_test_words_are_speech() -> None:
    start, end = speech_bounds_ms(spoken("Yeah."), SAMPLE_RATE)
    assert 100 < end - start < 1500
