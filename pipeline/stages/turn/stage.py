"""``TurnStage``: the turn engine's desk — frames in, the decisions about the live reply out.

Why it is small: it holds the one live ``Reply`` (LiveKit Agents' ``AgentActivity`` over one
``SpeechHandle`` per reply) and routes each frame to the room whose job it is — when to commit
(``TurnCommitter``), what a sound during the reply means (``InterruptionJudge``), the reply's
generation and tool rounds (``Generation``, ``ToolRounds``), its words to TTS (``Speaker``), the
history (``History``) and the hang-up (``CallEnder``). What is left here are the moves that
start and end a reply: answer, commit, pause, resume, barge in, drop, and the replies of fixed
words (the hold reply, the request to repeat).

Why the rooms only report: each room's state is written by that room alone, told by the event
that changes it (``TurnCommitter.speech_ended``, ``InterruptionJudge.utterance_began``, …),
and a room answers what it makes of it (``SpeechOverReply``, a ``Verdict``) rather than acting
through the stage. The stage decides and acts: a barge-in starts here (on the judge's
verdict, on the stage's own timer for a sound too long to be a backchannel, or at the
application's word), and the judge is then told the pause is over. The life of a turn is told
in the package's docstring.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from cadence.core.clock import Clock
from cadence.core.priority import URGENT_WORK, UrgentWork
from cadence.llm import Turn, TurnGenerator
from cadence.pipeline.config import FaultsConfig, ToolsConfig, TurnConfig
from cadence.pipeline.end_of_turn import EndOfTurnDetector
from cadence.pipeline.frames import (
    BackchannelFrame,
    BargeInFrame,
    DTMFFrame,
    EndCallFrame,
    EndpointFrame,
    FinalTranscriptFrame,
    Frame,
    PartialTranscriptFrame,
    SpeculativeTranscriptFrame,
    SpeechResumedFrame,
    SpeechStartFrame,
    StopReplyFrame,
    TranscriptFailedFrame,
    TurnWithdrawnFrame,
)
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.playout_gate import PlayoutGate
from cadence.pipeline.stage import Stage
from cadence.pipeline.stages.turn.commit import TurnCommitter
from cadence.pipeline.stages.turn.generation import Generation
from cadence.pipeline.stages.turn.hang_up import CallEnder
from cadence.pipeline.stages.turn.history import History
from cadence.pipeline.stages.turn.interruption import (
    InterruptionJudge,
    Overheard,
    SpeechOverReply,
)
from cadence.pipeline.stages.turn.reply import Reply, ReplyState
from cadence.pipeline.stages.turn.speaker import Speaker
from cadence.pipeline.stages.turn.tool_rounds import ToolRounds
from cadence.pipeline.tools import Keypad, Tool
from cadence.voice.tts import FIRST_PHRASE_MAX_WORDS
from cadence.voice.turn.cues import is_hold_request


class TurnStage(Stage):
    def __init__(
        self,
        generator: TurnGenerator,
        *,
        clock: Clock,
        ledger: PlaybackLedger,
        config: TurnConfig,
        end_of_turn: EndOfTurnDetector,
        gate: PlayoutGate,
        faults: FaultsConfig | None = None,
        tools: Sequence[Tool] = (),
        tools_config: ToolsConfig | None = None,
        first_phrase_max_words: int = FIRST_PHRASE_MAX_WORDS,
        yield_to_urgent: bool = False,
        urgent_work: UrgentWork = URGENT_WORK,
        session_id: str = "",
        name: str = "turn",
    ) -> None:
        """``tools``: what the generator is offered (the agent's and the built-ins the
        configuration enables). With ``yield_to_urgent`` (a session's stage; a bare stage may
        have no TTS after it), once a reply's first phrase (as TTS cuts it, with
        ``first_phrase_max_words``) is complete, the next block waits for its audio, and each
        block for ``urgent_work`` to be done, each time within ``urgent_work.max_wait_ms``."""
        super().__init__(name=name)
        self._generator = generator
        self._clock = clock
        self._ledger = ledger
        self._config = config
        self._gate = gate
        self._faults = faults or FaultsConfig()
        tools_config = tools_config or ToolsConfig()
        self.keypad = Keypad()
        """The keys the caller pressed, for the tools."""
        self._history = History()
        self._committer = TurnCommitter(self, end_of_turn, clock=clock, history=self._history)
        self._judge = InterruptionJudge(config=config.interruption, ledger=ledger)
        self._cut_later: asyncio.Task[None] | None = None
        """The barge-in of a sound over the paused reply too long to be a backchannel."""
        self._ender = CallEnder(self, clock=clock, ledger=ledger)
        self._speaker = Speaker(
            self,
            clock=clock,
            history=self._history,
            ender=self._ender,
            early_emission=config.early_emission,
        )
        self._tools = ToolRounds(
            self,
            tools,
            config=tools_config,
            clock=clock,
            history=self._history,
            speaker=self._speaker,
            keypad=self.keypad,
            session_id=session_id,
        )
        self._generation = Generation(
            generator,
            name=self.name,
            clock=clock,
            ledger=ledger,
            speaker=self._speaker,
            tools=self._tools,
            tools_config=tools_config,
            faults=self._faults,
            first_phrase_max_words=first_phrase_max_words,
            yield_to_urgent=yield_to_urgent,
            urgent_work=urgent_work,
        )
        self._reply: Reply | None = None
        """The live reply: being prepared, or heard (never one that ended)."""
        self._next_index = 0

    @property
    def history(self) -> list[Turn]:
        """Completed turns, the agent's cut to what the caller heard."""
        return self._history.turns

    async def process(self, frame: Frame) -> None:
        match frame:
            case SpeechStartFrame():
                await self.push(frame)
                self._judge.utterance_began()
                await self._on_speech(frame.at_ms, new_utterance=True)
                if self._reply is None:
                    self.spawn(self._generator.prefill(self.history), name="prefill")
                    self._committer.prepare()
            case SpeechResumedFrame():
                await self.push(frame)
                await self._on_speech(frame.at_ms, new_utterance=False)
            case EndpointFrame():
                self._committer.speech_ended(frame.speech_end_ms)
                await self.push(frame)
            case SpeculativeTranscriptFrame():
                await self.push(frame)
                if self._judge.judging and await self._judge_overheard(frame.text):
                    return
                text = self._committer.joined(frame.text)
                self._committer.listen(text, urgent=True)
                wanted = self._config.speculation and frame.text.strip()
                if wanted and not self._judge.ignoring and not is_hold_request(text):
                    await self._answer(text, frame.at_ms)
            case PartialTranscriptFrame():
                await self.push(frame)
                if not self._judge.judging and not self._judge.ignoring:
                    self._committer.listen(self._committer.joined(frame.text), urgent=False)
            case FinalTranscriptFrame():
                await self.push(frame)
                await self._on_final(frame)
            case StopReplyFrame():
                await self.push(frame)
                await self._stop_reply(frame.at_ms)
            case DTMFFrame():
                await self.push(frame)
                self.keypad.press(frame.digit)
            case EndCallFrame():
                await self.push(frame)
                await self._ender.end_call(self._reply, frame.reason)
            case TranscriptFailedFrame():
                await self.push(frame)
                if self._judge.judging:  # a short sound over the reply: go on
                    await self._judge_overheard("")
                elif not self._judge.ignoring:
                    await self._ask_to_repeat(frame.at_ms)
            case _:
                await self.push(frame)

    # --- what the caller's words and sounds start ------------------------------------------

    async def _on_final(self, frame: FinalTranscriptFrame) -> None:
        if self._judge.judging and await self._judge_overheard(frame.text):
            return
        if self._judge.final_came():  # the backchannel's own transcript
            return
        text = self._committer.joined(frame.text)
        if not text:
            return  # noise: no words, no turn
        if is_hold_request(text):
            await self._hold_on(text, frame.at_ms)
            return
        if self._reply is None or self._reply.user_text != text:
            await self._answer(text, frame.at_ms)
        assert self._reply is not None
        await self._committer.commit_when_due(self._reply, self._commit)

    async def _on_speech(self, at_ms: float, *, new_utterance: bool) -> None:
        """The caller is speaking: no commit at the end of the wait, and the live reply meets
        what the sound means. Speech that resumes within an utterance will be in that
        utterance's final transcript; a new utterance will not, so the words the reply
        answered are kept to be joined to it."""
        self._committer.cancel()
        reply = self._reply
        if reply is None or self._judge.judging:
            return
        match self._judge.meaning(reply):
            case SpeechOverReply.AFTER_IT:
                reply.heard_to_end()
                self._reply = None
            case SpeechOverReply.PAUSES_IT:
                self._pause(reply, at_ms)
            case SpeechOverReply.BARGES_IN:
                await self._barge_in(reply, at_ms)
            case SpeechOverReply.CONTINUES_TURN:
                heard_ms = self._ledger.played_ms(reply.index)
                await self._drop(reply, reason="caller went on")
                if new_utterance:
                    self._committer.keep_words(reply.user_text)
                if reply.committed:  # the user turn is open again
                    self._history.withdraw(reply)
                    await self.push(TurnWithdrawnFrame(reply_index=reply.index, heard_ms=heard_ms))

    def _pause(self, reply: Reply, at_ms: float) -> None:
        """Pause the reply being heard at once (playout hands no more of it over): its fate
        waits for what the caller said, or for the sound to go on too long to be a
        backchannel."""
        self._gate.close()
        overheard = self._judge.paused(reply, at_ms)
        self._cut_later = self.spawn(self._cut_when_long(overheard), name="overheard")

    async def _judge_overheard(self, text: str) -> bool:
        """The sound over the paused reply was ``text``: True if the judge heard a backchannel
        (or no words) and the reply resumed where it stopped; False if words, which cut it and
        are a turn of their own."""
        verdict = self._judge.resolve(text)
        reply, at_ms = verdict.overheard.reply, verdict.overheard.at_ms
        if not verdict.backchannel:
            await self._barge_in(reply, at_ms)
            return False
        self._end_pause()
        self._gate.open()
        await self.push(BackchannelFrame(reply_index=reply.index, at_ms=at_ms, text=text))
        return True

    async def _cut_when_long(self, overheard: Overheard) -> None:
        await self._clock.sleep_until(overheard.cut_due_ms)
        self._cut_later = None  # this task is the one running: nothing to cancel
        await self._barge_in(overheard.reply, overheard.at_ms)

    def _end_pause(self) -> None:
        """No reply is paused over the caller's sound any more (resumed, or cut)."""
        self._judge.pause_ended()
        if self._cut_later is not None:
            self._cut_later.cancel()
            self._cut_later = None

    async def _hold_on(self, text: str, at_ms: float) -> None:
        """The caller asked the agent to wait: ``hold_reply`` instead of an answer, or silence
        with their words kept for the turn that follows."""
        self._committer.cancel()
        if self._reply is not None:
            await self._drop(self._reply, reason="caller asked to wait")
        if not self._config.hold_reply:
            self._committer.keep_words(text)
            return
        reply = self._fixed_reply(text, at_ms, self._config.hold_reply, name="hold-reply")
        # "Hold on," may be the start of "hold on, let me find my card": the acknowledgement
        # waits as any reply does, and is dropped if the caller goes on.
        await self._committer.commit_when_due(reply, self._commit)

    async def _ask_to_repeat(self, at_ms: float) -> None:
        """The caller's words were lost: ask for them again, as a committed turn of its own."""
        self._committer.cancel()
        if self._reply is not None:
            await self._drop(self._reply, reason="transcription failed")
        words = self._faults.transcript_fallback
        self._fixed_reply("", at_ms, words, name="ask-to-repeat", in_history=False)
        await self._commit()

    async def _stop_reply(self, at_ms: float) -> None:
        """The application stops the agent: a reply being heard is cut as by a barge-in. One
        not committed yet is not being heard, so there is nothing to stop."""
        reply = self._reply
        if reply is None or not reply.committed:
            return
        if reply.state is ReplyState.SPOKEN and self._ledger.finished(reply.index):
            reply.heard_to_end()
            self._reply = None
            return
        await self._barge_in(reply, at_ms)

    # --- the moves that start and end a reply -----------------------------------------------

    def _new_reply(self, user_text: str, at_ms: float, *, in_history: bool = True) -> Reply:
        reply = Reply(self._next_index, user_text, at_ms, self._clock.now_ms(), in_history)
        self._next_index += 1
        self._reply = reply
        return reply

    def _fixed_reply(
        self, user_text: str, at_ms: float, words: str, *, name: str, in_history: bool = True
    ) -> Reply:
        """A reply of fixed ``words`` (not the generator's) to ``user_text``."""
        reply = self._new_reply(user_text, at_ms, in_history=in_history)
        reply.generation = self.spawn(self._speaker.say_fixed(reply, words), name=name)
        return reply

    async def _answer(self, user_text: str, transcript_at_ms: float) -> None:
        """Start generating the reply to ``user_text`` (dropping a reply to other words)."""
        if self._reply is not None:
            await self._drop(self._reply, reason="transcript changed")
        reply = self._new_reply(user_text, transcript_at_ms)
        prompt = self._history.prompt(user_text)
        reply.generation = self.spawn(
            self._generation.generate(reply, prompt), name=f"reply-{reply.index}"
        )

    async def _commit(self) -> None:
        """The caller's turn is over: the live reply may be heard, and the history has it."""
        reply = self._reply
        if reply is None or reply.committed:
            return
        reply.commit(self._clock.now_ms())
        if reply.in_history:
            self._committer.turn_closed()
            self._history.open_turn(reply)
        self._history.add_reply_once_ready(reply)  # if generated ahead of the commit
        speech_end_ms = self._committer.speech_end_ms
        await self.push(reply.committed_frame(self._clock.now_ms(), speech_end_ms))

    async def _barge_in(self, reply: Reply, at_ms: float) -> None:
        """Cut the reply being heard: the history keeps the words heard, its calls and their
        results; the work and the audio still to come are thrown away."""
        self._end_pause()
        self._reply = None
        reply.interrupt()
        # What the history says of the reply is settled before anything is awaited: the cut of
        # a long overheard sound barges in from a task of its own, beside the worker.
        heard = self._ledger.heard_text(reply.index)
        abandoned = self._tools.abandon(reply, "the caller interrupted")
        self._ender.cancel_goodbye(reply)
        self._history.cut_to_heard(reply, heard)
        await self._stop(reply, reason="barge-in")
        self._gate.open()  # for the next reply: what was paused is flushed
        self._ledger.forget(reply.index)
        await self._tools.trace_abandoned(reply, abandoned)
        await self.push(BargeInFrame(reply_index=reply.index, at_ms=at_ms, spoken_text=heard))
        await self._ender.hang_up_after_cut(reply)

    async def _drop(self, reply: Reply, *, reason: str) -> None:
        """Throw the live reply away unheard; it is traced as discarded work."""
        self._reply = None
        reply.drop()
        abandoned = self._tools.abandon(reply, "the reply was dropped")
        await self._stop(reply, reason=reason)
        self._ledger.forget(reply.index)
        await self._tools.trace_abandoned(reply, abandoned)
        await self.push(reply.discarded_frame(self._clock.now_ms(), reason))
        await self._ender.hang_up_after_cut(reply)

    async def _stop(self, reply: Reply, *, reason: str) -> None:
        """Cancel the reply's work, and everything after this stage (TTS, playout)."""
        await reply.cancel_work()
        await self.interrupt(reason)

    async def on_end(self) -> None:
        """The caller's audio ended: a reply not committed by now never will be, and nothing
        of it is waited for (an acting tool would wait for a commit that never comes)."""
        if self._reply is not None and not self._reply.committed:
            await self._reply.cancel_work()
        await super().on_end()

    async def on_close(self) -> None:
        await self._generator.aclose()
