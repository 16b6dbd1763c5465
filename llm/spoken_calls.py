"""A reply never speaks a tool call: words that read as a call of an offered tool become that
call, or are dropped and logged.

A model may write a call as words instead of in its call channel — an embedded model that
writes ``FindRestaurants city: San Francisco; cuisine: Italian`` without its ``<call>`` token,
an open-weight model that knows no tools, a service that writes the call in its content.
Spoken, that is gibberish to the caller ("In FindRestaurants city: San Francisco…", heard in
a demo). So every turn generator passes its pieces through :class:`SpokenCallGuard`: from the
first word that is the name of an offered tool (``llm/tool_text.py``'s call format starts with
the method's name) to the end of the reply, nothing is spoken. What was held is read with
:func:`cadence.llm.tool_text.parse_call`; a call that parses, of a tool offered with
``tool_choice: auto``, ends the reply as if the model had made it, and anything else (no field
that parses, ``tool_choice: none``) is dropped with a warning.

Pieces end at word boundaries in every backend (the decoders' ``WordEmitter``, the remote
``WordBuffer``), so a tool's name is never split across two pieces but at the reply's very end,
which is held like the rest. The words before the name are spoken as they were; a tool's name
is an identifier no caller hears in a sentence, so a reply loses nothing else.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncGenerator, Iterator, Sequence
from contextlib import aclosing
from itertools import count, pairwise

from cadence.llm.dialogue import ToolCall
from cadence.llm.emission import ReplyPiece
from cadence.llm.tool_text import ToolTextError, parse_call
from cadence.llm.tools import ToolChoice, ToolSpec

logger = logging.getLogger(__name__)


class SpokenCallGuard:
    """Holds back a reply's words from the first offered tool's name on; see the module."""

    def __init__(
        self, tools: Sequence[ToolSpec], tool_choice: ToolChoice, ids: Iterator[str]
    ) -> None:
        names = sorted({tool.name for tool in tools}, key=len, reverse=True)
        self._name = (
            re.compile(rf"(?<![\w-])(?:{'|'.join(map(re.escape, names))})(?![\w-])")
            if names
            else None
        )
        self._choice = tool_choice
        self._ids = ids
        self._last_ms = 0.0
        self._held: str | None = None
        """The reply's text from the first tool name on (``None``: none seen yet)."""

    def feed(self, piece: ReplyPiece) -> ReplyPiece | None:
        """``piece`` with its words from a tool's name on held back; ``None`` when nothing is
        left of it. A piece that ends the reply with an error or calls (always the last) gets
        the calls read from the held words before its own."""
        self._last_ms = piece.at_ms
        text = self._say(piece.text)
        if piece.error is None and not piece.tool_calls:
            return ReplyPiece(text, piece.at_ms) if text else None
        calls = (*self._calls(), *piece.tool_calls)
        return ReplyPiece(text, piece.at_ms, error=piece.error, tool_calls=calls)

    def finish(self) -> ReplyPiece | None:
        """After the reply's last piece: one more carrying the calls read from the held words
        (stamped with that piece's time), if the reply had no piece of calls or error of its
        own that took them."""
        calls = self._calls()
        return ReplyPiece("", self._last_ms, tool_calls=calls) if calls else None

    def _say(self, text: str) -> str:
        if self._held is not None:
            self._held += text
            return ""
        found = self._name.search(text) if self._name is not None else None
        if found is None:
            return text
        self._held = text[found.start() :]
        return text[: found.start()].rstrip()

    def _calls(self) -> tuple[ToolCall, ...]:
        if self._held is None or self._name is None:
            return ()
        held, self._held = self._held, None
        starts = [m.start() for m in self._name.finditer(held)] + [len(held)]
        calls: list[ToolCall] = []
        for start, end in pairwise(starts):
            text = held[start:end].strip()
            try:
                name, arguments = parse_call(text)
            except ToolTextError as exc:
                logger.warning("a reply wrote a tool call as words; not said, not run: %s", exc)
                continue
            if self._choice != "auto":
                logger.warning("a reply wrote a call where none may be made; not said: %r", text)
                continue
            logger.info("a reply wrote a tool call as words; run as a call: %r", text)
            calls.append(ToolCall(next(self._ids), name, json.dumps(arguments)))
        return tuple(calls)


async def guard_spoken_calls(
    pieces: AsyncGenerator[ReplyPiece, None],
    tools: Sequence[ToolSpec],
    tool_choice: ToolChoice,
    ids: Iterator[str],
) -> AsyncGenerator[ReplyPiece, None]:
    """``pieces`` (one reply) through a :class:`SpokenCallGuard`, each passed on as it comes
    (nothing waits: early emission is kept).
    Closing the result closes ``pieces``."""
    guard = SpokenCallGuard(tools, tool_choice, ids)
    async with aclosing(pieces):
        async for piece in pieces:
            if (out := guard.feed(piece)) is not None:
                yield out
    if (last := guard.finish()) is not None:
        yield last


def spoken_call_ids(prefix: str = "spoken_call") -> Iterator[str]:
    """Ids for the calls read from a reply's words, unique in the generator (one a session)."""
    return (f"{prefix}_{n}" for n in count(1))
