"""What the page is told while a call runs: the session's events as JSON objects on the
signaling websocket (listed in ``docs/web.md``)."""

from __future__ import annotations

from typing import Any

from cadence.pipeline.events import (
    AgentTextEvent,
    BargeInEvent,
    HangUpEvent,
    ReplyPlayedEvent,
    SessionEvent,
    TraceEvent,
    TranscriptEvent,
    TurnCommittedEvent,
    TurnWithdrawnEvent,
    VoiceActivityEvent,
)
from cadence.pipeline.tracing import (
    ANSWERED_IN_TIME,
    TurnTrace,
    talked_over_by_ms,
    turn_outcome,
)

Event = dict[str, Any]
"""One JSON object sent to the page; ``type`` names it."""


def page_event(event: SessionEvent) -> Event | None:
    """The page's event for a session event, if the page shows it."""
    match event:
        case VoiceActivityEvent(state, at_ms):
            return {"type": "vad", "state": state, "at_ms": at_ms}
        case TranscriptEvent(text, final, _):
            return {"type": "transcript", "final": final, "text": text}
        case AgentTextEvent(reply_index, text):
            return {"type": "agent_text", "reply_index": reply_index, "text": text}
        case TurnCommittedEvent(reply_index, user_text):
            return {
                "type": "turn",
                "state": "committed",
                "reply_index": reply_index,
                "user_text": user_text,
            }
        case TurnWithdrawnEvent(reply_index):
            return {"type": "turn", "state": "withdrawn", "reply_index": reply_index}
        case BargeInEvent(reply_index, heard):
            return {
                "type": "turn",
                "state": "interrupted",
                "reply_index": reply_index,
                "heard": heard,
            }
        case ReplyPlayedEvent(reply_index):
            return {"type": "turn", "state": "played", "reply_index": reply_index}
        case HangUpEvent(reason, _):
            # The agent ended the call: the page shows it, then the socket closes normally.
            return {"type": "hangup", "reason": reason}
        case TraceEvent(trace):
            return trace_event(trace)
        case _:
            return None


def trace_event(trace: TurnTrace) -> Event:
    """A finished turn for the page, with what became of it as the server's reports and
    metrics count it (``pipeline/tracing/outcomes.py``), so that the page shows the same
    outcomes and times the same turns rather than guessing from the anchors."""
    outcome = turn_outcome(trace)
    return {
        "type": "trace",
        "trace": trace.model_dump(mode="json", by_alias=True),
        "outcome": outcome.value,
        "answered_in_time": outcome in ANSWERED_IN_TIME,
        "talked_over_by_ms": talked_over_by_ms(trace),
    }
