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
            return {"type": "trace", "trace": trace.model_dump(mode="json", by_alias=True)}
        case _:
            return None
