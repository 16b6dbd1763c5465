"""``PhraseSplitter``: cuts streamed reply text into phrases worth synthesizing on their own.

The first phrase is cut early — at the first clause or sentence boundary, or within its first
few words — because its length is the caller's wait for the first sound. Cut by its length,
it ends where a spoken phrase would: before the last conjunction, preposition or relative word
within those words ("I found ten events | for you to pick from"), else after them. Later
phrases end at sentence boundaries, or at clause boundaries once they are long enough to sound
natural.
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

FIRST_PHRASE_MAX_WORDS = 4
"""The first phrase's length when no clause ends it sooner: Piper synthesizes four words in
68 ms, six in 80; at one call on the Twilio path, the first audio came p95 136 ms after the
first words with four and 215 with six (docs/cpu-budget.md). hibari, the default voice since,
takes 25, 28 and 32 ms of CPU for three, four and six words: four stays, since the length now
costs the generator's time for the extra words, not the voice's (docs/voice.md)."""

LATER_CLAUSE_MIN_WORDS = 6
"""A later phrase is cut at a comma only once it has this many words."""

FIRST_PHRASE_MIN_WORDS = 3
"""A first phrase cut by its length keeps at least this many words."""

PHRASE_STARTS = frozenset(
    [
        "and",
        "but",
        "or",
        "so",
        "because",
        "for",
        "with",
        "at",
        "in",
        "on",
        "to",
        "from",
        "of",
        "about",
        "by",
        "near",
        "until",
        "before",
        "after",
        "that",
        "which",
        "who",
        "whom",
        "whose",
        "where",
        "when",
        "while",
        "if",
        "than",
    ]
)
"""Words a spoken phrase starts with: a first phrase cut by its length ends before one."""


class PhraseSplitter:
    def __init__(self, first_phrase_max_words: int = FIRST_PHRASE_MAX_WORDS) -> None:
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
            return _first_phrase_cut(buffer, self.first_phrase_max_words)
        return None


def _is_abbreviation(text: str, match: re.Match[str]) -> bool:
    words = text[: match.start()].split()
    return bool(words) and match.group().startswith(".") and words[-1].lower() in _ABBREVIATIONS


def _first_phrase_cut(text: str, max_words: int) -> int | None:
    """Once ``max_words`` words are complete: the offset before the last phrase-starting word
    that leaves at least ``FIRST_PHRASE_MIN_WORDS`` before it, else after the ``max_words``-th
    word."""
    completed = list(re.finditer(r"\S+\s", text))
    if len(completed) < max_words:
        return None
    for index in range(max_words - 1, FIRST_PHRASE_MIN_WORDS - 1, -1):
        word = completed[index].group().strip().lower()
        if word in PHRASE_STARTS:
            return completed[index].start()
    return completed[max_words - 1].end()
