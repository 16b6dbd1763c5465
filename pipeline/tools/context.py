"""``ToolContext``: what a tool may know of the call it runs in and do to it, handed to a
tool function that declares a parameter of this type."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cadence.llm.dialogue import Turn
from cadence.pipeline.tools.keypad import Keypad


@dataclass(frozen=True)
class ToolContext:
    session_id: str
    """The call (its session's id, which is the transport's call id)."""
    reply_index: int
    """The reply that called the tool."""
    keypad: Keypad
    """The keys the caller pressed, and reads of the ones to come."""
    conversation: Sequence[Turn]
    """The call so far as the model read it: what was said, and what tools returned — the
    reply's earlier rounds and this round's call included."""
    _end_call: Callable[[str], None] = field(repr=False)

    def end_call(self, reason: str = "the agent ended the call") -> None:
        """End the call once the caller has heard the rest of this reply (its goodbye)."""
        self._end_call(reason)
