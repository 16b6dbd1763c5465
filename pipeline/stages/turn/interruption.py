"""``InterruptionJudge``: what the caller's sound during a reply means — a new turn, their turn
going on, a backchannel, or a barge-in.

Why a room of its own (Pipecat keeps its interruption strategies apart from the rest of the
turn): the same sound means different things depending on how much of the reply was heard,
and most of it cannot be told at once. The rule:

* speech after the reply was heard to its end begins a new turn;
* speech before any of it was heard, or before more than ``interruption.yield_within_ms`` of
  it (too soon to be an answer to it), and before a tool acted for it, means the caller was
  not done: their turn goes on, and the reply yields at once, taken back;
* speech while it is heard pauses it at once (the ``PlayoutGate`` closes) until the caller's
  transcript says what it was: a backchannel ("uh-huh", "right") or no words at all (a cough,
  line noise) resumes it where it stopped, and the utterance is no turn (``ignoring``); real
  words are a barge-in, as is speech still going on ``interruption.max_backchannel_ms`` after
  it began; with ``interruption.backchannels`` off, any speech over it is a barge-in at once.

This room judges; the barge-in itself (the history cut to what was heard) is the stage's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum

from cadence.core.clock import Clock
from cadence.pipeline.config import InterruptionConfig
from cadence.pipeline.frames import BackchannelFrame
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.playout_gate import PlayoutGate
from cadence.pipeline.stage import Stage
from cadence.pipeline.stages.turn.reply import Reply, ReplyState
from cadence.voice.turn.cues import is_backchannel

BargeIn = Callable[[Reply, float], Awaitable[None]]
"""Cut ``reply`` for speech that began at ``at_ms``."""


class SpeechOverReply(Enum):
    """What the caller's speech means for the reply in progress."""

    AFTER_IT = "after"
    """The reply was heard to its end: this is a new turn."""
    CONTINUES_TURN = "continues"
    """Nothing of the reply was heard, or too little to be answered: the caller was not
    done."""
    PAUSES_IT = "pauses"
    """Over the reply being heard: pause it until the words say what the sound was."""
    BARGES_IN = "barges in"
    """Over the reply being heard, backchannels off: cut it now."""


@dataclass
class _Overheard:
    """Caller sound over a reply being heard, the reply paused until it is judged."""

    reply: Reply
    at_ms: float
    cut_later: asyncio.Task[None] | None = None


class InterruptionJudge:
    def __init__(
        self,
        stage: Stage,
        *,
        config: InterruptionConfig,
        clock: Clock,
        ledger: PlaybackLedger,
        gate: PlayoutGate,
        barge_in: BargeIn,
    ) -> None:
        self._stage = stage
        self._config = config
        self._clock = clock
        self._ledger = ledger
        self._gate = gate
        self._barge_in = barge_in
        self._overheard: _Overheard | None = None
        self.ignoring = False
        """The utterance in progress was judged a backchannel: its transcript is no turn."""

    @property
    def judging(self) -> bool:
        """A reply is paused over the caller's sound, waiting for its words."""
        return self._overheard is not None

    def meaning(self, reply: Reply) -> SpeechOverReply:
        """What speech beginning now means for ``reply``."""
        if reply.state is ReplyState.SPOKEN and self._ledger.finished(reply.index):
            return SpeechOverReply.AFTER_IT
        heard_ms = self._ledger.played_ms(reply.index)
        if reply.committed and (heard_ms > self._config.yield_within_ms or reply.acted):
            if self._config.backchannels:
                return SpeechOverReply.PAUSES_IT
            return SpeechOverReply.BARGES_IN
        return SpeechOverReply.CONTINUES_TURN

    def pause(self, reply: Reply, at_ms: float) -> None:
        """Pause the reply at once; its fate waits for what the caller said (or for speech too
        long to be a backchannel)."""
        self._gate.close()
        overheard = _Overheard(reply, at_ms)
        overheard.cut_later = self._stage.spawn(self._cut_when_long(overheard), name="overheard")
        self._overheard = overheard

    async def resolve(self, text: str) -> bool:
        """The caller's sound over the paused reply was ``text``: resume the reply if it was a
        backchannel or no words (True), cut it if it was words (False)."""
        overheard = self._overheard
        assert overheard is not None
        if not is_backchannel(text):
            self.ignoring = False  # words after a backchannel: a turn after all
            await self._barge_in(overheard.reply, overheard.at_ms)
            return False
        self.end_pause()
        self.ignoring = True
        self._gate.open()
        reply = overheard.reply
        await self._stage.push(
            BackchannelFrame(reply_index=reply.index, at_ms=overheard.at_ms, text=text)
        )
        return True

    def end_pause(self) -> None:
        """No reply is paused over the caller's sound any more."""
        overheard, self._overheard = self._overheard, None
        if overheard is not None and overheard.cut_later is not None:
            overheard.cut_later.cancel()

    async def _cut_when_long(self, overheard: _Overheard) -> None:
        limit_ms = self._config.max_backchannel_ms
        await self._clock.sleep_until(overheard.at_ms + limit_ms)
        overheard.cut_later = None  # this task is the one running: nothing to cancel
        await self._barge_in(overheard.reply, overheard.at_ms)
