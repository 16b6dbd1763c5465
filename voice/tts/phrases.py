"""``PhraseSplitter``: cuts streamed reply text into phrases worth synthesizing on their own.

The first phrase is cut early — at the first clause or sentence boundary, or after a few
words — because its length is the caller's wait for the first sound. Later phrases end at
sentence boundaries, or at clause boundaries once they are long enough to sound natural.
A boundary only counts once the text after it has started (a space arrived), so "3." in
"3.5" or "Dr." are never cut.
"""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*\s")
_CLAUSE_END = re.compile(r"[,;:—–]\s|\s[—–]\s")
_ABBREVIATIONS = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "st",
        "jr",
        "sr",
        "prof",
        "vs",
        "etc",
        "e.g",
        "i.e",
        "a.m",
        "p.m",
        "no",
        "approx",
        "dept",
        "inc",
        "ltd",
    ]
)

LATER_CLAUSE_MIN_WORDS = 6
"""A later phrase is cut at a comma only once it has this many words."""


class PhraseSplitter:
    def __init__(self, first_phrase_max_words: int = 6) -> None:
        if first_phrase_max_words < 1:
            raise ValueError("first_phrase_max_words must be at least 1")
        self.first_phrase_max_words = first_phrase_max_words
        self._buffer = ""
        self._emitted = 0

    def feed(self, text: str) -> list[str]:
        """Add streamed text; return the phrases it completed, in order."""
        self._buffer += text
        phrases = []
        while (cut := self._next_cut()) is not None:
            phrase, self._buffer = self._buffer[:cut].strip(), self._buffer[cut:].lstrip()
            if phrase:
                phrases.append(phrase)
                self._emitted += 1
        return phrases

    def flush(self) -> str | None:
        """What is held, as a phrase (``None`` if nothing is): at the end of the reply, or
        where it pauses (a tool runs). Words after a pause start afresh: their first phrase
        is cut short again, so that the caller hears the agent resume soon."""
        phrase, self._buffer = self._buffer.strip(), ""
        self._emitted = 0
        return phrase or None

    def phrases(self, text: str) -> list[str]:
        """``text`` whole, cut as it would be spoken (then the splitter starts afresh)."""
        phrases = self.feed(text)
        if (rest := self.flush()) is not None:
            phrases.append(rest)
        return phrases

    def _next_cut(self) -> int | None:
        buffer = self._buffer
        sentence = next(
            (m.end() for m in _SENTENCE_END.finditer(buffer) if not _is_abbreviation(buffer, m)),
            None,
        )
        clause = next((m.end() for m in _CLAUSE_END.finditer(buffer)), None)
        first = self._emitted == 0
        clause_first = clause is not None and (sentence is None or clause < sentence)
        if clause_first and (first or len(buffer[:clause].split()) >= LATER_CLAUSE_MIN_WORDS):
            return clause
        if sentence is not None:
            return sentence
        if first:
            return _after_words(buffer, self.first_phrase_max_words)
        return None


def _is_abbreviation(text: str, match: re.Match[str]) -> bool:
    words = text[: match.start()].split()
    return bool(words) and match.group().startswith(".") and words[-1].lower() in _ABBREVIATIONS


def _after_words(text: str, count: int) -> int | None:
    """Offset just after the ``count``-th complete word, if ``count`` words are complete."""
    completed = list(re.finditer(r"\S+\s", text))
    return completed[count - 1].end() if len(completed) >= count else None
