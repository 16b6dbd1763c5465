"""The conversation as chat-completion messages, and the tools offered with it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cadence.llm.dialogue import Turn
from cadence.llm.tools import ToolChoice, ToolSpec


def chat_messages(system_prompt: str, history: Sequence[Turn]) -> list[dict[str, Any]]:
    """The system prompt (if any), then each turn: the caller's as ``user``, the agent's as
    ``assistant`` (with the tools it called), each call's result as ``tool``. An agent turn
    cut to nothing by a barge-in is left out: the caller heard nothing of it, and some services
    refuse an empty message."""
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*system, *(_message(turn) for turn in history if _is_sent(turn))]


def offered_tools(tools: Sequence[ToolSpec], tool_choice: ToolChoice) -> dict[str, Any]:
    """The request's ``tools`` and ``tool_choice``; neither when there are no tools, as a
    service may refuse a ``tool_choice`` with nothing to choose from."""
    if not tools:
        return {}
    return {"tools": [tool.to_openai() for tool in tools], "tool_choice": tool_choice}


def _is_sent(turn: Turn) -> bool:
    """A result is always sent: the service wants one for each call."""
    return turn.speaker == "tool" or bool(turn.tool_calls or turn.text.strip())


def _message(turn: Turn) -> dict[str, Any]:
    if turn.speaker == "tool":
        return {"role": "tool", "tool_call_id": turn.tool_call_id, "content": turn.text}
    role = "user" if turn.speaker == "user" else "assistant"
    if not turn.tool_calls:
        return {"role": role, "content": turn.text}
    # Calls made before any word: the format wants no content rather than an empty one.
    return {
        "role": role,
        "content": turn.text if turn.text.strip() else None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in turn.tool_calls
        ],
    }
