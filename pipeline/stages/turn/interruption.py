"""``InterruptionJudge``: what the caller's sound during a reply means — a new turn, their turn
going on, a backchannel, or a barge-in.

Why a room of its own (Pipecat keeps its interruption strategies apart from the rest of the
turn): the same sound means different things depending on how much of the reply was heard,
and most of it cannot be told at once. The rule:

* speech after the reply was heard to its end begins a new turn;
* speech before any of it was heard, or before more than ``interruption.yield_within_ms`` of
  it (too soon to be an answer to it), and before a tool acted for it, means the caller was
  not done: their turn goes on, and the reply yields at once, taken back;
* speech while it is heard pauses it at once until the caller's transcript says what it was:
  a backchannel ("uh-huh", "right") or no words at all (a cough, line noise) resumes it where
  it stopped, and the utterance is no turn (``ignoring``); real words are a barge-in, as is
  speech still going on ``interruption.max_backchannel_ms`` after it began
  (``Overheard.cut_due_ms``); with ``interruption.backchannels`` off, any speech over it is a
  barge-in at once.

Why it only judges: it is told what happened (``utterance_began``, ``paused``, ``resolve``,
``final_came``, ``pause_ended``) and answers what it means (a ``SpeechOverReply``, a
``Verdict``, when the cut is due); it acts on nothing and calls nothing back. The stage acts:
it closes and opens the ``PlayoutGate``, owns the timer that cuts a sound too long to be a
backchannel, resumes the reply or barges in, then tells the judge the pause is over. What is
judged of the utterance in progress (the paused reply, whether it is being ignored) is kept
here and written nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from cadence.pipeline.config import InterruptionConfig
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.stages.turn.reply import Reply, ReplyState
from cadence.voice.turn.cues import is_backchannel


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


@dataclass(frozen=True)
class Overheard:
    """Caller sound over a reply being heard, the reply paused until it is judged."""

    reply: Reply
    at_ms: float
    """When the caller began: a barge-in is dated from here, not from when it was judged."""
    cut_due_ms: float
    """When the sound, if still going on, is too long to be a backchannel: a barge-in,
    whatever its words."""


@dataclass(frozen=True)
class Verdict:
    """What the caller's sound over the paused reply was."""

    overheard: Overheard
    backchannel: bool
    """A backchannel or no words: resume the reply. Else words: a barge-in."""


class InterruptionJudge:
    def __init__(self, *, config: InterruptionConfig, ledger: PlaybackLedger) -> None:
        self._config = config
        self._ledger = ledger
        self._overheard: Overheard | None = None
        self._ignoring = False

    @property
    def judging(self) -> bool:
        """A reply is paused over the caller's sound, waiting for its words."""
        return self._overheard is not None

    @property
    def ignoring(self) -> bool:
        """The utterance in progress was judged a backchannel: its transcripts are no turn."""
        return self._ignoring

    def utterance_began(self) -> None:
        """A new utterance began: whatever it is, it is not the backchannel judged before."""
        self._ignoring = False

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

    def paused(self, reply: Reply, at_ms: float) -> Overheard:
        """The stage paused ``reply`` over the caller's sound that began at ``at_ms``: its
        fate waits for what the caller said, or for the sound to go on past ``cut_due_ms``."""
        cut_due_ms = at_ms + self._config.max_backchannel_ms
        self._overheard = Overheard(reply, at_ms, cut_due_ms)
        return self._overheard

    def resolve(self, text: str) -> Verdict:
        """The caller's sound over the paused reply was ``text``: a backchannel or no words
        (the utterance is then ignored: no turn), or words (a turn after all, even after a
        backchannel). The reply stays paused until the stage says ``pause_ended``."""
        overheard = self._overheard
        assert overheard is not None
        backchannel = is_backchannel(text)
        self._ignoring = backchannel
        return Verdict(overheard, backchannel)

    def final_came(self) -> bool:
        """A final transcript came that no paused reply was waiting for: True if it is the
        ignored backchannel's own, no turn — and the utterance it ended is over, so the
        next final is heard again."""
        ignored, self._ignoring = self._ignoring, False
        return ignored

    def pause_ended(self) -> None:
        """The stage resumed the paused reply, or cut it: no reply is paused any more."""
        self._overheard = None
