"""Early emission: turns the growing committed prefix of a reply into text pieces.

A piece ends at a word boundary (before the space that starts the next word), so TTS never
receives half a word; the last piece carries whatever remains once the reply is final. The
pieces concatenate to the reply's text exactly, because byte-level BPE decodes a prefix of
the tokens to a prefix of the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from cadence.core.clock import Clock
from cadence.llm.dialogue import ToolCall


@dataclass(frozen=True)
class ReplyPiece:
    """A piece of the agent's reply, ready for TTS."""

    text: str
    at_ms: float
    """Session-clock time at which the piece was emitted."""
    error: str | None = None
    """Set on the last piece of a reply that failed (a remote service that could not be
    reached, refused, or stalled): why, for the turn's trace. That piece is the fallback
    phrase, or empty when part of the reply had been spoken already."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Set on the last piece of a reply that calls tools: the calls, in order. Its words (the
    pieces before) come first; the runtime runs the calls and asks for the rest."""


class TextDecoder(Protocol):
    """A tokenizer's decoding: any whose prefixes decode to prefixes of the text."""

    def decode(self, ids: Sequence[int]) -> str: ...


class WordEmitter:
    def __init__(self, tokenizer: TextDecoder, clock: Clock) -> None:
        self._tokenizer = tokenizer
        self._clock = clock
        self._emitted = 0
        self.text = ""
        """All text emitted so far."""

    def update(self, committed: Sequence[int]) -> ReplyPiece | None:
        """A piece with the complete words of ``committed`` (the reply's contiguous committed
        text tokens) not emitted yet, or ``None``."""
        text = self._tokenizer.decode(committed)
        boundary = text.rfind(" ")
        if boundary <= self._emitted:
            return None
        return self._emit(text[:boundary])

    def finish(self, final: Sequence[int]) -> ReplyPiece | None:
        """The remainder of the finished reply ``final``, or ``None`` if nothing is left."""
        text = self._tokenizer.decode(final)
        return self._emit(text) if len(text) > self._emitted else None

    def _emit(self, text: str) -> ReplyPiece:
        piece = ReplyPiece(text[self._emitted :], self._clock.now_ms())
        self._emitted = len(text)
        self.text = text
        return piece
