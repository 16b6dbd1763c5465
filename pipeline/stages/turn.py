"""``TurnStage``: the turn engine. Decides when the caller's turn is over, has the generator
answer it, and keeps the conversation's history true to what was said and heard.

The life of a turn here:

1. While the caller speaks, the history is prefilled into the generator's cache.
2. A ``SpeculativeTranscriptFrame`` (decoded at pause onset) starts the reply at once —
   preemptive generation. Its pieces stream to TTS; playout holds the audio back.
3. The final transcript confirms the speculation (or restarts the reply on the new text), and
   the end-of-turn detector turns it into P(the utterance is complete) and that into a wait:
   the turn is committed once the silence since the end of speech has lasted that long — at
   once for "seven of clubs", up to ``max_wait_ms`` for "he was not an ill disposed".
4. ``TurnCommittedFrame`` releases the held audio.
5. Speech before the commit, or before any of the reply was heard, *continues* the same user
   turn: the reply is dropped unheard (traced as discarded) and the transcripts are joined.
   Speech while the reply is heard pauses it (``PlayoutGate``) until its transcript says what
   it was: a backchannel, a cough or line noise resumes the reply where it stopped; real
   words are a **barge-in**: generation and synthesis stop, queued audio is flushed, and the
   agent's turn in the history is cut to the words heard.

A caller who asks the agent to wait ("hold on", "one moment, let me find my card") gets
``hold_reply`` instead of an answer, or nothing at all.

A reply may call tools (docs/tools.md): the generator ends a round with the calls, they run
(a read-only one at once, even for a reply generated ahead of the commit; one that acts only
once the turn is committed), and the generator is asked again with their results, for up to
``tools.max_rounds`` rounds. Words before a call are spoken at once; if the caller has heard
nothing ``tools.filler_after_ms`` after the commit, ``tools.filler`` is. A barge-in cancels
the calls in flight that can be cancelled and leaves the others to finish; the history keeps
every call, its result (or that it was cancelled) and the words heard. A reply that called
``end_call`` hangs up once it has been heard to its end.

When a stage fails the caller still hears something (``faults``): a generator that raises,
reports an error, or gives no text for ``llm_timeout_ms`` ends its reply there — with
``reply_fallback`` if none of it was spoken — and an utterance that could not be transcribed
is answered with ``transcript_fallback``. The reason goes into the turn's trace.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
from collections.abc import Coroutine, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from cadence.core.clock import Clock
from cadence.core.priority import URGENT_WORK, UrgentWork
from cadence.llm import Turn, TurnGenerator
from cadence.llm.dialogue import ToolCall
from cadence.llm.tools import ToolChoice
from cadence.pipeline.config import FaultsConfig, ToolsConfig, TurnConfig
from cadence.pipeline.end_of_turn import EndOfTurnDetector
from cadence.pipeline.frames import (
    BackchannelFrame,
    BargeInFrame,
    DTMFFrame,
    EndCallFrame,
    EndOfReplyFrame,
    EndpointFrame,
    FinalTranscriptFrame,
    Frame,
    HangUpFrame,
    PartialTranscriptFrame,
    SpeculationDiscardedFrame,
    SpeculativeTranscriptFrame,
    SpeechResumedFrame,
    SpeechStartFrame,
    StopReplyFrame,
    TextPieceFrame,
    ToolCallFrame,
    ToolOutcome,
    TranscriptFailedFrame,
    TurnCommittedFrame,
    TurnWithdrawnFrame,
)
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.playout_gate import PlayoutGate
from cadence.pipeline.stage import Stage
from cadence.pipeline.stages._time_limits import arriving_within
from cadence.pipeline.stages.playout import DEFAULT_LEAD_MS
from cadence.pipeline.tools import Keypad, Tool, ToolContext, ToolResult, ToolRunner
from cadence.voice.tts import FIRST_PHRASE_MAX_WORDS, PhraseSplitter
from cadence.voice.turn.cues import is_backchannel, is_hold_request

logger = logging.getLogger(__name__)


@dataclass
class _Round:
    """One answer of the generator within a reply: its words, then the tools it called (if
    any) and their results, by call id."""

    text: str = ""
    calls: tuple[ToolCall, ...] = ()
    results: dict[str, str] = field(default_factory=dict)


@dataclass
class _InFlight:
    """A tool call still running."""

    call: ToolCall
    round: int
    started_ms: float


@dataclass
class _ReplyAttempt:
    """One attempt at answering ``user_text``; ``reply_index`` is unique per attempt."""

    reply_index: int
    user_text: str
    transcript_at_ms: float
    started_ms: float
    task: asyncio.Task[None] | None = None
    text: str = ""
    """All the words of the reply, as spoken (every round's, and a filler)."""
    sent: int = 0
    """How much of ``text`` went to TTS."""
    rounds: list[_Round] = field(default_factory=list)
    error: str | None = None
    done: bool = False
    committed: bool = False
    committed_event: asyncio.Event = field(default_factory=asyncio.Event)
    committed_at_ms: float = 0.0
    history_at: int | None = None
    """Where the reply's user turn stands in the history, once committed."""
    in_history: bool = True
    """False for the request to repeat what could not be transcribed: nothing was said that
    the model should see."""
    end_of_turn_p: float | None = None
    wait_ms: float = 0.0
    scored_ms: float = 0.0
    in_flight: dict[str, _InFlight] = field(default_factory=dict)
    acted: bool = False
    """A tool that acts ran for it: the reply is part of the conversation now, heard or not."""
    filler: asyncio.Task[None] | None = None
    ends_call: str | None = None
    """Why the call ends once this reply has been heard (``end_call``, or the application)."""
    goodbye: bool = False
    """A tool ended the call: the reply's words so far are its goodbye, and no round
    follows."""
    hang_up: asyncio.Task[None] | None = None


@dataclass
class _Overheard:
    """Caller sound over a reply being heard, the reply paused until it is judged."""

    reply: _ReplyAttempt
    at_ms: float
    cut_later: asyncio.Task[None] | None = None


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
        self._end_of_turn = end_of_turn
        self._gate = gate
        self._faults = faults or FaultsConfig()
        self._tools_config = tools_config or ToolsConfig()
        self._session_id = session_id
        self._yield_to_urgent = yield_to_urgent
        self._first_phrase_max_words = first_phrase_max_words
        self._urgent_work = urgent_work
        self._runner = ToolRunner(
            tools,
            timeout_ms=self._tools_config.timeout_ms,
            clock=clock,
            spawn=lambda work, name: self.spawn(work, name=name),
        )
        self.keypad = Keypad()
        """The keys the caller pressed, for the tools."""
        self.history: list[Turn] = []
        """Completed turns, the agent's cut to what the caller heard."""
        self._pending_user_text = ""
        """Words of the user turn still open (it may span several utterances)."""
        self._reply: _ReplyAttempt | None = None
        self._speech_end_ms = 0.0
        self._next_index = 0
        self._hold: asyncio.Task[None] | None = None
        """The commit, waiting out the end-of-turn wait."""
        self._overheard: _Overheard | None = None
        self._ignore_utterance = False
        """The utterance in progress was judged a backchannel: its transcript is no turn."""
        self._hung_up = False

    async def process(self, frame: Frame) -> None:
        match frame:
            case SpeechStartFrame():
                await self.push(frame)
                self._ignore_utterance = False
                await self._on_speech(frame.at_ms, new_utterance=True)
                if self._reply is None:
                    self.spawn(self._generator.prefill(self.history), name="prefill")
                    agent_text = self._agent_text()
                    self.spawn(self._end_of_turn.prepare(agent_text), name="end-of-turn-prefill")
            case SpeechResumedFrame():
                await self.push(frame)
                await self._on_speech(frame.at_ms, new_utterance=False)
            case EndpointFrame():
                self._speech_end_ms = frame.speech_end_ms
                await self.push(frame)
            case SpeculativeTranscriptFrame():
                await self.push(frame)
                if self._overheard is not None and await self._judge_overheard(frame.text):
                    return
                text = self._joined(frame.text)
                self._listen(text, urgent=True)
                wanted = self._config.speculation and frame.text.strip()
                if wanted and not self._ignore_utterance and not is_hold_request(text):
                    await self._answer(text, frame.at_ms)
            case PartialTranscriptFrame():
                await self.push(frame)
                if self._overheard is None and not self._ignore_utterance:
                    self._listen(self._joined(frame.text), urgent=False)
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
                await self._end_call(frame.reason)
            case TranscriptFailedFrame():
                await self.push(frame)
                if self._overheard is not None:  # a short sound over the reply: go on
                    await self._judge_overheard("")
                elif not self._ignore_utterance:
                    await self._ask_to_repeat(frame.at_ms)
            case _:
                await self.push(frame)

    # --- decisions --------------------------------------------------------------------------

    async def _on_final(self, frame: FinalTranscriptFrame) -> None:
        if self._overheard is not None and await self._judge_overheard(frame.text):
            return
        if self._ignore_utterance:
            self._ignore_utterance = False
            return
        text = self._joined(frame.text)
        if not text:
            return  # noise: no words, no turn
        if is_hold_request(text):
            await self._hold_on(text, frame.at_ms)
            return
        if self._reply is None or self._reply.user_text != text:
            await self._answer(text, frame.at_ms)
        assert self._reply is not None
        await self._commit_when_due(self._reply)

    async def _commit_when_due(self, reply: _ReplyAttempt) -> None:
        """Commit ``reply`` once the end-of-turn wait its words call for has passed since the
        end of speech — at once if it has — unless the caller speaks first (``_on_speech``)."""
        text = reply.user_text
        agent_text = self._agent_text()
        asked_ms = self._clock.now_ms()
        reply.end_of_turn_p = await self._end_of_turn.probability(text, agent_text=agent_text)
        reply.scored_ms = self._clock.now_ms() - asked_ms
        reply.wait_ms = self._end_of_turn.wait_ms(reply.end_of_turn_p)
        due_ms = self._speech_end_ms + reply.wait_ms
        if due_ms > self._clock.now_ms():
            self._hold = self.spawn(self._commit_at(due_ms), name="end-of-turn-wait")
        else:
            await self._commit()

    async def _on_speech(self, at_ms: float, *, new_utterance: bool) -> None:
        """The caller is speaking: continue their turn, or — over the reply — pause it to judge
        the sound. Speech that resumes within an utterance will be in that utterance's final
        transcript; a new utterance will not, so the words the reply answered are kept to be
        joined to it."""
        self._cancel_hold()
        reply = self._reply
        if reply is None or self._overheard is not None:
            return
        if reply.committed and self._ledger.finished(reply.reply_index):
            self._reply = None  # the reply was heard to its end; this is a new turn
            return
        if reply.committed and (self._ledger.played_ms(reply.reply_index) > 0 or reply.acted):
            if self._config.interruption.backchannels:
                self._overhear(reply, at_ms)
            else:
                await self._barge_in(reply, at_ms)
            return
        # Nothing of the reply was heard (and it did nothing): the caller was not done. Drop it,
        # keep their words.
        await self._drop(reply, reason="caller went on")
        if new_utterance:
            self._pending_user_text = reply.user_text
        if reply.committed:  # the user turn is open again
            if reply.history_at is not None:
                del self.history[reply.history_at :]
            await self.push(TurnWithdrawnFrame(reply_index=reply.reply_index))

    def _overhear(self, reply: _ReplyAttempt, at_ms: float) -> None:
        """Pause the reply at once; its fate waits for what the caller said (or for speech too
        long to be a backchannel)."""
        self._gate.close()
        overheard = _Overheard(reply, at_ms)
        overheard.cut_later = self.spawn(self._cut_when_long(overheard), name="overheard")
        self._overheard = overheard

    async def _cut_when_long(self, overheard: _Overheard) -> None:
        limit_ms = self._config.interruption.max_backchannel_ms
        await self._clock.sleep_until(overheard.at_ms + limit_ms)
        overheard.cut_later = None  # this task is the one running: nothing to cancel
        await self._barge_in(overheard.reply, overheard.at_ms)

    async def _judge_overheard(self, text: str) -> bool:
        """The caller's sound over the reply was ``text``: resume the reply if it was a
        backchannel or no words (True), cut it if it was words (False)."""
        overheard = self._overheard
        assert overheard is not None
        if not is_backchannel(text):
            self._ignore_utterance = False  # words after a backchannel: a turn after all
            await self._barge_in(overheard.reply, overheard.at_ms)
            return False
        self._end_overheard()
        self._ignore_utterance = True
        self._gate.open()
        reply = overheard.reply
        await self.push(
            BackchannelFrame(reply_index=reply.reply_index, at_ms=overheard.at_ms, text=text)
        )
        return True

    def _end_overheard(self) -> None:
        overheard, self._overheard = self._overheard, None
        if overheard is not None and overheard.cut_later is not None:
            overheard.cut_later.cancel()

    async def _hold_on(self, text: str, at_ms: float) -> None:
        """The caller asked the agent to wait: ``hold_reply`` instead of an answer, or silence
        with their words kept for the turn that follows."""
        self._cancel_hold()
        if self._reply is not None:
            await self._drop(self._reply, reason="caller asked to wait")
        if not self._config.hold_reply:
            self._pending_user_text = text
            return
        reply = _ReplyAttempt(self._next_index, text, at_ms, self._clock.now_ms())
        self._next_index += 1
        self._reply = reply
        reply.task = self.spawn(self._speak(reply, self._config.hold_reply), name="hold-reply")
        # "Hold on," may be the start of "hold on, let me find my card": the acknowledgement
        # waits as any reply does, and is dropped if the caller goes on.
        await self._commit_when_due(reply)

    async def _ask_to_repeat(self, at_ms: float) -> None:
        """The caller's words were lost: ask for them again, as a committed turn of its own."""
        self._cancel_hold()
        if self._reply is not None:
            await self._drop(self._reply, reason="transcription failed")
        reply = _ReplyAttempt(self._next_index, "", at_ms, self._clock.now_ms(), in_history=False)
        self._next_index += 1
        self._reply = reply
        reply.task = self.spawn(
            self._speak(reply, self._faults.transcript_fallback), name="ask-to-repeat"
        )
        await self._commit()

    async def _stop_reply(self, at_ms: float) -> None:
        """The application stops the agent: a reply being heard is cut as by a barge-in. One
        not committed yet is not being heard, so there is nothing to stop."""
        reply = self._reply
        if reply is None or not reply.committed:
            return
        if self._ledger.finished(reply.reply_index):
            self._reply = None
            return
        await self._barge_in(reply, at_ms)

    async def _barge_in(self, reply: _ReplyAttempt, at_ms: float) -> None:
        self._end_overheard()
        self._reply = None
        # What the history says of the reply is settled before anything is awaited: the cut of
        # a long overheard sound barges in from a task of its own, beside the worker.
        heard = self._ledger.heard_text(reply.reply_index)
        abandoned = self._abandon_calls(reply, "the caller interrupted")
        if reply.goodbye:  # the caller spoke over the model's goodbye: the call goes on
            reply.ends_call, reply.goodbye = None, False
            self._answer_calls(reply, "end_call", {"status": "not ended: the caller spoke"})
        if reply.history_at is not None:
            del self.history[reply.history_at + 1 :]
            self.history.extend(self._reply_turns(reply, heard))
        await self._stop(reply, reason="barge-in")
        self._gate.open()  # for the next reply: what was paused is flushed
        self._ledger.forget(reply.reply_index)
        await self._trace_abandoned(reply, abandoned)
        await self.push(BargeInFrame(reply_index=reply.reply_index, at_ms=at_ms, spoken_text=heard))
        if reply.ends_call is not None:  # the application's end of the call stands
            await self._hang_up(reply.ends_call)

    async def _answer(self, user_text: str, transcript_at_ms: float) -> None:
        """Start generating the reply to ``user_text`` (dropping a reply to other words)."""
        if self._reply is not None:
            await self._drop(self._reply, reason="transcript changed")
        reply = _ReplyAttempt(self._next_index, user_text, transcript_at_ms, self._clock.now_ms())
        self._next_index += 1
        self._reply = reply
        prompt = [*self.history, Turn("user", user_text)]
        reply.task = self.spawn(self._generate(reply, prompt), name=f"reply-{reply.reply_index}")

    async def _commit(self) -> None:
        reply = self._reply
        if reply is None or reply.committed:
            return
        reply.committed = True
        reply.committed_at_ms = self._clock.now_ms()
        reply.committed_event.set()
        if reply.in_history:
            self._pending_user_text = ""
            reply.history_at = len(self.history)
            self.history.append(Turn("user", reply.user_text))
            if reply.done:
                self.history.extend(self._reply_turns(reply))
        await self.push(
            TurnCommittedFrame(
                reply_index=reply.reply_index,
                at_ms=self._clock.now_ms(),
                user_text=reply.user_text,
                speech_end_ms=self._speech_end_ms,
                transcript_at_ms=reply.transcript_at_ms,
                end_of_turn_p=reply.end_of_turn_p,
                wait_ms=reply.wait_ms,
                scored_ms=reply.scored_ms,
            )
        )

    async def _commit_at(self, due_ms: float) -> None:
        await self._clock.sleep_until(due_ms)
        self._hold = None
        await self._commit()

    # --- work -------------------------------------------------------------------------------

    async def _generate(self, reply: _ReplyAttempt, prompt: list[Turn]) -> None:
        """Round after round: the generator's answer, then the tools it called, until it
        answers in words alone (or ends the call, or reaches ``tools.max_rounds``)."""
        limit_ms = self._faults.llm_timeout_ms
        conversation = list(prompt)
        try:
            while True:
                reply.rounds.append(round_ := _Round())
                number = len(reply.rounds)
                last = number > self._tools_config.max_rounds
                calls = await self._answer_round(reply, conversation, limit_ms, last=last)
                if not calls or reply.error is not None:
                    break
                if last:
                    logger.warning(
                        "%s: reply %d called tools past tools.max_rounds (%d); not run",
                        self.name,
                        reply.reply_index,
                        self._tools_config.max_rounds,
                    )
                    break
                round_.calls = calls = _unique_ids(calls, reply)
                await self._pause_speech(reply)
                self._start_filler(reply)
                conversation.append(Turn("agent", round_.text, tool_calls=_as_sent(calls)))
                results = await self._run_calls(reply, number, round_, tuple(conversation))
                conversation += [Turn("tool", r.content, tool_call_id=r.call.id) for r in results]
                if reply.goodbye:
                    break  # the goodbye is what was said with the call (or tools.goodbye)
        except Exception as exc:  # the generator failed, or went quiet past its limit
            reply.error = (
                f"no reply text for {limit_ms:g} ms"
                if isinstance(exc, TimeoutError)
                else f"the generator failed: {exc!r}"
            )
            logger.warning("%s: reply %d: %s", self.name, reply.reply_index, reply.error)
        last_words = ""
        if not reply.text.strip():
            if reply.error is not None:
                last_words = self._faults.reply_fallback
            elif reply.goodbye:
                last_words = self._tools_config.goodbye
        await self._finish(reply, last_words)

    async def _answer_round(
        self, reply: _ReplyAttempt, conversation: list[Turn], limit_ms: float, *, last: bool
    ) -> tuple[ToolCall, ...]:
        """Stream one answer of the generator into the reply; the tools it calls."""
        calls: tuple[ToolCall, ...] = ()
        choice: ToolChoice = "none" if last else "auto"
        # Until its first phrase is complete, a reply nothing of which was said is what the
        # caller waits for (urgent). After it, the rest waits for that phrase's audio, then
        # before each block for the urgent work of every call (docs/cpu-budget.md).
        first_phrase = PhraseSplitter(self._first_phrase_max_words)
        urgent = not reply.text.strip()
        if urgent:
            self._urgent_work.started()
        try:
            # Closed here, not left to the garbage collector, when a barge-in cancels this
            # task while it waits on TTS: a remote backend's stream must not outlive the reply.
            async with aclosing(
                self._generator.stream(conversation, self._runner.specs, choice)
            ) as pieces:
                async for piece in arriving_within(pieces, limit_ms):
                    if piece.error:
                        reply.error = piece.error
                        logger.warning(
                            "%s: reply %d: %s", self.name, reply.reply_index, piece.error
                        )
                    if piece.text:
                        await self._emit(reply, piece.text, piece.at_ms)
                    calls = piece.tool_calls or calls
                    if urgent and first_phrase.feed(piece.text):
                        urgent = False
                        self._urgent_work.finished()
                        await self._in_time(self._ledger.wait_voiced(reply.reply_index))
                    if not urgent and self._yield_to_urgent:
                        await self._urgent_work.quiet(self._clock)
        finally:
            if urgent:
                self._urgent_work.finished()
        return calls

    async def _in_time(self, wait: Coroutine[Any, Any, None]) -> None:
        """``wait``, for the urgent work's bound at most (none without ``yield_to_urgent``)."""
        if not self._yield_to_urgent:
            wait.close()
            return
        waiting = asyncio.ensure_future(wait)
        timer = asyncio.ensure_future(
            self._clock.sleep_until(self._clock.now_ms() + self._urgent_work.max_wait_ms)
        )
        try:
            await asyncio.wait({waiting, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            timer.cancel()

    async def _run_calls(
        self, reply: _ReplyAttempt, number: int, round_: _Round, conversation: tuple[Turn, ...]
    ) -> list[ToolResult]:
        """Run the round's calls side by side; their results, in the order called."""
        context = ToolContext(
            self._session_id,
            reply.reply_index,
            self.keypad,
            conversation,
            lambda why: _end_after(reply, why),
        )
        return await asyncio.gather(
            *(self._run_call(reply, number, round_, call, context) for call in round_.calls)
        )

    async def _run_call(
        self,
        reply: _ReplyAttempt,
        number: int,
        round_: _Round,
        call: ToolCall,
        context: ToolContext,
    ) -> ToolResult:
        tool = self._runner.get(call.name)
        if tool is not None and not tool.read_only:
            await reply.committed_event.wait()  # it acts: not for a reply that may be dropped
            reply.acted = True
        reply.in_flight[call.id] = _InFlight(call, number, self._clock.now_ms())
        late = functools.partial(self._late_result, reply, number)
        result = await self._runner.run(call, context, on_late_result=late)
        del reply.in_flight[call.id]
        round_.results[call.id] = result.content
        await self._traced(reply, number, call, result.started_ms, result.outcome, result.content)
        return result

    async def _traced(
        self,
        reply: _ReplyAttempt,
        number: int,
        call: ToolCall,
        started_ms: float,
        outcome: ToolOutcome,
        content: str,
    ) -> None:
        await self.push(
            ToolCallFrame(
                reply_index=reply.reply_index,
                tool=call.name,
                round=number,
                started_ms=started_ms,
                ended_ms=self._clock.now_ms(),
                outcome=outcome,
                argument_bytes=len(call.arguments.encode()),
                result_bytes=len(content.encode()),
            )
        )

    def _abandon_calls(self, reply: _ReplyAttempt, why: str) -> list[tuple[_InFlight, ToolOutcome]]:
        """The reply is cut or dropped with calls in flight: those that can be cancelled will
        be (with the reply's task); the others run on, and their results replace what the
        history says of them when they come (``_late_result``). Their outcomes, to trace."""
        abandoned: list[tuple[_InFlight, ToolOutcome]] = []
        for flight in reply.in_flight.values():
            tool = self._runner.get(flight.call.name)
            left = tool is not None and not tool.cancellable
            what = "it is still running" if left else "it was cancelled"
            content = json.dumps({"error": f"{why}; {what}"})
            reply.rounds[flight.round - 1].results[flight.call.id] = content
            abandoned.append((flight, "left_running" if left else "cancelled"))
        reply.in_flight.clear()
        return abandoned

    async def _trace_abandoned(
        self, reply: _ReplyAttempt, abandoned: list[tuple[_InFlight, ToolOutcome]]
    ) -> None:
        for flight, outcome in abandoned:
            await self._traced(reply, flight.round, flight.call, flight.started_ms, outcome, "")

    def _late_result(self, reply: _ReplyAttempt, number: int, result: ToolResult) -> None:
        """A call left running at a barge-in finished: the history gets its real result."""
        reply.rounds[number - 1].results[result.call.id] = result.content
        start = len(self.history) if reply.history_at is None else reply.history_at
        for index in range(start, len(self.history)):
            if self.history[index].tool_call_id == result.call.id:
                self.history[index] = Turn("tool", result.content, tool_call_id=result.call.id)
                break
        logger.info(
            "%s: tool %s finished after the caller interrupted (%s)",
            self.name,
            result.call.name,
            result.outcome,
        )

    @staticmethod
    def _answer_calls(reply: _ReplyAttempt, name: str, result: dict[str, str]) -> None:
        """Make ``result`` what the history says the reply's calls of ``name`` returned."""
        for round_ in reply.rounds:
            for call in round_.calls:
                if call.name == name:
                    round_.results[call.id] = json.dumps(result)

    def _start_filler(self, reply: _ReplyAttempt) -> None:
        if reply.filler is None and self._tools_config.filler and not reply.text.strip():
            reply.filler = self.spawn(self._filler(reply), name=f"filler-{reply.reply_index}")

    async def _filler(self, reply: _ReplyAttempt) -> None:
        """``tools.filler``, if the caller has heard nothing of the reply
        ``filler_after_ms`` after the commit (nothing of it was said yet, so nothing of it
        can have been heard)."""
        await reply.committed_event.wait()
        await self._clock.sleep_until(reply.committed_at_ms + self._tools_config.filler_after_ms)
        if not reply.text.strip() and not reply.done:
            await self._emit(reply, self._tools_config.filler, self._clock.now_ms(), flush=True)

    async def _end_call(self, reason: str) -> None:
        """The application ends the call: once the reply being heard has been heard, or now."""
        reply = self._reply
        if reply is not None and reply.committed and not self._ledger.finished(reply.reply_index):
            reply.ends_call = reason
            if reply.done and reply.hang_up is None:
                reply.hang_up = self.spawn(self._hang_up_when_heard(reply), name="hang-up")
            return
        await self._hang_up(reason)

    async def _hang_up_when_heard(self, reply: _ReplyAttempt) -> None:
        await reply.committed_event.wait()
        await self._ledger.wait_finished(reply.reply_index)
        # Finished is "handed over" where the far end confirms nothing: up to the playout's
        # lead more is still to be heard.
        await self._clock.sleep_until(self._clock.now_ms() + DEFAULT_LEAD_MS)
        await self._hang_up(reply.ends_call or "the agent ended the call")

    async def _hang_up(self, reason: str) -> None:
        """Once: the application and the model may both end the call."""
        if self._hung_up:
            return
        self._hung_up = True
        try:
            await self.push(HangUpFrame(reason=reason, at_ms=self._clock.now_ms()))
        except BaseException:
            self._hung_up = False  # cancelled before it went: whoever asks next hangs up
            raise

    async def _speak(self, reply: _ReplyAttempt, text: str) -> None:
        """A reply of fixed words."""
        await self._finish(reply, text)

    async def _emit(
        self, reply: _ReplyAttempt, text: str, at_ms: float, *, flush: bool = False
    ) -> None:
        """Add ``text`` to the reply: it goes to TTS at once with early emission, or where the
        reply pauses (``flush``), else with the rest at the end."""
        self._say(reply, text)
        if self._config.early_emission or flush:
            await self._send(reply, at_ms, flush=flush)

    async def _send(
        self, reply: _ReplyAttempt, at_ms: float, *, flush: bool = False, error: str | None = None
    ) -> None:
        """What of the reply TTS has not had yet."""
        text, reply.sent = reply.text[reply.sent :], len(reply.text)
        await self.push(
            TextPieceFrame(
                text=text, at_ms=at_ms, reply_index=reply.reply_index, flush=flush, error=error
            )
        )

    async def _pause_speech(self, reply: _ReplyAttempt) -> None:
        """The reply waits on its tools: the words said before the calls are spoken now,
        whether or not they end a phrase (and whether or not early emission is on)."""
        if reply.text.strip():
            await self._send(reply, self._clock.now_ms(), flush=True)

    @staticmethod
    def _say(reply: _ReplyAttempt, text: str) -> None:
        """Add ``text`` to the reply's current round and to its words as spoken (a round's
        first words are set apart from the last round's)."""
        if not reply.rounds:
            reply.rounds.append(_Round())
        round_ = reply.rounds[-1]
        apart = reply.text and not round_.text and not reply.text[-1].isspace()
        spoken = " " + text if apart and not text[0].isspace() else text
        round_.text += text
        reply.text += spoken

    @staticmethod
    def _reply_turns(reply: _ReplyAttempt, heard: str | None = None) -> list[Turn]:
        """The reply as the history keeps it: each round's words (cut to the ``heard`` ones
        after a barge-in), the tools it called and their results."""
        turns: list[Turn] = []
        words = heard.split() if heard is not None else None
        for round_ in reply.rounds:
            text = round_.text.strip()
            if words is not None:
                count = len(text.split())
                text, words = " ".join(words[:count]), words[count:]
            if text or round_.calls:
                turns.append(Turn("agent", text, tool_calls=_as_sent(round_.calls)))
            cancelled = json.dumps({"error": "the reply was cut before the call ran"})
            turns += [
                Turn("tool", round_.results.get(call.id, cancelled), tool_call_id=call.id)
                for call in round_.calls
            ]
        return turns or [Turn("agent", "")]

    async def _finish(self, reply: _ReplyAttempt, last_words: str) -> None:
        """End ``reply`` with ``last_words`` (none, a fallback, or all of a fixed reply); a
        failure's reason goes to the trace with the last piece."""
        if last_words:
            self._say(reply, last_words)
        # What TTS has not had: the last words with early emission, else the whole reply.
        if reply.text[reply.sent :] or (reply.error is not None and self._config.early_emission):
            await self._send(reply, self._clock.now_ms(), error=reply.error)
        reply.done = True
        if reply.filler is not None:
            reply.filler.cancel()
        if reply.ends_call is not None and reply.hang_up is None:
            reply.hang_up = self.spawn(self._hang_up_when_heard(reply), name="hang-up")
        if reply.committed and reply.in_history:
            self.history.extend(self._reply_turns(reply))
        await self.push(EndOfReplyFrame(reply_index=reply.reply_index))

    async def _drop(self, reply: _ReplyAttempt, *, reason: str) -> None:
        """Throw a reply away unheard; it is traced as discarded work."""
        self._reply = None
        abandoned = self._abandon_calls(reply, "the reply was dropped")
        await self._stop(reply, reason=reason)
        self._ledger.forget(reply.reply_index)
        await self._trace_abandoned(reply, abandoned)
        await self.push(
            SpeculationDiscardedFrame(
                kind="llm_generation",
                started_ms=reply.started_ms,
                ended_ms=self._clock.now_ms(),
                reason=reason,
            )
        )
        if reply.ends_call is not None and not reply.goodbye:  # the application's stands
            await self._hang_up(reply.ends_call)

    async def _stop(self, reply: _ReplyAttempt, *, reason: str) -> None:
        await self._cancel_work(reply)
        await self.interrupt(reason)

    @staticmethod
    async def _cancel_work(reply: _ReplyAttempt) -> None:
        tasks = [task for task in (reply.task, reply.filler, reply.hang_up) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def on_end(self) -> None:
        """The caller's audio ended: a reply not committed by now never will be, and nothing
        of it is waited for (an acting tool would wait for a commit that never comes)."""
        if self._reply is not None and not self._reply.committed:
            await self._cancel_work(self._reply)
        await super().on_end()

    async def on_close(self) -> None:
        await self._generator.aclose()

    def _cancel_hold(self) -> None:
        if self._hold is not None:
            self._hold.cancel()
            self._hold = None

    def _agent_text(self) -> str | None:
        """What the agent said last, if the history ends with it: context for the detector
        ("two" answers "How many people?")."""
        if self.history and self.history[-1].speaker == "agent":
            return self.history[-1].text
        return None

    def _listen(self, text: str, *, urgent: bool) -> None:
        """Score a transcript before the final one, so the final finds its score ready."""
        listening = self._end_of_turn.listen(text, agent_text=self._agent_text(), urgent=urgent)
        self.spawn(listening, name="end-of-turn-listen")

    def _joined(self, text: str) -> str:
        return " ".join(part for part in (self._pending_user_text, text.strip()) if part)


def _end_after(reply: _ReplyAttempt, reason: str) -> None:
    """A tool ends the call: once this reply, its goodbye, has been heard."""
    reply.ends_call = reason
    reply.goodbye = True


def _unique_ids(calls: tuple[ToolCall, ...], reply: _ReplyAttempt) -> tuple[ToolCall, ...]:
    """``calls`` with ids no other call of the reply has: each result names its call, and a
    service that repeats an id must not have one call's result taken for another's."""
    taken = {call.id for round_ in reply.rounds for call in round_.calls}
    unique = []
    for call in calls:
        call_id, n = call.id, 1
        while call_id in taken:
            call_id, n = f"{call.id}_{n}", n + 1
        taken.add(call_id)
        unique.append(dataclasses.replace(call, id=call_id))
    return tuple(unique)


def _as_sent(calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    """The calls as the history sends them back: arguments that are not JSON (cut off by the
    length cap, or malformed) become ``{}`` — the model was told they were invalid, and a
    service parses what it is sent back."""
    return tuple(
        call if _is_json(call.arguments) else dataclasses.replace(call, arguments="{}")
        for call in calls
    )


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
