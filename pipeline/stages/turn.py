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

When a stage fails the caller still hears something (``faults``): a generator that raises,
reports an error, or gives no text for ``llm_timeout_ms`` ends its reply there — with
``reply_fallback`` if none of it was spoken — and an utterance that could not be transcribed
is answered with ``transcript_fallback``. The reason goes into the turn's trace.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing
from dataclasses import dataclass

from cadence.core.clock import Clock
from cadence.llm import Turn, TurnGenerator
from cadence.pipeline.config import FaultsConfig, TurnConfig
from cadence.pipeline.end_of_turn import EndOfTurnDetector
from cadence.pipeline.frames import (
    BackchannelFrame,
    BargeInFrame,
    EndOfReplyFrame,
    EndpointFrame,
    FinalTranscriptFrame,
    Frame,
    SpeculationDiscardedFrame,
    SpeculativeTranscriptFrame,
    SpeechResumedFrame,
    SpeechStartFrame,
    StopReplyFrame,
    TextPieceFrame,
    TranscriptFailedFrame,
    TurnCommittedFrame,
    TurnWithdrawnFrame,
)
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.playout_gate import PlayoutGate
from cadence.pipeline.stage import Stage
from cadence.pipeline.stages._time_limits import arriving_within
from cadence.voice.turn.cues import is_backchannel, is_hold_request

logger = logging.getLogger(__name__)


@dataclass
class _ReplyAttempt:
    """One attempt at answering ``user_text``; ``reply_index`` is unique per attempt."""

    reply_index: int
    user_text: str
    transcript_at_ms: float
    started_ms: float
    task: asyncio.Task[None] | None = None
    text: str = ""
    error: str | None = None
    done: bool = False
    committed: bool = False
    in_history: bool = True
    """False for the request to repeat what could not be transcribed: nothing was said that
    the model should see."""
    end_of_turn_p: float | None = None
    wait_ms: float = 0.0


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
        name: str = "turn",
    ) -> None:
        super().__init__(name=name)
        self._generator = generator
        self._clock = clock
        self._ledger = ledger
        self._config = config
        self._end_of_turn = end_of_turn
        self._gate = gate
        self._faults = faults or FaultsConfig()
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

    async def process(self, frame: Frame) -> None:
        match frame:
            case SpeechStartFrame():
                await self.push(frame)
                self._ignore_utterance = False
                await self._on_speech(frame.at_ms, new_utterance=True)
                if self._reply is None:
                    self.spawn(self._generator.prefill(self.history), name="prefill")
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
                wanted = self._config.speculation and frame.text.strip()
                if wanted and not self._ignore_utterance and not is_hold_request(text):
                    await self._answer(text, frame.at_ms)
            case FinalTranscriptFrame():
                await self.push(frame)
                await self._on_final(frame)
            case StopReplyFrame():
                await self.push(frame)
                await self._stop_reply(frame.at_ms)
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
        reply = self._reply
        assert reply is not None
        reply.end_of_turn_p = self._end_of_turn.probability(text, agent_text=self._agent_text())
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
        if reply.committed and self._ledger.played_ms(reply.reply_index) > 0:
            if self._config.interruption.backchannels:
                self._overhear(reply, at_ms)
            else:
                await self._barge_in(reply, at_ms)
            return
        # Nothing of the reply was heard: the caller was not done. Drop it, keep their words.
        await self._drop(reply, reason="caller went on")
        if new_utterance:
            self._pending_user_text = reply.user_text
        if reply.committed:  # the user turn is open again
            if reply.in_history:
                del self.history[-2 if reply.done else -1 :]
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
        await self._commit()

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
        await self._stop(reply, reason="barge-in")
        self._gate.open()  # for the next reply: what was paused is flushed
        heard = self._ledger.heard_text(reply.reply_index)
        self._ledger.forget(reply.reply_index)
        if reply.in_history and reply.done:
            self.history[-1] = Turn("agent", heard)
        elif reply.in_history:
            self.history.append(Turn("agent", heard))
        await self.push(BargeInFrame(reply_index=reply.reply_index, at_ms=at_ms, spoken_text=heard))

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
        if reply.in_history:
            self._pending_user_text = ""
            self.history.append(Turn("user", reply.user_text))
            if reply.done:
                self.history.append(Turn("agent", reply.text))
        await self.push(
            TurnCommittedFrame(
                reply_index=reply.reply_index,
                at_ms=self._clock.now_ms(),
                user_text=reply.user_text,
                speech_end_ms=self._speech_end_ms,
                transcript_at_ms=reply.transcript_at_ms,
                end_of_turn_p=reply.end_of_turn_p,
                wait_ms=reply.wait_ms,
            )
        )

    async def _commit_at(self, due_ms: float) -> None:
        await self._clock.sleep_until(due_ms)
        self._hold = None
        await self._commit()

    # --- work -------------------------------------------------------------------------------

    async def _generate(self, reply: _ReplyAttempt, prompt: list[Turn]) -> None:
        limit_ms = self._faults.llm_timeout_ms
        try:
            # Closed here, not left to the garbage collector, when a barge-in cancels this
            # task while it waits on TTS: a remote backend's stream must not outlive the reply.
            async with aclosing(self._generator.stream(prompt)) as pieces:
                async for piece in arriving_within(pieces, limit_ms):
                    reply.error = piece.error or reply.error
                    if piece.text:
                        await self._emit(reply, piece.text, piece.at_ms)
        except Exception as exc:  # the generator failed, or went quiet past its limit
            reply.error = (
                f"no reply text for {limit_ms:g} ms"
                if isinstance(exc, TimeoutError)
                else f"the generator failed: {exc!r}"
            )
            logger.warning("%s: reply %d: %s", self.name, reply.reply_index, reply.error)
        fallback = "" if reply.text.strip() else self._faults.reply_fallback
        await self._finish(reply, fallback if reply.error is not None else "")

    async def _speak(self, reply: _ReplyAttempt, text: str) -> None:
        """A reply of fixed words."""
        await self._finish(reply, text)

    async def _emit(self, reply: _ReplyAttempt, text: str, at_ms: float) -> None:
        reply.text += text
        if self._config.early_emission:
            await self.push(TextPieceFrame(text=text, at_ms=at_ms, reply_index=reply.reply_index))

    async def _finish(self, reply: _ReplyAttempt, last_words: str) -> None:
        """End ``reply`` with ``last_words`` (none, a fallback, or all of a fixed reply); a
        failure's reason goes to the trace with the last piece."""
        reply.text += last_words
        # Without early emission the whole reply goes now; with it, what is left.
        text = last_words if self._config.early_emission else reply.text
        if text or (reply.error is not None and self._config.early_emission):
            await self.push(
                TextPieceFrame(
                    text=text,
                    at_ms=self._clock.now_ms(),
                    reply_index=reply.reply_index,
                    error=reply.error,
                )
            )
        reply.done = True
        if reply.committed and reply.in_history:
            self.history.append(Turn("agent", reply.text))
        await self.push(EndOfReplyFrame(reply_index=reply.reply_index))

    async def _drop(self, reply: _ReplyAttempt, *, reason: str) -> None:
        """Throw a reply away unheard; it is traced as discarded work."""
        self._reply = None
        await self._stop(reply, reason=reason)
        self._ledger.forget(reply.reply_index)
        await self.push(
            SpeculationDiscardedFrame(
                kind="llm_generation",
                started_ms=reply.started_ms,
                ended_ms=self._clock.now_ms(),
                reason=reason,
            )
        )

    async def _stop(self, reply: _ReplyAttempt, *, reason: str) -> None:
        if reply.task is not None and not reply.task.done():
            reply.task.cancel()
            await asyncio.gather(reply.task, return_exceptions=True)
        await self.interrupt(reason)

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

    def _joined(self, text: str) -> str:
        return " ".join(part for part in (self._pending_user_text, text.strip()) if part)
