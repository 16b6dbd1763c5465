"""What the page is told while a call runs: the session's frames and finished turn traces,
as JSON events on the signaling websocket.

``PageEvents`` is both a frame observer and a trace sink of the session. Observers must not
block the pipeline, so each event is handed to ``post`` (a non-blocking queue in front of the
websocket) as it happens. The events are listed in ``docs/web.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.frames import (
    BargeInFrame,
    EndOfReplyFrame,
    EndpointFrame,
    FinalTranscriptFrame,
    Frame,
    PartialTranscriptFrame,
    PauseStartFrame,
    SpeechResumedFrame,
    SpeechStartFrame,
    TextPieceFrame,
    TurnCommittedFrame,
    TurnWithdrawnFrame,
)
from pipeline.tracing import TurnTrace

Event = dict[str, Any]
"""One JSON object sent to the page; ``type`` names it."""


def frame_event(source: str, frame: Frame) -> Event | None:
    """The page's event for ``frame`` handed on by stage ``source``, if the page shows it."""
    match frame:
        case SpeechStartFrame() | SpeechResumedFrame() if source == "vad":
            return {"type": "vad", "state": "speech", "at_ms": frame.at_ms}
        case PauseStartFrame() if source == "vad":
            return {"type": "vad", "state": "pause", "at_ms": frame.at_ms}
        case EndpointFrame() if source == "vad":
            return {"type": "vad", "state": "endpoint", "at_ms": frame.at_ms}
        case PartialTranscriptFrame() if source == "stt":
            return {"type": "transcript", "final": False, "text": frame.text}
        case FinalTranscriptFrame() if source == "stt":
            return {"type": "transcript", "final": True, "text": frame.text}
        case TextPieceFrame() if source == "turn":
            return {"type": "agent_text", "turn": frame.turn_index, "text": frame.text}
        case TurnCommittedFrame() if source == "turn":
            return {
                "type": "turn",
                "state": "committed",
                "turn": frame.turn_index,
                "user_text": frame.user_text,
            }
        case TurnWithdrawnFrame() if source == "turn":
            return {"type": "turn", "state": "withdrawn", "turn": frame.turn_index}
        case BargeInFrame() if source == "turn":
            return {
                "type": "turn",
                "state": "interrupted",
                "turn": frame.turn_index,
                "heard": frame.spoken_text,
            }
        case EndOfReplyFrame() if source == "playout":
            return {"type": "turn", "state": "played", "turn": frame.turn_index}
        case _:
            return None


class PageEvents:
    """Forwards a session's frames and traces to ``post``."""

    def __init__(self, post: Callable[[Event], None]) -> None:
        self._post = post

    def on_frame(self, source: str, frame: Frame) -> None:
        event = frame_event(source, frame)
        if event is not None:
            self._post(event)

    def write(self, turn: TurnTrace) -> None:
        self._post({"type": "trace", "trace": turn.model_dump(mode="json", by_alias=True)})

    def close(self) -> None:
        """Nothing to release: the call owns the websocket."""
