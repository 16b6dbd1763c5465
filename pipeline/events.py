"""What an application hears from a session: typed events, in the order things happened.

A session's frames are internal; these events are its public face — the browser page, the
telephony endpoints and any embedding program read the same stream
(:meth:`cadence.pipeline.session.VoiceSession.events`). ``SessionEvents`` is both a frame observer
and a trace sink of the session. Observers must not block the pipeline, so events go into a
bounded queue; a reader that falls more than ``MAX_QUEUED_EVENTS`` behind loses the newest
ones, with a warning in the log, rather than growing the process without limit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Literal

from cadence.pipeline.frames import (
    AudioOutFrame,
    BargeInFrame,
    DTMFFrame,
    EndOfReplyFrame,
    EndpointFrame,
    FinalTranscriptFrame,
    Frame,
    HangUpFrame,
    PartialTranscriptFrame,
    PauseStartFrame,
    SpeechResumedFrame,
    SpeechStartFrame,
    TextPieceFrame,
    ToolCallFrame,
    ToolOutcome,
    TurnCommittedFrame,
    TurnWithdrawnFrame,
)
from cadence.pipeline.tracing import TurnTrace
from cadence.voice.audio import PCM16

logger = logging.getLogger(__name__)

MAX_QUEUED_EVENTS = 3000
"""Events waiting for a reader: a minute of reply audio at 50 frames a second."""


@dataclass(frozen=True)
class VoiceActivityEvent:
    """The caller started or resumed speaking (``speech``), paused (``pause``), or the engine
    decided their utterance is over (``endpoint``)."""

    state: Literal["speech", "pause", "endpoint"]
    at_ms: float


@dataclass(frozen=True)
class TranscriptEvent:
    """What the caller said: a live caption (``final=False``) or the utterance's transcript —
    ``speculative`` when it was decoded at the pause onset, ahead of the endpoint."""

    text: str
    final: bool
    speculative: bool = False


@dataclass(frozen=True)
class AgentTextEvent:
    """A piece of reply ``reply_index``, as the generator hands it to speech synthesis."""

    reply_index: int
    text: str


@dataclass(frozen=True)
class TurnCommittedEvent:
    """The caller's turn is over; reply ``reply_index`` (to ``user_text``) is being heard."""

    reply_index: int
    user_text: str


@dataclass(frozen=True)
class TurnWithdrawnEvent:
    """The caller went on before any of reply ``reply_index`` was heard; it was dropped."""

    reply_index: int


@dataclass(frozen=True)
class BargeInEvent:
    """Reply ``reply_index`` was cut (the caller spoke over it, or the application stopped it)
    after the words ``heard``, which is what the history keeps."""

    reply_index: int
    heard: str


@dataclass(frozen=True)
class ReplyPlayedEvent:
    """All of reply ``reply_index`` went out to the transport."""

    reply_index: int


@dataclass(frozen=True)
class DTMFEvent:
    """The caller pressed ``digit`` (0–9, ``*``, ``#``, A–D)."""

    digit: str
    at_ms: float


@dataclass(frozen=True)
class ToolCallEvent:
    """A tool call of reply ``reply_index`` ended: which tool, what became of it, how long it
    ran (its arguments and result stay in the conversation, not in events)."""

    reply_index: int
    name: str
    outcome: ToolOutcome
    duration_ms: float


@dataclass(frozen=True)
class HangUpEvent:
    """The agent ended the call (``reason``): its goodbye was heard. Every transport hangs up
    on it; an embedding program ends its call here."""

    reason: str
    at_ms: float


@dataclass(frozen=True)
class TraceEvent:
    """A finished turn's latency trace."""

    trace: TurnTrace


@dataclass(frozen=True)
class ReplyAudioEvent:
    """Reply audio to play now (sessions opened without an audio output of their own); 20 ms of
    mono PCM16, paced in real time."""

    reply_index: int
    pcm: PCM16
    sample_rate: int


@dataclass(frozen=True)
class ClearAudioEvent:
    """Drop any reply audio still buffered for playing: the reply was cut."""


@dataclass(frozen=True)
class SessionEndedEvent:
    """The last event of every session: it ended (``reason``), its last trace was written."""

    reason: str


SessionEvent = (
    VoiceActivityEvent
    | TranscriptEvent
    | AgentTextEvent
    | TurnCommittedEvent
    | TurnWithdrawnEvent
    | BargeInEvent
    | ReplyPlayedEvent
    | DTMFEvent
    | ToolCallEvent
    | HangUpEvent
    | TraceEvent
    | ReplyAudioEvent
    | ClearAudioEvent
    | SessionEndedEvent
)

EventHandler = Callable[[str, SessionEvent], None]
"""Gets the events of many sessions, each with its session's id — a server's hook for an
embedding program (route a DTMF menu choice, log transcripts). It must not block."""


def frame_event(source: str, frame: Frame) -> SessionEvent | None:
    """The event for ``frame`` handed on by stage ``source``, if it is one the world sees.
    Each frame is seen as every stage hands it on; ``source`` picks the stage where it is news."""
    match frame:
        case SpeechStartFrame() | SpeechResumedFrame() if source == "vad":
            return VoiceActivityEvent("speech", frame.at_ms)
        case PauseStartFrame() if source == "vad":
            return VoiceActivityEvent("pause", frame.at_ms)
        case EndpointFrame() if source == "vad":
            return VoiceActivityEvent("endpoint", frame.at_ms)
        case PartialTranscriptFrame() if source == "stt":
            return TranscriptEvent(frame.text, final=False)
        case FinalTranscriptFrame() if source == "stt":
            return TranscriptEvent(frame.text, final=True, speculative=frame.speculative)
        case DTMFFrame() if source == "vad":
            return DTMFEvent(frame.digit, frame.at_ms)
        case TextPieceFrame() if source == "turn":
            return AgentTextEvent(frame.reply_index, frame.text)
        case TurnCommittedFrame() if source == "turn":
            return TurnCommittedEvent(frame.reply_index, frame.user_text)
        case TurnWithdrawnFrame() if source == "turn":
            return TurnWithdrawnEvent(frame.reply_index)
        case BargeInFrame() if source == "turn":
            return BargeInEvent(frame.reply_index, frame.spoken_text)
        case ToolCallFrame() if source == "turn":
            return ToolCallEvent(
                frame.reply_index, frame.tool, frame.outcome, frame.ended_ms - frame.started_ms
            )
        case HangUpFrame() if source == "turn":
            return HangUpEvent(frame.reason, frame.at_ms)
        case EndOfReplyFrame() if source == "playout":
            return ReplyPlayedEvent(frame.reply_index)
        case _:
            return None


class SessionEvents:
    """The event stream of one session: fed by its frames, traces and (without an audio
    output of the application's) reply audio; read once, by one reader, until the session ends."""

    def __init__(self, session_id: str) -> None:
        self._session_id = session_id
        self._queue: asyncio.Queue[SessionEvent | None] = asyncio.Queue()
        self._ended = False
        self._warned = False

    def post(self, event: SessionEvent) -> None:
        if self._ended:
            return
        if self._queue.qsize() >= MAX_QUEUED_EVENTS:
            if not self._warned:
                logger.warning("%s: events are not being read; dropping new ones", self._session_id)
                self._warned = True
            return
        self._queue.put_nowait(event)

    def end(self, reason: str) -> None:
        """The session is over: the reader gets what is queued and a ``SessionEndedEvent``,
        then the stream stops. It is never dropped, however far behind the reader is."""
        if not self._ended:
            self._queue.put_nowait(SessionEndedEvent(reason))
            self._ended = True
            self._queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[SessionEvent]:
        while (event := await self._queue.get()) is not None:
            yield event

    # --- as the session's frame observer and trace sink ---------------------------------------

    def on_frame(self, source: str, frame: Frame) -> None:
        event = frame_event(source, frame)
        if event is not None:
            self.post(event)

    def write(self, turn: TurnTrace) -> None:
        self.post(TraceEvent(turn))

    def close(self) -> None:
        """The tracer closing: the stream itself ends with the session (``end``)."""


class EventAudioOutput:
    """Reply audio as events, for applications that play it themselves."""

    def __init__(self, events: SessionEvents) -> None:
        self._events = events

    async def send(self, frame: AudioOutFrame) -> None:
        self._events.post(ReplyAudioEvent(frame.reply_index, frame.pcm, frame.sample_rate))

    async def clear(self) -> None:
        self._events.post(ClearAudioEvent())
