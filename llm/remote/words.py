"""Streamed text cut at word boundaries: a service's chunks end anywhere, even inside a word,
and TTS must never be handed half a word."""

from __future__ import annotations

import re

_LAST_SPACE = re.compile(r"\s(?=\S*\Z)")


class WordBuffer:
    """Holds the text after the last whitespace back until more text shows where the word
    ends. A piece ends before the whitespace that starts the next word (as the local
    generators' pieces do), so the pieces concatenate to the text."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str) -> str | None:
        """The complete words that ``text`` completes, or ``None`` while none is."""
        self._held += text
        boundary = _LAST_SPACE.search(self._held)
        if boundary is None or not self._held[: boundary.start()].strip():
            return None
        piece, self._held = self._held[: boundary.start()], self._held[boundary.start() :]
        return piece

    def flush(self) -> str | None:
        """What is still held, at the end of the text (``None`` if it is only whitespace)."""
        rest, self._held = self._held, ""
        return rest if rest.strip() else None
