"""What a turn generator is offered: each tool's name, what it is for, and the JSON schema of
its arguments — the chat-completions ``tools`` entry, whatever the backend.

The functions behind the tools, their validation and their running belong to the runtime
(``cadence.pipeline.tools``); a generator only ever sees these descriptions and answers with
``ToolCall``s (``cadence.llm.dialogue``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

ToolChoice = Literal["auto", "none"]
"""``auto``: the model may call any of the tools offered; ``none``: it must answer in words
(the last round, once ``tools.max_rounds`` is reached)."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    """What the model calls it: letters, digits, ``_`` and ``-``, at most 64 characters."""
    description: str
    """What it does and when to use it, in the words the model reads."""
    parameters: dict[str, Any]
    """The JSON schema of its arguments: an object schema."""

    def to_openai(self) -> dict[str, Any]:
        """The entry of the request's ``tools`` list, in the chat-completions format."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }
