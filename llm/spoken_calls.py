"""A reply never speaks a tool call: words that read as a call become that call, or are
dropped and logged.

A model may write a call as words instead of in its call channel — an embedded model that
writes ``FindRestaurants city: San Francisco; cuisine: Italian`` without its ``<call>`` token,
an open-weight model that knows no tools, a service that writes the call in its content.
Spoken, that is gibberish to the caller ("In FindRestaurants city: San Francisco…", heard in
a demo). So every turn generator passes its pieces through :class:`SpokenCallGuard`: from the
first word that starts a call to the end of the reply, nothing is spoken. A call starts at
the name of an offered tool, or — offered or not, for a session that offers no tools still
has a model that learned them — at a method's name written as calls are
(``llm/tool_text.py``): one CamelCase identifier followed by ``key: value``. What was held is
read with :func:`cadence.llm.tool_text.parse_call`; a call that parses, of a tool offered
with ``tool_choice: auto``, ends the reply as if the model had made it, and anything else
(a tool not offered, no field that parses, ``tool_choice: none``) is dropped with a warning.

Pieces end at word boundaries in every backend (the decoders' ``WordEmitter``, the remote
``WordBuffer``), so a call's start is never split across two pieces but at the reply's very
end, which is held like the rest; a CamelCase word waits for the next piece, which says
whether a field follows it. The words before are spoken as they were; a method's name is an
identifier no caller hears in a sentence, so a reply loses nothing else.
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


_METHOD = r"[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+"
"""A method's name as the SGD services spell them: one CamelCase word."""
_WRITTEN_CALL = _METHOD + r"(?= [a-z][a-z ]*:)"
"""The start of a call as the embedded models write one: a method's name, then a field
(``GetRide destination: …``). "McDonald's" has no field after it; "Please confirm:" is no
identifier."""
_CAMEL = re.compile(_METHOD)


def _split_held(text: str) -> tuple[str, str]:
    """``text`` less a CamelCase word at its end — a call may start there, its field still to
    come — and that word (with its space); the text whole and ``""`` otherwise."""
    head, space, last = text.rpartition(" ")
    if _CAMEL.fullmatch(last) is None:
        return text, ""
    return head, space + last


class SpokenCallGuard:
    """Holds back a reply's words from the first call's start on; see the module."""

    def __init__(
        self, tools: Sequence[ToolSpec], tool_choice: ToolChoice, ids: Iterator[str]
    ) -> None:
        self._offered = {tool.name for tool in tools}
        names = sorted(self._offered, key=len, reverse=True)
        offered = "".join(f"{re.escape(name)}|" for name in names)
        self._name = re.compile(rf"(?<![\w-])(?:{offered}{_WRITTEN_CALL})(?![\w-])")
        self._choice = tool_choice
        self._ids = ids
        self._last_ms = 0.0
        self._held: str | None = None
        """The reply's text from the first call's start on (``None``: none seen yet)."""
        self._tail = ""
        """The reply's last word while a call may start at it (CamelCase, no field yet)."""

    def feed(self, piece: ReplyPiece) -> ReplyPiece | None:
        """``piece`` with its words from a tool's name on held back; ``None`` when nothing is
        left of it. A piece that ends the reply with an error or calls (always the last) gets
        the calls read from the held words before its own."""
        self._last_ms = piece.at_ms
        if not piece.text and piece.error is None and not piece.tool_calls:
            return piece  # no words: the reply's progress, passed on
        text = self._say(piece.text)
        if piece.error is None and not piece.tool_calls:
            return ReplyPiece(text, piece.at_ms) if text else None
        text, self._tail = text + self._tail, ""  # the last piece: nothing waits after it
        calls = (*self._calls(), *piece.tool_calls)
        return ReplyPiece(text, piece.at_ms, error=piece.error, tool_calls=calls)

    def finish(self) -> ReplyPiece | None:
        """After the reply's last piece: one more carrying the calls read from the held words
        (stamped with that piece's time) if the reply had no piece of calls or error of its
        own that took them, or the word held back at its end."""
        calls = self._calls()
        tail, self._tail = self._tail, ""
        if calls or tail:
            return ReplyPiece(tail, self._last_ms, tool_calls=calls)
        return None

    def _say(self, text: str) -> str:
        if self._held is not None:
            self._held += text
            return ""
        text, self._tail = self._tail + text, ""
        found = self._name.search(text)
        if found is None:
            said, self._tail = _split_held(text)
            return said
        self._held = text[found.start() :]
        return text[: found.start()].rstrip()

    def _calls(self) -> tuple[ToolCall, ...]:
        if self._held is None:
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
            if self._choice != "auto" or name not in self._offered:
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
