"""``TurnTraceObserver``: reads a session's frames and records each turn's anchor events.

Stages know nothing of tracing; this observer watches the frames they hand on and maps them
to the anchor events of docs/trace-schema.md. Work done for a reply before its turn is committed
(preemptive generation and synthesis, tool calls) is kept per reply and written into the trace
only if that reply is the one committed; a reply thrown away shows up as discarded work instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cadence.core.clock import Clock
from cadence.pipeline.frames import (
    AudioOutFrame,
    BackchannelFrame,
    BargeInFrame,
    EndOfReplyFrame,
    EndpointFrame,
    Frame,
    SpeculationDiscardedFrame,
    SpeechStartFrame,
    TextPieceFrame,
    ToolCallFrame,
    TranscriptFailedFrame,
    TurnCommittedFrame,
    TurnWithdrawnFrame,
)
from cadence.pipeline.tracing.anchors import AnchorEvent
from cadence.pipeline.tracing.tracer import LatencyTracer
from cadence.pipeline.tracing.turn_trace import ToolCallRecord

A = AnchorEvent


@dataclass
class _ReplyEvents:
    """Anchor events and tool calls of one reply attempt, gathered before its commit."""

    events: dict[AnchorEvent, float] = field(default_factory=dict)
    error: str | None = None
    """Why the generation failed, if it did."""
    tools: list[ToolCallRecord] = field(default_factory=list)

    def first(self, event: AnchorEvent, at_ms: float) -> None:
        self.events.setdefault(event, at_ms)


class TurnTraceObserver:
    def __init__(self, tracer: LatencyTracer, clock: Clock) -> None:
        self._tracer = tracer
        self._clock = clock
        self._speech_start_ms: float | None = None
        self._vad_speech_end_ms: float | None = None
        self._replies: dict[int, _ReplyEvents] = {}
        self._stt_error: str | None = None
        """Why the last utterance could not be transcribed, for the turn that answers it."""
        self._reply_texts: dict[int, str] = {}
        """What the generator said for each reply attempt: the committed one is recorded."""
        self._committed: int | None = None
        self._last_committed = -1
        """The latest reply committed. Replies are numbered in the order they start, so one
        numbered at or below it that is not ``_committed`` has had its turn closed, or was
        dropped before that commit: a frame of it has no turn left to go into."""
        self._committed_speech_start: float | None = None
        self._backchannels = 0
        """Caller sounds over the committed reply that did not interrupt it."""
        self._discarded: list[SpeculationDiscardedFrame] = []
        self._discard_ids: set[int] = set()
        """Thrown-away work, written into the next committed turn (the one it was for)."""

    def on_frame(self, source: str, frame: Frame) -> None:
        now = self._clock.now_ms()
        match frame:
            case SpeechStartFrame() if source == "vad" and self._speech_start_ms is None:
                self._speech_start_ms = frame.at_ms
            case EndpointFrame() if source == "vad":
                self._vad_speech_end_ms = frame.speech_end_ms
            case TranscriptFailedFrame() if source == "stt":
                self._stt_error = frame.reason
            case TextPieceFrame() if source == "turn":
                self._reply_event(frame.reply_index, A.LLM_FIRST_EMIT, frame.at_ms)
                texts = self._reply_texts
                texts[frame.reply_index] = texts.get(frame.reply_index, "") + frame.text
                if frame.error is not None:
                    self._reply_error(frame.reply_index, frame.error)
            case EndOfReplyFrame() if source == "turn":
                self._reply_event(frame.reply_index, A.LLM_DONE, now)
            case ToolCallFrame() if source == "turn":
                self._tool_call(frame)
            case AudioOutFrame() if source == "tts":
                self._reply_event(frame.reply_index, A.TTS_FIRST_AUDIO, now)
            case AudioOutFrame() if source == "playout":
                self._reply_event(frame.reply_index, A.AUDIO_OUT_FIRST, now)
            case EndOfReplyFrame() if source == "playout" and frame.reply_index == self._committed:
                self._close()
            case TurnCommittedFrame() if source == "turn":
                self._commit(frame)
            case TurnWithdrawnFrame() if source == "turn" and frame.reply_index == self._committed:
                # Committed too early: the caller went on. Kept, marked, out of the latencies;
                # a reply heard for a moment before it yielded is still talked over.
                self._tracer.annotate("withdrawn", True)
                if frame.heard_ms > 0:
                    self._tracer.annotate("yielded_after_ms", round(frame.heard_ms, 1))
                self._close()
                self._speech_start_ms = self._committed_speech_start
            case BargeInFrame() if source == "turn" and frame.reply_index == self._committed:
                self._tracer.mark(A.INTERRUPTED, frame.at_ms)
                self._tracer.annotate("heard", frame.spoken_text)
                self._close()
                self._speech_start_ms = frame.at_ms
            case BackchannelFrame() if source == "turn":
                # Not an interruption: the reply went on, and the sound began no turn.
                if frame.reply_index == self._committed:
                    self._backchannels += 1
                    self._tracer.annotate("backchannels", self._backchannels)
                self._speech_start_ms = None
            case SpeculationDiscardedFrame() if frame.frame_id not in self._discard_ids:
                # Every later stage hands the frame on; it is one piece of work.
                self._discard_ids.add(frame.frame_id)
                self._discarded.append(frame)
            case _:
                pass

    def close(self) -> None:
        self._close()
        self._write_discarded()  # work for a turn that never came, and replies never committed
        self._tracer.end_turn()

    def _commit(self, frame: TurnCommittedFrame) -> None:
        self._close()
        self._committed = self._last_committed = frame.reply_index
        reply = self._replies.pop(frame.reply_index, _ReplyEvents())
        tracer = self._tracer
        if self._speech_start_ms is not None:
            tracer.mark(A.USER_SPEECH_START, self._speech_start_ms)
        tracer.mark(A.USER_SPEECH_END, frame.speech_end_ms)
        tracer.mark(A.ENDPOINT, frame.at_ms)
        tracer.mark(A.STT_FINAL, frame.transcript_at_ms)
        self._write_discarded()  # with the other attempts, which were dropped
        tracer.annotate("reply_index", frame.reply_index)
        tracer.annotate("transcript", frame.user_text)
        if self._vad_speech_end_ms is not None:
            tracer.annotate("vad_speech_end_ms", self._vad_speech_end_ms)
        if frame.end_of_turn_p is not None:
            tracer.annotate("end_of_turn_p", round(frame.end_of_turn_p, 4))
            tracer.annotate("end_of_turn_wait_ms", round(frame.wait_ms, 1))
            tracer.annotate("end_of_turn_scored_ms", round(frame.scored_ms, 1))
        for event, at_ms in reply.events.items():
            tracer.mark(event, at_ms)
        for record in reply.tools:
            tracer.tool_call(record)
        if reply.error is not None:
            tracer.annotate("llm_error", reply.error)
        if self._stt_error is not None:
            tracer.annotate("stt_error", self._stt_error)
            self._stt_error = None
        self._reply_texts = {
            index: text for index, text in self._reply_texts.items() if index >= frame.reply_index
        }
        self._committed_speech_start = self._speech_start_ms
        self._speech_start_ms = None
        self._backchannels = 0

    def _write_discarded(self) -> None:
        """Thrown-away work into the open turn: the discarded frames, and the tool calls of the
        replies still kept, which were dropped — the committed one has been taken out."""
        for work in self._discarded:
            self._tracer.discard(work.kind, work.started_ms, work.reason, end_ms=work.ended_ms)
        self._discarded.clear()
        for index, reply in self._replies.items():
            for call in reply.tools:
                reason = f"reply {index} dropped ({call.name}: {call.outcome})"
                self._tracer.discard("tool_call", call.start_ms, reason, end_ms=call.end_ms)
        self._replies.clear()

    def _reply_event(self, reply_index: int, event: AnchorEvent, at_ms: float) -> None:
        if reply_index == self._committed:
            current = self._tracer.current
            if current is not None and event not in current.events:
                self._tracer.mark(event, at_ms)
        else:
            self._replies.setdefault(reply_index, _ReplyEvents()).first(event, at_ms)

    def _tool_call(self, frame: ToolCallFrame) -> None:
        record = ToolCallRecord(
            name=frame.tool,
            round=frame.round,
            start_ms=frame.started_ms,
            end_ms=frame.ended_ms,
            outcome=frame.outcome,
            argument_bytes=frame.argument_bytes,
            result_bytes=frame.result_bytes,
        )
        if frame.reply_index == self._committed:
            self._tracer.tool_call(record)
        elif frame.reply_index > self._last_committed:
            self._replies.setdefault(frame.reply_index, _ReplyEvents()).tools.append(record)

    def _reply_error(self, reply_index: int, error: str) -> None:
        if reply_index == self._committed:
            self._tracer.annotate("llm_error", error)
        else:
            self._replies.setdefault(reply_index, _ReplyEvents()).error = error

    def _close(self) -> None:
        if self._committed is not None:
            # The record of the conversation: with `transcript`, what each side said (and, on
            # a barge-in, `heard`: what of the reply the caller heard).
            self._tracer.annotate("reply", self._reply_texts.pop(self._committed, "").strip())
            self._tracer.end_turn()
            self._committed = None
