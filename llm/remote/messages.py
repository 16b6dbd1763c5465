"""The conversation as chat-completion messages."""

from __future__ import annotations

from collections.abc import Sequence

from cadence.llm.dialogue import Turn

_ROLES = {"user": "user", "agent": "assistant"}


def chat_messages(system_prompt: str, history: Sequence[Turn]) -> list[dict[str, str]]:
    """The system prompt (if any), then each turn: the caller's as ``user``, the agent's as
    ``assistant``. An agent turn cut to nothing by a barge-in is left out: the caller heard
    nothing of it, and some services refuse an empty message."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages += [
        {"role": _ROLES[turn.speaker], "content": turn.text}
        for turn in history
        if turn.text.strip()
    ]
    return messages
