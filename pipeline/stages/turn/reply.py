"""``Reply``: one handle per attempt at answering the caller, its lifecycle one explicit state.

Why a handle (LiveKit Agents' ``SpeechHandle``): all that happens to a reply — its commit, its
words, its tool calls, the call it may end — is asked of and done to this one object, so none of
the turn stage's rooms keeps flags of its own about a reply, and a reply thrown away takes its
work with it (``cancel_work``).

Why one state: the reply's fate used to be a handful of booleans (committed, done, …) whose
legal combinations nobody had written down. ``ReplyState`` names them and ``_NEXT`` the moves
between them; a move not listed raises where it is attempted (``generation_ended`` on a
reply that already ended is no move: it keeps its end)::

    PREPARING ──commit──▶ SPEAKING ──generated──▶ SPOKEN ──heard to its end──▶ HEARD
        │ generated                                  ▲
        ▼                                            │
    PREPARED ─────────────────commit─────────────────┘

    PREPARING, PREPARED ──▶ DROPPED            (thrown away before the commit)
    SPEAKING, SPOKEN    ──▶ WITHDRAWN          (committed, dropped before a word was heard)
    SPEAKING, SPOKEN    ──▶ INTERRUPTED        (cut while heard: a barge-in, the application)

A reply is *live* until it reaches HEARD, INTERRUPTED, WITHDRAWN or DROPPED; the turn stage
holds at most one live reply.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from dataclasses import dataclass, field
from enum import Enum

from cadence.llm import Turn
from cadence.llm.dialogue import ToolCall
from cadence.pipeline.frames import SpeculationDiscardedFrame, TurnCommittedFrame


@dataclass(frozen=True)
class EndOfTurnScore:
    """What the detector made of the turn's words: traced with the commit."""

    p: float | None = None
    """P(the utterance is complete); None for a turn the engine commits at once (a request
    to repeat)."""
    wait_ms: float = 0.0
    """The silence it asked for, from the end of speech."""
    scored_ms: float = 0.0
    """How long the score took to come (next to nothing when ``listen`` had it ready)."""


class ReplyState(Enum):
    PREPARING = "preparing"
    """Being generated ahead of the commit (speculation, the end-of-turn wait); its audio is
    held in playout."""
    PREPARED = "prepared"
    """Generated in full, waiting for the commit."""
    SPEAKING = "speaking"
    """Committed: the caller may hear it while the rest is generated."""
    SPOKEN = "spoken"
    """Committed and generated in full: what is left is for the caller to hear it."""
    HEARD = "heard"
    """Heard to its end."""
    INTERRUPTED = "interrupted"
    """Cut while heard (a barge-in, or the application): the history keeps the words heard."""
    WITHDRAWN = "withdrawn"
    """Committed, then dropped before any of it was heard: the caller's turn went on."""
    DROPPED = "dropped"
    """Thrown away before the commit (the caller went on, the words changed, …)."""


_NEXT: dict[ReplyState, frozenset[ReplyState]] = {
    ReplyState.PREPARING: frozenset({ReplyState.PREPARED, ReplyState.SPEAKING, ReplyState.DROPPED}),
    ReplyState.PREPARED: frozenset({ReplyState.SPOKEN, ReplyState.DROPPED}),
    ReplyState.SPEAKING: frozenset(
        {ReplyState.SPOKEN, ReplyState.INTERRUPTED, ReplyState.WITHDRAWN}
    ),
    ReplyState.SPOKEN: frozenset({ReplyState.HEARD, ReplyState.INTERRUPTED, ReplyState.WITHDRAWN}),
    ReplyState.HEARD: frozenset(),
    ReplyState.INTERRUPTED: frozenset(),
    ReplyState.WITHDRAWN: frozenset(),
    ReplyState.DROPPED: frozenset(),
}
"""The legal moves: everything else is a bug in the turn stage."""

_COMMITTED = frozenset(
    {
        ReplyState.SPEAKING,
        ReplyState.SPOKEN,
        ReplyState.HEARD,
        ReplyState.INTERRUPTED,
        ReplyState.WITHDRAWN,
    }
)
_GENERATED = frozenset({ReplyState.PREPARED, ReplyState.SPOKEN, ReplyState.HEARD})


@dataclass
class Round:
    """One answer of the generator within a reply: its words, then the tools it called (if
    any) and their results, by call id."""

    text: str = ""
    calls: tuple[ToolCall, ...] = ()
    results: dict[str, str] = field(default_factory=dict)


@dataclass
class InFlight:
    """A tool call still running: which round called it, and since when."""

    call: ToolCall
    round: int
    started_ms: float


@dataclass(eq=False)
class Reply:
    """One attempt at answering ``user_text``; ``index`` is unique per attempt."""

    index: int
    user_text: str
    transcript_at_ms: float
    started_ms: float
    in_history: bool = True
    """False for the request to repeat what could not be transcribed: nothing was said that
    the model should see."""
    _state: ReplyState = field(default=ReplyState.PREPARING, init=False)
    end_of_turn: EndOfTurnScore = field(default_factory=EndOfTurnScore)
    """Why the turn was committed when it was (traced with the commit)."""
    committed_at_ms: float = 0.0
    committed_event: asyncio.Event = field(default_factory=asyncio.Event)
    history_at: int | None = None
    """Where the reply's user turn stands in the history, once committed."""
    text: str = ""
    """All the words of the reply, as spoken (every round's, and a filler)."""
    sent: int = 0
    """How much of ``text`` went to TTS."""
    rounds: list[Round] = field(default_factory=list)
    error: str | None = None
    """Why the generation failed (traced with the reply's last piece)."""
    in_flight: dict[str, InFlight] = field(default_factory=dict)
    acted: bool = False
    """A tool that acts ran for it: the reply is part of the conversation now, heard or not."""
    ends_call: str | None = None
    """Why the call ends once this reply has been heard (``end_call``, or the application)."""
    goodbye: bool = False
    """A tool ended the call: the reply's words so far are its goodbye, and no round
    follows."""
    generation: asyncio.Task[None] | None = None
    """The reply's own work — its generation (or its fixed words), a filler, a hang-up once
    heard — cancelled with it (``cancel_work``)."""
    filler: asyncio.Task[None] | None = None
    hang_up: asyncio.Task[None] | None = None

    # --- the lifecycle ----------------------------------------------------------------------

    @property
    def state(self) -> ReplyState:
        """Where the reply is in its life; moved only by the verbs below."""
        return self._state

    @property
    def committed(self) -> bool:
        """The caller's turn was committed to this reply (whatever became of it since)."""
        return self.state in _COMMITTED

    @property
    def generated(self) -> bool:
        """All of its words were handed to TTS, and it has not ended otherwise."""
        return self.state in _GENERATED

    def commit(self, now_ms: float) -> None:
        """The caller's turn is over: the reply may be heard."""
        self._move(ReplyState.SPOKEN if self.state is ReplyState.PREPARED else ReplyState.SPEAKING)
        self.committed_at_ms = now_ms
        self.committed_event.set()

    def generation_ended(self) -> None:
        """All of the reply's words were handed to TTS. A reply that already ended (cut
        while its last words were on their way) keeps its end."""
        if self.state is ReplyState.PREPARING:
            self._move(ReplyState.PREPARED)
        elif self.state is ReplyState.SPEAKING:
            self._move(ReplyState.SPOKEN)

    def heard_to_end(self) -> None:
        self._move(ReplyState.HEARD)

    def interrupt(self) -> None:
        self._move(ReplyState.INTERRUPTED)

    def drop(self) -> None:
        """Thrown away unheard: withdrawn if it had been committed."""
        self._move(ReplyState.WITHDRAWN if self.committed else ReplyState.DROPPED)

    def _move(self, to: ReplyState) -> None:
        if to not in _NEXT[self._state]:
            raise RuntimeError(f"reply {self.index}: no move from {self._state.name} to {to.name}")
        self._state = to

    async def cancel_work(self) -> None:
        """Cancel the reply's generation, its filler and its hang-up, and wait for them."""
        tasks = [t for t in (self.generation, self.filler, self.hang_up) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def committed_frame(self, at_ms: float, speech_end_ms: float) -> TurnCommittedFrame:
        """What the commit says (and the trace keeps): the turn's words, and why now."""
        return TurnCommittedFrame(
            reply_index=self.index,
            at_ms=at_ms,
            user_text=self.user_text,
            speech_end_ms=speech_end_ms,
            transcript_at_ms=self.transcript_at_ms,
            end_of_turn_p=self.end_of_turn.p,
            wait_ms=self.end_of_turn.wait_ms,
            scored_ms=self.end_of_turn.scored_ms,
        )

    def discarded_frame(self, ended_ms: float, reason: str) -> SpeculationDiscardedFrame:
        """What the trace keeps of a reply thrown away unheard: generation, wasted."""
        return SpeculationDiscardedFrame(
            kind="llm_generation", started_ms=self.started_ms, ended_ms=ended_ms, reason=reason
        )

    # --- the words --------------------------------------------------------------------------

    @property
    def has_words(self) -> bool:
        """Anything of the reply was said (to TTS; maybe not heard yet)."""
        return bool(self.text.strip())

    def add_words(self, text: str) -> None:
        """Add ``text`` to the current round and to the words as spoken (a round's first
        words are set apart from the last round's, and words after a finished sentence — a
        filler's — from it)."""
        if not self.rounds:
            self.rounds.append(Round())
        round_ = self.rounds[-1]
        after = not round_.text or self.text.endswith((".", "?", "!"))
        apart = self.text and after and not self.text[-1].isspace()
        spoken = " " + text if apart and not text[0].isspace() else text
        round_.text += spoken if round_.text else text
        self.text += spoken

    def take_unsent(self) -> str:
        """The words TTS has not had yet, now counted as sent."""
        text, self.sent = self.text[self.sent :], len(self.text)
        return text

    def history_turns(self, heard: str | None = None) -> list[Turn]:
        """The reply as the history keeps it: each round's words (cut to the ``heard`` ones
        after a barge-in), the tools it called and their results."""
        turns: list[Turn] = []
        words = heard.split() if heard is not None else None
        for round_ in self.rounds:
            text = round_.text.strip()
            if words is not None:
                count = len(text.split())
                text, words = " ".join(words[:count]), words[count:]
            if text or round_.calls:
                turns.append(Turn("agent", text, tool_calls=as_sent(round_.calls)))
            cancelled = json.dumps({"error": "the reply was cut before the call ran"})
            turns += [
                Turn("tool", round_.results.get(call.id, cancelled), tool_call_id=call.id)
                for call in round_.calls
            ]
        return turns or [Turn("agent", "")]

    # --- its tool calls ---------------------------------------------------------------------

    def with_unique_ids(self, calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
        """``calls`` with ids no other call of the reply has: each result names its call, and
        a service that repeats an id must not have one call's result taken for another's."""
        taken = {call.id for round_ in self.rounds for call in round_.calls}
        unique = []
        for call in calls:
            call_id, n = call.id, 1
            while call_id in taken:
                call_id, n = f"{call.id}_{n}", n + 1
            taken.add(call_id)
            unique.append(dataclasses.replace(call, id=call_id))
        return tuple(unique)

    def set_results(self, name: str, result: dict[str, str]) -> None:
        """Make ``result`` what the history says the reply's calls of ``name`` returned."""
        for round_ in self.rounds:
            for call in round_.calls:
                if call.name == name:
                    round_.results[call.id] = json.dumps(result)

    def end_call_after(self, reason: str) -> None:
        """A tool ends the call: once this reply, its goodbye, has been heard."""
        self.ends_call = reason
        self.goodbye = True


def as_sent(calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
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
