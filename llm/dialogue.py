"""``Turn``: one speaker's turn of a conversation, the unit every turn generator reads — and
``ToolCall``, a tool the agent called in the middle of its turn.

A conversation with tools follows the chat-completions shape: an agent turn may end with
``tool_calls``; each call's result follows as a ``tool`` turn naming the call, and the agent
speaks again after them. A model that does not know tools (the embedded ones, for now) reads
only the words (:func:`spoken_turns`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Speaker = Literal["user", "agent", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """A tool the model asked to run. ``arguments`` is the JSON text the model wrote, kept as
    it was written: it is validated when the call is run, and sent back verbatim in the
    history, as the chat-completions format wants."""

    id: str
    """Pairs the call with its result (the service's id, or one Cadence made up)."""
    name: str
    arguments: str


@dataclass(frozen=True)
class Turn:
    speaker: Speaker
    text: str
    """The words (a user or agent turn), or the result of a call as JSON text (a tool turn)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """On an agent turn: the tools it called after saying ``text``."""
    tool_call_id: str | None = None
    """On a tool turn: the call whose result ``text`` is."""

    def __post_init__(self) -> None:
        if (self.speaker == "tool") != (self.tool_call_id is not None):
            raise ValueError("a tool turn, and only a tool turn, names the call it answers")
        if self.tool_calls and self.speaker != "agent":
            raise ValueError("only an agent turn calls tools")


def spoken_turns(history: Sequence[Turn]) -> list[Turn]:
    """What was said: tool turns left out, agent turns without their calls, and an agent turn
    that was only a call (no words) dropped — for models that know no tools."""
    return [
        Turn(turn.speaker, turn.text) if turn.tool_calls else turn
        for turn in history
        if turn.speaker != "tool" and (turn.text or not turn.tool_calls)
    ]
