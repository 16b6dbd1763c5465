"""Early emission: turns the growing committed prefix of a reply into text pieces.

A piece ends at a word boundary (before the space that starts the next word), so TTS never
receives half a word; the last piece carries whatever remains once the reply is final. The
pieces concatenate to the reply's text exactly, because byte-level BPE decodes a prefix of
the tokens to a prefix of the text.
"""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from cadence.core.clock import Clock
from cadence.llm.decoding import ReplyStats
from cadence.llm.dialogue import ToolCall
from cadence.llm.tool_text import ToolTextError, parse_call


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


def spoken_part(tokens: Sequence[int], call: int | None) -> Sequence[int]:
    """The tokens of a reply before its first ``<call>``: what is said aloud."""
    if call is None or call not in tokens:
        return tokens
    return tokens[: list(tokens).index(call)]


class CallReader:
    """The tool calls at the end of a finished reply (``<call> method key: value…``, each),
    as the tool API's ``ToolCall``s with JSON arguments; ids are numbered per reader (one per
    conversation), so they pair calls with results across its turns."""

    def __init__(self, call: int | None) -> None:
        self.call = call
        """The ``<call>`` id (``None``: the model knows no tools)."""
        self._count = 0

    def calls(self, tokens: Sequence[int], text: TextDecoder) -> tuple[ToolCall, ...]:
        """The calls in ``tokens``, decoded by ``text`` (the reply's, so that a call fills
        its result slots as the words do); raises ``ToolTextError`` naming what does not
        parse."""
        if self.call is None or self.call not in tokens:
            return ()
        segments: list[list[int]] = []
        for token in tokens[list(tokens).index(self.call) :]:
            if token == self.call:
                segments.append([])
            else:
                segments[-1].append(token)
        calls: list[ToolCall] = []
        for segment in segments:
            name, arguments = parse_call(text.decode(segment))
            self._count += 1
            calls.append(ToolCall(f"call_{self._count}", name, json.dumps(arguments)))
        return tuple(calls)


SLOT_LEADS = "at|in|on|for|from|to|with|of|near|by|the|a|an"
"""Words a result slot follows ("at [restaurant name]", "in [city]"): a slot that cannot be
filled goes with its word (``SlotFiller``)."""
_UNFINISHED = re.compile(
    rf"\b(?:(?:{'|'.join(calendar.month_name[1:])})(?: \d{{1,2}})?|\d{{1,2}}(?::\d{{2}})?"
    rf"|{SLOT_LEADS})$",
    re.IGNORECASE,
)
"""The end of a date or time that the next word may finish ("at 1:30" … "pm", "March" …
"5th"), or a word a slot may follow: held back one word, so that the reply's date or time is
whole before it is said (``SlotFiller`` may say the caller's instead), and a slot that cannot
be filled can take its word with it."""


@runtime_checkable
class Ending(Protocol):
    """A text decoder that may end a reply with words of its own (``SlotFiller``: the
    question for what a confirmation could not say)."""

    def ending(self, text: str) -> str: ...


class WordEmitter:
    def __init__(self, text: TextDecoder, clock: Clock) -> None:
        self.text_decoder = text
        """Turns the reply's tokens into its text (a tokenizer, or a ``SlotFiller`` over one)."""
        self._clock = clock
        self._emitted = 0
        self.text = ""
        """All text emitted so far."""

    def update(self, committed: Sequence[int]) -> ReplyPiece | None:
        """A piece with the complete words of ``committed`` (the reply's contiguous committed
        text tokens) not emitted yet, or ``None``."""
        text = self.text_decoder.decode(committed)
        boundary = text.rfind(" ")
        if (held := _UNFINISHED.search(text, 0, max(boundary, 0))) is not None:
            boundary = len(text[: held.start()].rstrip())  # "1:30" may go on "pm"
        if boundary <= self._emitted:
            return None
        return self._emit(text[:boundary])

    def finish(self, final: Sequence[int]) -> ReplyPiece | None:
        """The remainder of the finished reply ``final`` (and the decoder's ending, if it has
        one), or ``None`` if nothing is left."""
        text = self.text_decoder.decode(final)
        if isinstance(self.text_decoder, Ending):
            text += self.text_decoder.ending(text)
        return self._emit(text) if len(text) > self._emitted else None

    def _emit(self, text: str) -> ReplyPiece:
        piece = ReplyPiece(text[self._emitted :], self._clock.now_ms())
        self._emitted = len(text)
        self.text = text
        return piece


def last_pieces(
    emitter: WordEmitter, stats: ReplyStats, calls: CallReader | None, clock: Clock
) -> Iterator[ReplyPiece]:
    """After the reply's tokens (``stats.token_ids``) are final: the words left unsaid, and
    the tool calls it ends with on the last piece (a call that does not parse ends the
    reply with an ``error`` instead); its text, calls and end time go into ``stats``."""
    tokens = stats.token_ids
    last = emitter.finish(spoken_part(tokens, calls.call if calls else None))
    try:
        stats.tool_calls = calls.calls(tokens, emitter.text_decoder) if calls else ()
    except ToolTextError as exc:
        last = ReplyPiece(last.text if last else "", clock.now_ms(), error=str(exc))
    if stats.tool_calls:
        last = ReplyPiece(last.text if last else "", clock.now_ms(), tool_calls=stats.tool_calls)
    if last is not None:
        stats.first_piece_ms = stats.first_piece_ms or last.at_ms
        yield last
    stats.text = emitter.text
    stats.end_ms = clock.now_ms()
