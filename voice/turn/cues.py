"""Utterances that are not turns to answer: backchannels, and requests to wait.

A caller who says "uh-huh" while the agent speaks is listening, not interrupting; one who
says "hold on, let me find my card" is asking for silence, not for a reply. Both are told
apart by their words, case and punctuation aside, because whisper writes "Uh-huh." as readily
as "uh huh". The lists are short and closed on purpose: anything that is not clearly one of
these is a turn, which costs at worst a reply the caller did not need, never a question left
unanswered.
"""

from __future__ import annotations

import re

BACKCHANNEL_WORDS = frozenset(
    {
        "ah", "aha", "alright", "cool", "gotcha", "hm", "hmm", "huh", "mhm", "mm", "mmhmm",
        "mmm", "oh", "ok", "okay", "right", "sure", "uh", "uhhuh", "um", "wow", "yeah",
        "yep", "yes", "yup",
    }
)  # fmt: skip
"""Words that, alone or repeated ("yeah yeah", "oh okay"), only say "I'm listening"."""

BACKCHANNEL_PHRASES = frozenset(
    {
        "uh huh", "mm hmm", "m hmm", "i see", "got it", "all right", "that's right", "you",
        "thank you", "thanks",
    }
)  # fmt: skip
"""Short phrases that do the same; "you" and "thank you" are what whisper hears in a cough
or line noise as often as in speech."""

MAX_BACKCHANNEL_WORDS = 3

_HOLD_CLAUSE = "|".join(
    [
        r"(please )?(hold|hang) on( please)?( (a|one) (sec|second|moment|minute))?",
        r"(please )?wait( please)?( (a|one) (sec|second|moment|minute))?",
        r"(just )?(a|one) (sec|second|moment|minute)",
        r"give me (a|one) (sec|second|moment|minute)",
        r"i need (a|one) (sec|second|moment|minute)",
        r"let me (find|get|grab|check|look for|look up|look at) (my|the|it|that|this|our|a)"
        r"( [a-z']+){0,3}",
        r"let me (see|think)",
        r"(please )?(stop talking|be quiet|shut up|quiet|hush|shh+)",
    ]
)
_FILLER = r"sorry|please|um|uh|so|okay|ok|yeah|oh"
_WORD = re.compile(r"[a-z']+")
_HOLD = re.compile(rf"((?:{_FILLER}) )*(?:{_HOLD_CLAUSE})( (?:{_HOLD_CLAUSE}|{_FILLER}))*")


def is_backchannel(text: str) -> bool:
    """Whether ``text`` (a transcript) is only a listener's "go on", or no words at all — a
    cough, a click, line noise."""
    words = _words(text)
    if not words:
        return True
    if len(words) > MAX_BACKCHANNEL_WORDS:
        return False
    phrase = " ".join(words)
    return phrase in BACKCHANNEL_PHRASES or all(
        word in BACKCHANNEL_WORDS or f"{word} {nxt}" in BACKCHANNEL_PHRASES
        for word, nxt in zip(words, [*words[1:], ""], strict=True)
    )


def is_hold_request(text: str) -> bool:
    """Whether ``text`` asks the agent to wait or be quiet, and nothing else: "hold on", "one
    moment, let me find my card", "stop talking". "Hold on, what time do you close?" asks a
    question too, and is a turn."""
    return _HOLD.fullmatch(" ".join(_words(text))) is not None


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("-", " "))
