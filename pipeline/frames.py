"""Typed frames: the only things that flow between stages.

Three families decide how the runtime treats a frame:

* ``DataFrame`` – audio, transcripts, text. Queued in order; an interrupt flushes them.
* ``ControlFrame`` – markers ordered with the data (end of turn, end of stream). An interrupt
  flushes them too, except ``EndFrame``, which must always reach the end of the pipeline.
* ``SystemFrame`` – out of band (interrupt, cancel). Never queued behind data.

All times are milliseconds on the session clock (see ``cadence.core.clock``). Audio is mono
signed 16-bit PCM held in a NumPy ``int16`` array.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count
from typing import Literal

import numpy as np

from cadence.voice.audio.pcm import PCM16

_frame_ids = count()


@dataclass(frozen=True, kw_only=True, eq=False)
class Frame:
    """Base of every frame. ``frame_id`` is unique per process and orders creation."""

    frame_id: int = field(default_factory=lambda: next(_frame_ids), init=False)

    @property
    def name(self) -> str:
        return f"{type(self).__name__}#{self.frame_id}"


@dataclass(frozen=True, kw_only=True, eq=False)
class DataFrame(Frame):
    """Payload that an interrupt may discard."""


@dataclass(frozen=True, kw_only=True, eq=False)
class ControlFrame(Frame):
    """A marker that travels in order with the data."""


@dataclass(frozen=True, kw_only=True, eq=False)
class SystemFrame(Frame):
    """Out-of-band signal handled by the runtime ahead of queued frames."""


# --- audio -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, eq=False)
class AudioFrame(DataFrame):
    """A chunk of mono PCM16 audio; ``timestamp_ms`` is the session time of its first sample."""

    pcm: PCM16
    sample_rate: int
    timestamp_ms: float

    def __post_init__(self) -> None:
        if self.pcm.dtype != np.int16 or self.pcm.ndim != 1:
            raise ValueError(
                f"{type(self).__name__} needs a 1-D int16 array, "
                f"got {self.pcm.ndim}-D {self.pcm.dtype}"
            )
        if self.sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {self.sample_rate}")

    @property
    def duration_ms(self) -> float:
        return 1000.0 * len(self.pcm) / self.sample_rate

    @property
    def end_ms(self) -> float:
        return self.timestamp_ms + self.duration_ms


@dataclass(frozen=True, kw_only=True, eq=False)
class AudioInFrame(AudioFrame):
    """Audio of the user, as received from the transport."""


@dataclass(frozen=True, kw_only=True, eq=False)
class AudioOutFrame(AudioFrame):
    """Reply audio for the transport to play. ``reply_index`` names the reply it belongs to;
    ``timestamp_ms`` is the offset of its first sample from the start of that reply (when it
    will be heard is up to the transport), which is what barge-in truncation needs."""

    reply_index: int


# --- voice activity --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, eq=False)
class VADEventFrame(DataFrame):
    """A voice-activity event, back-dated: ``at_ms`` is when it happened in the audio."""

    at_ms: float


@dataclass(frozen=True, kw_only=True, eq=False)
class SpeechStartFrame(VADEventFrame):
    """The first voiced frame of an utterance began at ``at_ms``."""


@dataclass(frozen=True, kw_only=True, eq=False)
class PauseStartFrame(VADEventFrame):
    """The last voiced frame before a silence ended at ``at_ms``."""


@dataclass(frozen=True, kw_only=True, eq=False)
class SpeechResumedFrame(VADEventFrame):
    """Speech came back after a pause, before the endpoint."""


@dataclass(frozen=True, kw_only=True, eq=False)
class EndpointFrame(VADEventFrame):
    """The user's turn is over. ``speech_end_ms`` is the end of its last voiced frame."""

    speech_end_ms: float
    forced: bool = False


# --- text ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, eq=False)
class TranscriptFrame(DataFrame):
    text: str
    at_ms: float


@dataclass(frozen=True, kw_only=True, eq=False)
class PartialTranscriptFrame(TranscriptFrame):
    """A live caption of speech still in progress; may change."""


@dataclass(frozen=True, kw_only=True, eq=False)
class FinalTranscriptFrame(TranscriptFrame):
    """The transcript a reply is generated from. ``speculative`` when decoded at pause onset;
    ``decode_ms`` is how long the decode itself took."""

    speculative: bool = False
    decode_ms: float = 0.0


@dataclass(frozen=True, kw_only=True, eq=False)
class SpeculativeTranscriptFrame(TranscriptFrame):
    """The transcript decoded at pause onset, before the endpoint: the turn engine may start
    generating on it (preemptive generation), to be committed or discarded."""

    decode_ms: float = 0.0


@dataclass(frozen=True, kw_only=True, eq=False)
class TranscriptFailedFrame(DataFrame):
    """The utterance could not be transcribed (the decode failed, or ran past its time
    limit): there is no transcript, and the caller must be asked to say it again."""

    reason: str
    at_ms: float


@dataclass(frozen=True, kw_only=True, eq=False)
class TextPieceFrame(DataFrame):
    """A finished piece of the agent's reply, handed from the generator to TTS."""

    text: str
    at_ms: float
    reply_index: int
    error: str | None = None
    """Why the generation failed, on the piece that ends a failed reply (traced as
    `llm_error`)."""
    flush: bool = False
    """The reply pauses after this piece (a tool runs): TTS speaks what it holds now instead of
    waiting for the words that end its phrase."""


@dataclass(frozen=True, kw_only=True, eq=False)
class SpeculationDiscardedFrame(DataFrame):
    """Speculative work was thrown away (a decode started at a pause that speech resumed);
    the tracer records it as ``discarded``."""

    kind: str
    started_ms: float
    ended_ms: float
    reason: str


ToolOutcome = Literal[
    "ok",
    "asked",
    "error",
    "timeout",
    "invalid_arguments",
    "unknown_tool",
    "cancelled",
    "left_running",
]
"""What became of a tool call: ``ok`` (its result went back to the model); ``asked`` (it needs
what only the caller can say: the reply asks for it, ``AskTheCaller``); ``error`` (the tool
raised); ``timeout`` (past ``tools.timeout_ms``); ``invalid_arguments`` (not JSON, or not what
its parameters take); ``unknown_tool`` (the model named no tool it was offered); ``cancelled``
(a barge-in, or the reply was dropped); ``left_running`` (a tool that cannot be cancelled,
still running at a barge-in: it finishes in the background). All but ``ok`` give the model an
error result."""


@dataclass(frozen=True, kw_only=True, eq=False)
class ToolCallFrame(DataFrame):
    """A tool call of reply ``reply_index`` ended (``outcome``). Sizes, never values: the
    arguments and the result may hold what a caller said."""

    reply_index: int
    tool: str
    """The tool's name (``name`` is every frame's own)."""
    round: int
    """1 for the calls of the reply's first answer, 2 for those after their results, …"""
    started_ms: float
    ended_ms: float
    outcome: ToolOutcome
    argument_bytes: int
    result_bytes: int


# --- control ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, eq=False)
class EndOfReplyFrame(ControlFrame):
    """The generator has finished the reply of ``reply_index``; TTS flushes its last phrase."""

    reply_index: int


@dataclass(frozen=True, kw_only=True, eq=False)
class TurnCommittedFrame(ControlFrame):
    """The engine commits to "the user's turn is over": the reply of ``reply_index`` may be
    heard. Until then its audio is held back (it may have been generated preemptively)."""

    reply_index: int
    at_ms: float
    user_text: str
    speech_end_ms: float
    """End of the user's speech, as the VAD placed it."""
    transcript_at_ms: float
    """When the transcript the reply answers became available."""
    end_of_turn_p: float | None = None
    """P(the utterance is complete) that set the wait; None for a turn of the engine's own
    (a request to repeat)."""
    wait_ms: float = 0.0
    """Silence after ``speech_end_ms`` the engine waited for, by that P."""
    scored_ms: float = 0.0
    """How long the final transcript waited for its P: zero when the transcripts before it had
    it computed already (the language model, docs/end-of-turn.md)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class TurnWithdrawnFrame(ControlFrame):
    """The caller went on before the reply of ``reply_index`` was heard, or within a syllable
    of it (``interruption.yield_within_ms``): the reply yields, the commit is taken back, and
    the user's turn continues."""

    reply_index: int
    heard_ms: float = 0.0
    """How much of the reply's audio had been played when it yielded (0: none)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class ReplyPhraseFrame(ControlFrame):
    """TTS finished a phrase of ``reply_index``: its text spans ``start_ms``–``end_ms`` of the
    reply's audio. With what was played, this tells which words the caller heard."""

    reply_index: int
    text: str
    start_ms: float
    end_ms: float


@dataclass(frozen=True, kw_only=True, eq=False)
class BargeInFrame(ControlFrame):
    """The caller spoke over the reply of ``reply_index``; it was cut after ``spoken_text``."""

    reply_index: int
    at_ms: float
    spoken_text: str


@dataclass(frozen=True, kw_only=True, eq=False)
class BackchannelFrame(ControlFrame):
    """The caller's sound during the reply of ``reply_index`` (from ``at_ms``) was not an
    interruption — "uh-huh", a cough, line noise (``text`` is what whisper made of it): the
    reply was paused, and resumed where it stopped."""

    reply_index: int
    at_ms: float
    text: str


@dataclass(frozen=True, kw_only=True, eq=False)
class ReplySynthesizedFrame(ControlFrame):
    """TTS finished the reply of ``reply_index``: ``audio_ms`` of audio went out for it."""

    reply_index: int
    audio_ms: float


@dataclass(frozen=True, kw_only=True, eq=False)
class DTMFFrame(ControlFrame):
    """The caller pressed a key (telephony DTMF). It travels with the audio so that it is seen
    in order with what was said; no stage acts on it, the application does."""

    digit: str
    at_ms: float


@dataclass(frozen=True, kw_only=True, eq=False)
class StopReplyFrame(ControlFrame):
    """The application asks the agent to stop speaking now: the reply is cut as by a barge-in,
    and the history keeps the words heard."""

    at_ms: float


@dataclass(frozen=True, kw_only=True, eq=False)
class EndCallFrame(ControlFrame):
    """End the call once the reply in progress has been heard (the ``end_call`` tool, or the
    application's ``VoiceSession.end_call``)."""

    reason: str
    at_ms: float


@dataclass(frozen=True, kw_only=True, eq=False)
class HangUpFrame(ControlFrame):
    """The agent ends the call now — its last words were heard; the transport hangs up."""

    reason: str
    at_ms: float


@dataclass(frozen=True, kw_only=True, eq=False)
class EndFrame(ControlFrame):
    """End of stream: each stage finishes what it holds, passes this on, then stops."""


@dataclass(frozen=True, kw_only=True, eq=False)
class InterruptFrame(SystemFrame):
    """Cancel in-flight work downstream of the sender and drop what is queued there."""

    reason: str


@dataclass(frozen=True, kw_only=True, eq=False)
class CancelFrame(SystemFrame):
    """Stop the whole pipeline now, dropping everything in flight."""

    reason: str
