"""A number read out in groups: the pause after a group is not the end of the turn.

Callers read a phone number as 3-3-4 and a card number as 4-4-4-4, and pause after each
group — the pauses an agent most often cuts into, because the words before them look
finished: "My number is 415." scores 0.84 with the language model, which cannot count digits.
Counting them is what this module does: when the caller's words end with a run of digits (as
numerals, digit words, or whisper's "415-458" and "415. 458."), the number is about a phone or
a card (the caller's words or the agent's question say so), and the run stops where such a
number has a group boundary (3 or 6 digits of ten; 4, 8 or 12 of sixteen), the caller has
more to say.
"""

from __future__ import annotations

import re

_DIGIT_WORDS = {
    "zero": "0", "oh": "0", "o": "0", "one": "1", "two": "2", "three": "3", "four": "4",
    "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9",
}  # fmt: skip
_TOKEN = re.compile(r"[a-z]+|\d+")
_PHONE_CUES = re.compile(r"\b(phone|number|call|reach|contact|cell|mobile|digits)\b")
_CARD_CUES = re.compile(r"\b(card|account|credit|debit)\b")
PHONE_GROUP_ENDS = frozenset({3, 6})
"""Where a ten-digit phone number read 3-3-4 pauses."""
CARD_GROUP_ENDS = frozenset({4, 8, 12})
"""Where a sixteen-digit card number read 4-4-4-4 pauses."""


def trailing_digits(text: str) -> str:
    """The digits the words end with, however whisper wrote them ("415-458", "4 1 5",
    "four one five", "415. 458."); "" if they do not end with a digit."""
    digits: list[str] = []
    for token in reversed(_TOKEN.findall(text.lower())):
        if token.isdigit():
            digits.append(token)
        elif token in _DIGIT_WORDS:
            digits.append(_DIGIT_WORDS[token])
        else:
            break
    return "".join(reversed(digits))


def number_goes_on(text: str, agent_text: str | None = None) -> bool:
    """Whether ``text`` stops inside a phone or card number being read in groups."""
    count = len(trailing_digits(text))
    if count == 0:
        return False
    context = f"{agent_text or ''} {text}".lower()
    if count in PHONE_GROUP_ENDS and _PHONE_CUES.search(context):
        return True
    return count in CARD_GROUP_ENDS and bool(_CARD_CUES.search(context))
