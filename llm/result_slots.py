"""Result slots: how an embedded model says what a tool returned without having to spell it.

A 6 M-parameter model does not copy a rare name, an address or a fare reliably from its
context: trained on the corpus's replies verbatim it writes "$11.02" for 11.08 and names no
service ever returned. So a model that knows tools is trained to write a *slot* where its
reply repeats a field of the latest result — ``How about [restaurant name] in [city]?`` — and
the runtime fills each slot from that result as the words are emitted. The values the caller
hears are then the tool's, by construction; the model only chooses which field to say.

One function writes slots into a turn (``with_slots``: the training data, and the agent's
past turns in every prompt, so the model reads what it was trained on) and one fills them
(``SlotFiller``: what the decoders emit, and the call arguments they parse). The row is the
latest result's first row (``result_row``), the one the model reads (``llm/tool_text.py``).

The caller's own dates and times get no slots (the corpus's agents repeat them in their own
words: "7 in the evening" comes back as "7 pm"), so a model can say one the caller never
gave: "Please confirm: a table at 1:30 pm" to a caller who asked for 7. ``SlotFiller`` says
them back instead: a date ("March 5th") or time ("7 pm") in the reply that the caller never
said and the result does not hold becomes the caller's latest one, as the corpus's agents
write it (``say_date``, ``say_time``). A reply is never held for it longer than a word:
the emitter keeps a trailing number or month back until the next word (``WordEmitter``).
"""

from __future__ import annotations

import calendar
import datetime
import json
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from cadence.llm.dialogue import Turn
from cadence.llm.emission import SLOT_LEADS, TextDecoder
from cadence.llm.spoken_values import SGD_TODAY, SpokenValues, say_date, say_time

ResultRow = Mapping[str, str]
"""A result's fields by key, every value as text."""

_SLOT = re.compile(r"\[([a-z0-9]+(?: [a-z0-9]+)*)\]")
_UNFILLED = "\x00"
"""Stands for a slot that could not be filled until it is taken out with its word."""
_UNFILLED_WITH_LEAD = re.compile(rf"(?:[ \t]+(?:{SLOT_LEADS})\b)?[ \t]*{_UNFILLED}", re.I)
_CONFIRMATION = re.compile(r"\bconfirm", re.IGNORECASE)
_UNSAYABLE = frozenset({"true", "false", "none", "null"})
"""Field values never turned into slots: flags, not words a reply says."""
_COUNTED = frozenset({"party_size", "travelers", "passengers", "group_size"})
"""Slots that count people or things without "number" in their name."""
_MONTHS = "|".join(calendar.month_name[1:])
_SAID_TIME = re.compile(r"\b(\d{1,2})(?::(\d{2}))? ?([ap])(?:m\b|\.m\.)", re.IGNORECASE)
_SAID_DATE = re.compile(rf"\b({_MONTHS}) (\d{{1,2}})(?:st|nd|rd|th)?\b", re.IGNORECASE)


def says_date_or_time(text: str) -> bool:
    """Whether ``text`` says a date ("March 5th") or a time ("7 pm") the way ``SlotFiller``
    checks them."""
    return bool(_SAID_TIME.search(text) or _SAID_DATE.search(text))


class ReplyFacts(NamedTuple):
    """What a reply is bound to say as it is: the latest result's row (its slots are filled
    from it), and the dates and times it may say — the caller's, and any result's."""

    row: ResultRow = MappingProxyType({})
    said: SpokenValues = SpokenValues()
    returned: frozenset[str] = frozenset()
    """Every value of every row the tools returned in the conversation."""


def result_rows(text: str) -> list[dict[str, Any]]:
    """The rows of a tool result's JSON text: a search result's rows, a list's objects, or
    the object itself; none for anything else."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return []
    if isinstance(value, dict) and isinstance(value.get("results"), list):
        value = value["results"]
    return [
        item for item in (value if isinstance(value, list) else [value]) if isinstance(item, dict)
    ]


def result_row(text: str) -> dict[str, str]:
    """The fields of a tool result's JSON text as the model reads them: its first row
    (:func:`result_rows`); ``{}`` for anything else."""
    rows = result_rows(text)
    if not rows:
        return {}
    value = rows[0]
    return {
        str(key): item if isinstance(item, str) else json.dumps(item)
        for key, item in value.items()
        if not isinstance(item, dict | list)
    }


class SlotRows(NamedTuple):
    """What an agent turn's slots are filled from (``{}``: no slots)."""

    words: ResultRow
    """For its words: the latest result's row."""
    calls: ResultRow
    """For its calls' arguments: the fields of that row the caller has not said. A value the
    caller gave stays in the call as the caller's words, the model's to copy, as it must in
    a first call, before any result."""


def returned_values(history: Sequence[Turn]) -> frozenset[str]:
    """Every value of every row of every tool result in ``history``, as text."""
    return frozenset(
        value
        for turn in history
        if turn.speaker == "tool"
        for row in result_rows(turn.text)
        for value in row.values()
        if isinstance(value, str)
    )


def latest_rows(history: Sequence[Turn]) -> list[SlotRows]:
    """For each turn of ``history``, the slot rows of the latest tool result before it
    (empty before the first)."""
    rows: list[SlotRows] = []
    row: dict[str, str] = {}
    said: list[str] = []
    for turn in history:
        unsaid = {k: v for k, v in row.items() if not _found(v, " ".join(said))}
        rows.append(SlotRows(row, unsaid))
        if turn.speaker == "tool":
            row = result_row(turn.text)
        elif turn.speaker == "user":
            said.append(turn.text)
    return rows


def with_slots(text: str, row: ResultRow) -> str:
    """``text`` with every occurrence of a value of ``row`` (a whole word or words, any case)
    replaced by its slot, ``[key words]``; the longest value wins where two overlap."""
    values = {
        value.strip(): key
        for key, value in row.items()
        if len(value.strip()) > 1 and value.strip().lower() not in _UNSAYABLE
    }
    if not values or not text:
        return text
    by_value = {value.lower(): key for value, key in values.items()}
    return _words(*sorted(values, key=len, reverse=True)).sub(
        lambda match: _slot(by_value[match.group(0).lower()]), text
    )


def _words(*values: str) -> re.Pattern[str]:
    """Any of ``values`` as whole words, any case."""
    pattern = "|".join(re.escape(value) for value in values)
    return re.compile(rf"(?<!\w)(?:{pattern})(?!\w)", re.IGNORECASE)


def _found(value: str, text: str) -> bool:
    return bool(value.strip()) and _words(value.strip()).search(text) is not None


def _slot(key: str) -> str:
    """How a field's slot is written: its key's words in brackets."""
    return "[" + " ".join(key.lower().split("_")) + "]"


class SlotFiller:
    """Decodes a reply's tokens with its slots filled from the facts' row and its dates and
    times the caller's: a tokenizer's ``decode`` that still turns every prefix of the tokens
    into a prefix of the text, because text after an unclosed ``[`` waits until the slot is
    complete (and a date or time is only changed once it is whole). A slot names a field of
    the row, or the one field whose name has all its words ("[name]": ``restaurant_name``);
    a date, time or count the row lacks is the caller's latest ("[time]" before the booking
    that returns one: "7 pm"); any other the row has no value for is dropped and counted in
    ``unfilled`` (the model named a field the result lacks); a date or time changed is
    counted in ``said_back``."""

    def __init__(self, tokenizer: TextDecoder | None, facts: ReplyFacts) -> None:
        """``tokenizer``: ``None`` for a filler of text only (:meth:`fill`)."""
        self._tokenizer = tokenizer
        self._row = {"_".join(key.lower().split()): value for key, value in facts.row.items()}
        self._said = facts.said
        returned = {*facts.row.values(), *facts.returned}
        self._known_times = {*facts.said.times, *returned}
        self._known_dates = {*facts.said.dates, *returned}
        self.unfilled: set[str] = set()
        """The slots decoded so far that the row could not fill (one filler per reply)."""
        self._asked: list[str] = []
        """The unfilled slots' fields in the order the reply named them, as a question
        names them ("[restaurant name]": "restaurant")."""
        self.said_back: set[str] = set()
        """The dates and times the reply said that the caller had not (one per reply)."""

    def decode(self, ids: Sequence[int]) -> str:
        if self._tokenizer is None:
            raise TypeError("a filler without a tokenizer fills text only")
        text = self._tokenizer.decode(ids)
        opened = text.rfind("[")
        if opened > text.rfind("]"):
            text = text[:opened]
        return self.fill(text)

    def fill(self, text: str) -> str:
        """``text`` with its slots filled and its dates and times the caller's; a slot that
        cannot be filled is taken out with the word it follows ("… a table at [restaurant
        name] at 7 pm" → "… a table at 7 pm"): no caller hears a gap."""
        text = _UNFILLED_WITH_LEAD.sub("", _SLOT.sub(self._fill, text))
        if self._said.times:
            text = _SAID_TIME.sub(self._time, text)
        if self._said.dates:
            text = _SAID_DATE.sub(self._date, text)
        return text

    def _time(self, match: re.Match[str]) -> str:
        hour, minutes = int(match[1]), int(match[2] or 0)
        if not (1 <= hour <= 12 and minutes < 60):
            return match[0]
        hour = hour % 12 + (12 if match[3].lower() == "p" else 0)
        if f"{hour:02d}:{minutes:02d}" in self._known_times:
            return match[0]
        self.said_back.add(match[0])
        return say_time(self._said.times[-1])

    def _date(self, match: re.Match[str]) -> str:
        month = list(calendar.month_name).index(match[1].capitalize())
        try:
            said = datetime.date(SGD_TODAY.year, month, int(match[2])).isoformat()
        except ValueError:
            said = ""
        if said in self._known_dates:
            return match[0]
        self.said_back.add(match[0])
        return say_date(self._said.dates[-1])

    def _fill(self, match: re.Match[str]) -> str:
        words = match.group(1).split()
        key = "_".join(words)
        if key in self._row:
            return self._row[key]
        # A slot of another service's field name ("[name]" for "restaurant name") is the
        # row's one field whose name has all its words.
        having = [k for k in self._row if set(words) <= set(k.split("_"))]
        if len(having) == 1:
            return self._row[having[0]]
        # A date, time or count the result lacks is the caller's, said back.
        if "date" in words and self._said.dates:
            return say_date(self._said.dates[-1])
        if "time" in words and self._said.times:
            return say_time(self._said.times[-1])
        if ("number" in words or key in _COUNTED) and self._said.counts:
            return self._said.counts[-1]
        if match.group(0) not in self.unfilled:
            self._asked.append(" ".join(w for w in words if w != "name") or "name")
        self.unfilled.add(match.group(0))
        return _UNFILLED

    def ending(self, text: str) -> str:
        """What the finished reply ``text`` ends with: a confirmation that could not say
        every field it named asks for them ("Which restaurant and city should it be?") —
        the caller is asked, not told a booking with a gap."""
        if not self.unfilled or not _CONFIRMATION.search(text):
            return ""
        fields = list(dict.fromkeys(self._asked))
        listed = fields[0] if len(fields) == 1 else ", ".join(fields[:-1]) + " and " + fields[-1]
        return f"{' ' if text and not text.endswith(' ') else ''}Which {listed} should it be?"
