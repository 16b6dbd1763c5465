"""The turn engine's rules on a virtual clock: when a silence ends the turn, what a caller's
sound over the reply does, and what "hold on" gets — frame by frame, no models.

The end-of-turn detector here reads punctuation (P is 1 or 0), so each wait is known exactly;
the real speech through the real models is in ``test_turn_taking.py``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from stub_generators import ScriptedGenerator

from cadence.core.clock import VirtualClock
from cadence.pipeline.config import EndOfTurnConfig, TurnConfig
from cadence.pipeline.end_of_turn import EndOfTurnDetector, end_of_turn_wait_ms
from cadence.pipeline.frames import (
    BackchannelFrame,
    BargeInFrame,
    EndpointFrame,
    FinalTranscriptFrame,
    Frame,
    SpeculativeTranscriptFrame,
    SpeechResumedFrame,
    SpeechStartFrame,
    TextPieceFrame,
    TurnCommittedFrame,
    TurnWithdrawnFrame,
)
from cadence.pipeline.pipeline import Pipeline
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.playout_gate import PlayoutGate
from cadence.pipeline.stage import Stage
from cadence.pipeline.stages.turn import TurnStage
from cadence.pipeline.stages.turn.history import History
from cadence.pipeline.stages.turn.reply import Reply

REPLY = "Sure, I can help with that."


class Recorder:
    def __init__(self) -> None:
        self.frames: list[Frame] = []

    def on_frame(self, source: str, frame: Frame) -> None:
        if source == "turn":
            self.frames.append(frame)

    def of(self, kind: type[Frame]) -> list[Frame]:
        return [f for f in self.frames if isinstance(f, kind)]


@dataclass
class Engine:
    clock: VirtualClock
    stage: TurnStage
    pipeline: Pipeline
    ledger: PlaybackLedger
    gate: PlayoutGate
    seen: Recorder

    async def feed(self, frame: Frame) -> None:
        await self.pipeline.queue(frame)
        await settle()

    async def utterance(self, text: str, *, start_ms: float, end_ms: float) -> None:
        """An utterance spoken from ``start_ms`` to ``end_ms``, its endpoint 200 ms later."""
        await self.at(start_ms)
        await self.feed(SpeechStartFrame(at_ms=start_ms))
        await self.at(end_ms + 200)
        await self.feed(EndpointFrame(at_ms=end_ms + 200, speech_end_ms=end_ms))
        await self.feed(FinalTranscriptFrame(text=text, at_ms=end_ms + 200))

    async def at(self, ms: float) -> None:
        await self.clock.advance(ms - self.clock.now_ms())
        await settle()

    def commits(self) -> list[TurnCommittedFrame]:
        return [f for f in self.seen.of(TurnCommittedFrame) if isinstance(f, TurnCommittedFrame)]

    def hear_all_of(self, reply_index: int) -> None:
        self.ledger.phrase(reply_index, REPLY, 0.0, 2000.0)
        self.ledger.played(reply_index, 400.0)


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


END_OF_TURN = EndOfTurnConfig(model="punctuation", min_wait_ms=200, max_wait_ms=1500)
"""P is 1 or 0: 1 waits the least, 0 the most."""


@pytest.fixture
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[Engine]:
    config: TurnConfig = getattr(request, "param", TurnConfig(end_of_turn=END_OF_TURN))
    clock, ledger, gate, seen = VirtualClock(), PlaybackLedger(), PlayoutGate(), Recorder()
    stage = TurnStage(
        ScriptedGenerator(clock, [(REPLY, ())], cycle=True),  # every turn: REPLY, at once
        clock=clock,
        ledger=ledger,
        config=config,
        end_of_turn=EndOfTurnDetector(config.end_of_turn, None),
        gate=gate,
    )
    pipeline = Pipeline([stage, Stage(name="sink")], observers=[seen])
    await pipeline.start()
    try:
        yield Engine(clock, stage, pipeline, ledger, gate, seen)
    finally:
        await pipeline.cancel("test over")


def test_the_wait_is_the_silence_after_which_the_turn_is_over_with_the_confidence() -> None:
    options = EndOfTurnConfig(
        min_wait_ms=200, max_wait_ms=1600, confidence=0.9, pause_scale_ms=200.0
    )

    def logit(p: float) -> float:
        return math.log(p / (1 - p))

    # Continuous: every P its own wait, 200 ms a unit of log-odds short of the confidence.
    for p in (0.2, 0.5, 0.7):
        assert end_of_turn_wait_ms(p, options) == pytest.approx(200 * (logit(0.9) - logit(p)))
    waits = [end_of_turn_wait_ms(p / 100, options) for p in range(1, 100)]
    assert waits == sorted(waits, reverse=True)  # the surer the words, the shorter the wait
    assert end_of_turn_wait_ms(0.95, options) == 200  # no less than the least
    assert end_of_turn_wait_ms(0.001, options) == 1600  # no more than the most
    # A higher confidence waits longer for the same words.
    surer = options.model_copy(update={"confidence": 0.99})
    assert end_of_turn_wait_ms(0.5, surer) > end_of_turn_wait_ms(0.5, options)


def test_settings_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="min_wait_ms"):
        EndOfTurnConfig(min_wait_ms=900, max_wait_ms=800)
    with pytest.raises(ValueError, match="confidence"):
        EndOfTurnConfig(confidence=1.0)


async def test_a_complete_turn_is_committed_after_the_short_wait(engine: Engine) -> None:
    await engine.utterance("Book it for Tuesday.", start_ms=1000, end_ms=2000)
    [commit] = engine.commits()
    assert commit.at_ms == 2200  # the endpoint already waited 200 ms: nothing more
    assert commit.end_of_turn_p == 1.0


async def test_an_unfinished_turn_waits_up_to_the_maximum(engine: Engine) -> None:
    await engine.utterance("I would like a table for", start_ms=1000, end_ms=2000)
    await engine.at(3499)
    assert engine.commits() == []  # a caller pausing mid-sentence is not answered
    await engine.at(3500)
    [commit] = engine.commits()
    assert commit.at_ms == 3500
    assert commit.wait_ms == 1500
    assert engine.seen.of(TextPieceFrame)  # the reply was ready all along


async def test_speech_in_the_wait_continues_the_turn(engine: Engine) -> None:
    await engine.utterance("I would like a table for", start_ms=1000, end_ms=2000)
    await engine.utterance("two people.", start_ms=2900, end_ms=3500)
    [commit] = engine.commits()
    assert commit.user_text == "I would like a table for two people."
    assert commit.at_ms == 3700


async def test_hold_on_gets_the_hold_reply_and_no_answer(engine: Engine) -> None:
    await engine.utterance("Hold on, let me find my card.", start_ms=1000, end_ms=2500)
    [commit] = engine.commits()
    pieces = "".join(
        f.text for f in engine.seen.of(TextPieceFrame) if isinstance(f, TextPieceFrame)
    )
    assert pieces == "Okay."
    engine.ledger.finish(commit.reply_index)  # and the caller heard it
    await engine.at(4000)
    assert [t.text for t in engine.stage.history] == ["Hold on, let me find my card.", "Okay."]
    # The conversation resumes with the caller's next turn, answered as usual.
    await engine.utterance("It's four four one seven.", start_ms=20_000, end_ms=21_500)
    assert engine.commits()[-1].user_text == "It's four four one seven."
    assert engine.stage.history[-1].text == REPLY


@pytest.mark.parametrize(
    "engine", [TurnConfig(end_of_turn=END_OF_TURN, hold_reply="")], indirect=True
)
async def test_a_silent_hold_keeps_the_words_for_the_next_turn(engine: Engine) -> None:
    await engine.utterance("One moment please.", start_ms=1000, end_ms=2000)
    await engine.at(10_000)
    assert engine.commits() == []
    assert engine.seen.of(TextPieceFrame) == []
    await engine.utterance("My card number is 4417.", start_ms=20_000, end_ms=21_500)
    assert engine.commits()[-1].user_text == "One moment please. My card number is 4417."


async def answered(engine: Engine) -> int:
    """A committed reply that the caller has started to hear; its index."""
    await engine.utterance("What are your opening hours?", start_ms=1000, end_ms=2000)
    [commit] = engine.commits()
    engine.hear_all_of(commit.reply_index)
    return commit.reply_index


async def test_a_backchannel_pauses_the_reply_and_resumes_it(engine: Engine) -> None:
    reply_index = await answered(engine)
    await engine.at(3000)
    await engine.feed(SpeechStartFrame(at_ms=3000))
    assert not engine.gate.is_open  # paused the moment the caller made a sound
    await engine.at(3600)
    await engine.feed(EndpointFrame(at_ms=3600, speech_end_ms=3400))
    await engine.feed(FinalTranscriptFrame(text="Uh-huh.", at_ms=3650))
    assert engine.gate.is_open
    [backchannel] = engine.seen.of(BackchannelFrame)
    assert isinstance(backchannel, BackchannelFrame)
    assert backchannel.reply_index == reply_index
    assert engine.seen.of(BargeInFrame) == []
    assert len(engine.commits()) == 1  # "uh-huh" is no turn of its own
    assert [t.speaker for t in engine.stage.history] == ["user", "agent"]


async def test_real_words_over_the_reply_cut_it(engine: Engine) -> None:
    reply_index = await answered(engine)
    await engine.at(3000)
    await engine.feed(SpeechStartFrame(at_ms=3000))
    await engine.at(4000)
    await engine.feed(EndpointFrame(at_ms=4000, speech_end_ms=3800))
    await engine.feed(FinalTranscriptFrame(text="What about Sundays?", at_ms=4050))
    [barge_in] = engine.seen.of(BargeInFrame)
    assert isinstance(barge_in, BargeInFrame)
    assert barge_in.reply_index == reply_index
    assert barge_in.at_ms == 3000  # dated from when the caller began, not when it was judged
    assert engine.gate.is_open
    # Cut to the words heard (400 of 2,000 ms: a fifth of six words), then the new words answered.
    assert engine.stage.history[1].text == "Sure,"
    assert engine.commits()[-1].user_text == "What about Sundays?"


async def test_speech_longer_than_a_backchannel_cuts_without_a_transcript(engine: Engine) -> None:
    await answered(engine)
    await engine.at(3000)
    await engine.feed(SpeechStartFrame(at_ms=3000))
    await engine.at(4199)
    assert engine.seen.of(BargeInFrame) == []
    await engine.at(4200)  # max_backchannel_ms (1,200) of speech
    assert len(engine.seen.of(BargeInFrame)) == 1
    assert engine.gate.is_open


@pytest.mark.parametrize(
    "engine",
    [TurnConfig(end_of_turn=END_OF_TURN, interruption={"backchannels": False})],
    indirect=True,
)
async def test_without_backchannels_any_speech_cuts_at_once(engine: Engine) -> None:
    await answered(engine)
    await engine.at(3000)
    await engine.feed(SpeechStartFrame(at_ms=3000))
    assert len(engine.seen.of(BargeInFrame)) == 1
    assert engine.gate.is_open


async def test_a_reply_heard_for_a_moment_yields_when_the_caller_goes_on(engine: Engine) -> None:
    # Answered into a pause: the caller was not done, and goes on within a syllable of the
    # reply (150 ms heard, under yield_within_ms): the reply yields at once, no barge-in, and
    # the turn goes on as one — its words joined, answered once.
    await engine.utterance("Book a table for two.", start_ms=1000, end_ms=2000)
    [first] = engine.commits()
    engine.ledger.phrase(first.reply_index, REPLY, 0.0, 2000.0)
    engine.ledger.played(first.reply_index, 150.0)
    await engine.utterance("At seven tonight.", start_ms=2500, end_ms=3500)
    [withdrawn] = engine.seen.of(TurnWithdrawnFrame)
    assert isinstance(withdrawn, TurnWithdrawnFrame)
    assert withdrawn.reply_index == first.reply_index
    assert withdrawn.heard_ms == 150.0
    assert engine.seen.of(BargeInFrame) == []
    assert engine.commits()[-1].user_text == "Book a table for two. At seven tonight."
    assert [t.text for t in engine.stage.history] == [
        "Book a table for two. At seven tonight.",
        REPLY,
    ]


async def test_a_reply_heard_longer_is_paused_not_taken_back(engine: Engine) -> None:
    # 400 ms heard, past yield_within_ms (300): the caller may be answering it — paused until
    # the words say what the sound was (here: words, a barge-in, the history cut to them).
    reply_index = await answered(engine)
    await engine.at(3000)
    await engine.feed(SpeechStartFrame(at_ms=3000))
    assert not engine.gate.is_open
    assert engine.seen.of(TurnWithdrawnFrame) == []
    await engine.at(4000)
    await engine.feed(EndpointFrame(at_ms=4000, speech_end_ms=3800))
    await engine.feed(FinalTranscriptFrame(text="And on Sundays?", at_ms=4050))
    [barge_in] = engine.seen.of(BargeInFrame)
    assert isinstance(barge_in, BargeInFrame)
    assert barge_in.reply_index == reply_index


async def uh_huh_at_the_pause(engine: Engine) -> int:
    """A reply being heard, the caller's sound over it at 3,000 ms, and "Uh-huh." as the
    speculative transcript at its pause (300 ms later); the reply's index."""
    reply_index = await answered(engine)
    await engine.at(3000)
    await engine.feed(SpeechStartFrame(at_ms=3000))
    await engine.at(3300)
    await engine.feed(SpeculativeTranscriptFrame(text="Uh-huh.", at_ms=3300))
    return reply_index


async def test_a_backchannel_judged_early_leaves_its_final_no_turn(engine: Engine) -> None:
    # Judged on the speculative transcript: the reply resumes then, and the same utterance's
    # final transcript is the backchannel's own — no turn. The caller's next utterance is one.
    reply_index = await uh_huh_at_the_pause(engine)
    assert engine.gate.is_open
    assert len(engine.seen.of(BackchannelFrame)) == 1
    await engine.at(3600)
    await engine.feed(EndpointFrame(at_ms=3600, speech_end_ms=3400))
    await engine.feed(FinalTranscriptFrame(text="Uh-huh.", at_ms=3650))
    assert len(engine.commits()) == 1
    assert engine.seen.of(BargeInFrame) == []
    engine.ledger.finish(reply_index)  # the reply is heard to its end
    await engine.utterance("What about Sundays?", start_ms=6000, end_ms=7000)
    assert engine.commits()[-1].user_text == "What about Sundays?"
    assert [t.speaker for t in engine.stage.history] == ["user", "agent", "user", "agent"]


async def test_words_after_a_backchannel_in_the_same_utterance_are_a_turn(engine: Engine) -> None:
    # "Uh-huh" at the caller's pause resumes the reply; their speech coming back pauses it
    # again, and the final transcript has words: a barge-in after all, then answered.
    reply_index = await uh_huh_at_the_pause(engine)
    await engine.at(3400)
    await engine.feed(SpeechResumedFrame(at_ms=3400))
    assert not engine.gate.is_open
    await engine.at(4000)
    await engine.feed(EndpointFrame(at_ms=4000, speech_end_ms=3800))
    await engine.feed(FinalTranscriptFrame(text="Uh-huh, and on Sundays?", at_ms=4050))
    [barge_in] = engine.seen.of(BargeInFrame)
    assert isinstance(barge_in, BargeInFrame)
    assert (barge_in.reply_index, barge_in.at_ms) == (reply_index, 3400)
    assert engine.commits()[-1].user_text == "Uh-huh, and on Sundays?"


def _committed(history: History, reply: Reply) -> None:
    """What the stage does at the commit."""
    reply.commit(0.0)
    history.open_turn(reply)
    history.add_reply_once_ready(reply)


def _generated(history: History, reply: Reply) -> None:
    """What the speaker does at the end of the reply's generation."""
    reply.generation_ended()
    history.add_reply_once_ready(reply)


@pytest.mark.parametrize("generated_first", [True, False])
def test_the_reply_goes_into_the_history_once_at_the_second_of_commit_and_end(
    generated_first: bool,
) -> None:
    history = History()
    reply = Reply(0, "Open on Sundays?", transcript_at_ms=0.0, started_ms=0.0)
    reply.add_words("Yes, from ten.")
    first, second = (_generated, _committed) if generated_first else (_committed, _generated)
    first(history, reply)
    assert [t.text for t in history.turns] == ([] if generated_first else ["Open on Sundays?"])
    second(history, reply)
    assert [(t.speaker, t.text) for t in history.turns] == [
        ("user", "Open on Sundays?"),
        ("agent", "Yes, from ten."),
    ]


def test_a_reply_cut_before_its_end_is_in_the_history_as_heard_only() -> None:
    history = History()
    reply = Reply(0, "Open on Sundays?", transcript_at_ms=0.0, started_ms=0.0)
    reply.add_words("Yes, from ten")
    _committed(history, reply)
    reply.interrupt()
    history.cut_to_heard(reply, "Yes,")
    _generated(history, reply)  # its last words were on their way
    assert [t.text for t in history.turns] == ["Open on Sundays?", "Yes,"]
