"""Transcript normalisation for word error rate: case, punctuation and number formatting.

References in the speech corpora are lower-case words ("one zero zero zero one nine oh two",
"forty two dollars"); whisper writes "10001 90210" and "$42". Both sides are brought to words
before they are compared: a number of up to three digits is read as a cardinal ("42" → "forty
two"), a longer one or one with a leading zero digit by digit (codes, phone numbers), "oh" as
"zero", and "$N" as "N dollars".
"""

from __future__ import annotations

import re

import jiwer

_DIGIT_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_TEENS = ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
          "eighteen", "nineteen"]  # fmt: skip
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_THOUSANDS_SEPARATOR = re.compile(r"(?<=\d),(?=\d)")
_DOLLARS = re.compile(r"\$(\d+)")
_NUMBER = re.compile(r"\d+")
_NOT_WORD = re.compile(r"[^a-z0-9' ]+")


def normalize_transcript(text: str) -> str:
    text = _THOUSANDS_SEPARATOR.sub("", text.lower())
    text = _DOLLARS.sub(r"\1 dollars", text)
    text = _NUMBER.sub(lambda m: f" {_spoken(m.group())} ", text)
    text = _NOT_WORD.sub(" ", text.replace("-", " "))
    words = ["zero" if word == "oh" else word.strip("'") for word in text.split()]
    return " ".join(word for word in words if word)


def _spoken(digits: str) -> str:
    if len(digits) > 3 or (len(digits) > 1 and digits[0] == "0"):
        return " ".join(_DIGIT_WORDS[int(d)] for d in digits)
    return _cardinal(int(digits))


def _cardinal(n: int) -> str:
    """0-999 in words."""
    if n < 10:
        return _DIGIT_WORDS[n]
    if n < 20:
        return _TEENS[n - 10]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _DIGIT_WORDS[n % 10])
    rest = n % 100
    return f"{_DIGIT_WORDS[n // 100]} hundred" + ("" if rest == 0 else " " + _cardinal(rest))


def word_error_rate(references: list[str], hypotheses: list[str]) -> float:
    """Corpus WER (total edits / total reference words) after normalisation."""
    return float(
        jiwer.wer(
            [normalize_transcript(r) for r in references],
            [normalize_transcript(h) for h in hypotheses],
        )
    )
