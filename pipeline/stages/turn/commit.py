"""When to commit the caller's turn: the words of the turn still open, where its speech ended,
and the end-of-turn wait its words call for.

Why a room of its own: this is the one decision of the turn stage made on the caller's words
alone — before any reply is heard, and whatever reply is being prepared (speculation starts one
at pause onset; the commit only releases its audio). Kept apart, the rule is read in one place:
the detector scores each transcript as it comes (``listen``) so that the final one finds its
score ready; the final one's P(complete) becomes a wait counted from the end of speech; the
turn is committed once the wait has passed — at once if it has — unless the caller speaks first
(``cancel``). Speech before the commit continues the same turn, so the words of a turn span
utterances: ``joined`` puts the kept ones before the new. What this room keeps (the open
turn's words, where speech ended, the commit waiting) is written only here, each told by the
event that changes it (``keep_words``, ``turn_closed``, ``speech_ended``); the stage reads
where speech ended (``speech_end_ms``) for the commit's frame.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from cadence.core.clock import Clock
from cadence.pipeline.end_of_turn import EndOfTurnDetector
from cadence.pipeline.stage import Stage
from cadence.pipeline.stages.turn.history import History
from cadence.pipeline.stages.turn.reply import EndOfTurnScore, Reply


class TurnCommitter:
    def __init__(
        self, stage: Stage, detector: EndOfTurnDetector, *, clock: Clock, history: History
    ) -> None:
        self._stage = stage
        self._detector = detector
        self._clock = clock
        self._history = history
        self._open_words = ""
        """Words of the user turn still open (it may span several utterances)."""
        self._speech_end_ms = 0.0
        self._due: asyncio.Task[None] | None = None
        """The commit, waiting out the end-of-turn wait."""

    @property
    def speech_end_ms(self) -> float:
        """Where the caller's last utterance ended, as the VAD placed it: the end-of-turn wait
        counts from here, and the commit says it."""
        return self._speech_end_ms

    def speech_ended(self, at_ms: float) -> None:
        """The VAD's endpoint: the caller's utterance ended at ``at_ms``."""
        self._speech_end_ms = at_ms

    def joined(self, text: str) -> str:
        """``text`` after the words of the turn still open."""
        return " ".join(part for part in (self._open_words, text.strip()) if part)

    def keep_words(self, text: str) -> None:
        """The turn stays open with ``text`` said: the next utterance is joined to it."""
        self._open_words = text

    def turn_closed(self) -> None:
        """The turn was committed: the next utterance begins a new one."""
        self._open_words = ""

    def prepare(self) -> None:
        """The caller began a turn: the detector readies its context (the agent's words)."""
        agent_text = self._history.agent_text()
        self._stage.spawn(self._detector.prepare(agent_text), name="end-of-turn-prefill")

    def listen(self, text: str, *, urgent: bool) -> None:
        """Score a transcript before the final one, so the final finds its score ready."""
        agent_text = self._history.agent_text()
        listening = self._detector.listen(text, agent_text=agent_text, urgent=urgent)
        self._stage.spawn(listening, name="end-of-turn-listen")

    async def commit_when_due(self, reply: Reply, commit: Callable[[], Awaitable[None]]) -> None:
        """``commit`` once the end-of-turn wait ``reply``'s words call for has passed since the
        end of speech — at once if it has — unless ``cancel`` comes first."""
        agent_text = self._history.agent_text()
        asked_ms = self._clock.now_ms()
        p = await self._detector.probability(reply.user_text, agent_text=agent_text)
        scored_ms = self._clock.now_ms() - asked_ms
        reply.end_of_turn = EndOfTurnScore(p, self._detector.wait_ms(p), scored_ms)
        due_ms = self._speech_end_ms + reply.end_of_turn.wait_ms
        if due_ms > self._clock.now_ms():
            self._due = self._stage.spawn(self._commit_at(due_ms, commit), name="end-of-turn-wait")
        else:
            await commit()

    def cancel(self) -> None:
        """The caller spoke (or the turn changed): no commit at the end of the wait."""
        if self._due is not None:
            self._due.cancel()
            self._due = None

    async def _commit_at(self, due_ms: float, commit: Callable[[], Awaitable[None]]) -> None:
        await self._clock.sleep_until(due_ms)
        self._due = None
        await commit()
