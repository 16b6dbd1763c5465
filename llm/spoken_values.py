"""``read_spoken_values``: the dates, times and counts in what a caller said, written as the
SGD services write them — ``2019-03-12``, ``15:30``, ``2``; and ``say_date``/``say_time``, the
other way, as the corpus's agents say them ("March 12th", "3:30 pm").

Callers say "the 12th of this month", "next Tuesday", "half past 3 in the afternoon", "five
pm", "for two"; a service call names ``2019-03-12``, ``15:30``, ``2``. A model that must turn
one into the other spends what a 6 M-parameter model does not have, so the runtime reads them
(:mod:`cadence.pipeline.tools.grounding`), and the embedded models' replies say the
caller's dates and times back (:mod:`cadence.llm.result_slots`). The phrasings are the
corpus's own, a small closed set: dateparser 1.5.0 was tried first and read "the 7th" as 1
July, "half past six" as 18:00 and "2 at 7 pm tomorrow" as a date without its time.
Measured against the corpus's pairs of what a caller said and what the call then sent
(``sgd_tools_dev``, docs/tools.md).

Dates are read relative to ``today``: a weekday is the first one after it ("next Monday" and
"Monday next week" alike, as the corpus's agents read them), a day of the month without a
month is this month's. A time without am, pm or a part of the day ("at 7") is read both ways.
A number that a date or time used is not a count.
"""

from __future__ import annotations

import calendar
import datetime
import re
from collections.abc import Sequence
from dataclasses import dataclass

from cadence.llm.dialogue import Turn

UNITS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
]  # fmt: skip
TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50}
ORDINAL_UNITS = [
    "zeroth", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
    "ninth", "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth",
    "sixteenth", "seventeenth", "eighteenth", "nineteenth",
]  # fmt: skip
ORDINAL_TENS = {"twentieth": 20, "thirtieth": 30}
MONTHS = {name.lower(): number for number, name in enumerate(calendar.month_name) if name}
WEEKDAYS = {name.lower(): number for number, name in enumerate(calendar.day_name)}
LATER_IN_THE_DAY = {"pm", "afternoon", "evening", "night", "tonight"}
EARLY_IN_THE_DAY = {"am", "morning"}
SGD_TODAY = datetime.date(2019, 3, 1)
"""The day the SGD corpus's dialogues happen (a Friday): the "today" of its services and of
the embedded models trained on it, which say "March 1st" for it."""
MAX_COUNT = 20
"""A larger number is not a party, a number of seats or tickets."""

TOKEN = re.compile(r"\d{1,2}:\d{2}|\d+(?:st|nd|rd|th)?|[a-z]+(?:'[a-z]+)?")


@dataclass(frozen=True)
class SpokenValues:
    """What one utterance says, in the services' forms, in the order it says them."""

    dates: tuple[str, ...] = ()
    times: tuple[str, ...] = ()
    counts: tuple[str, ...] = ()


def read_spoken_values(text: str, today: datetime.date) -> SpokenValues:
    """The dates, times and counts ``text`` says."""
    return _Reader(_tokens(text), today).read()


def said_values(history: Sequence[Turn], today: datetime.date = SGD_TODAY) -> SpokenValues:
    """Every date, time and count the caller said in ``history``, oldest first."""
    said = [read_spoken_values(t.text, today) for t in history if t.speaker == "user"]
    return SpokenValues(
        dates=tuple(v for values in said for v in values.dates),
        times=tuple(v for values in said for v in values.times),
        counts=tuple(v for values in said for v in values.counts),
    )


def say_date(value: str) -> str:
    """``2019-03-12`` as an agent says it: "March 12th"."""
    date = datetime.date.fromisoformat(value)
    day = date.day
    suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{calendar.month_name[date.month]} {day}{suffix}"


def say_time(value: str) -> str:
    """``15:30`` as an agent says it: "3:30 pm" ("12 pm" for noon)."""
    hour, minutes = (int(part) for part in value.split(":"))
    clock = f"{(hour - 1) % 12 + 1}" + (f":{minutes:02d}" if minutes else "")
    return f"{clock} {'pm' if hour >= 12 else 'am'}"


def _tokens(text: str) -> list[str]:
    text = text.lower().replace("a.m.", "am").replace("p.m.", "pm")
    text = re.sub(r"""o["'’]?\s?clock""", " oclock ", text)
    text = re.sub(r"(\d)(am|pm)\b", r"\1 \2", text)
    return TOKEN.findall(text.replace("-", " "))


class _Reader:
    """One pass over an utterance's tokens; what a date or time used is used up."""

    def __init__(self, tokens: list[str], today: datetime.date) -> None:
        self.tokens = tokens
        self.today = today
        self.used = [False] * len(tokens)
        self.dates: list[tuple[int, str]] = []
        self.times: list[tuple[int, str]] = []

    def read(self) -> SpokenValues:
        for i in range(len(self.tokens)):
            if not self.used[i]:
                self._date_at(i)
        for i in range(len(self.tokens)):
            if not self.used[i]:
                self._time_at(i)
        counts = []
        for i in range(len(self.tokens)):
            number = _number(self.tokens, i)
            if not self.used[i] and number is not None and number[0] <= MAX_COUNT:
                counts.append(str(number[0]))
        return SpokenValues(
            dates=tuple(value for _, value in sorted(self.dates)),
            times=tuple(value for _, value in sorted(self.times)),
            counts=tuple(counts),
        )

    def _word(self, i: int) -> str:
        return self.tokens[i] if 0 <= i < len(self.tokens) else ""

    def _unused_word(self, i: int) -> str:
        """The word at ``i`` unless a date or time has it ("evening" after "5 in the")."""
        return "" if 0 <= i < len(self.used) and self.used[i] else self._word(i)

    def _use(self, start: int, end: int) -> None:
        for i in range(start, end):
            self.used[i] = True

    # --- dates --------------------------------------------------------------------------------

    def _date_at(self, i: int) -> None:
        word = self._word(i)
        if word in ("today", "tonight"):
            self._date(i, i + 1, self.today)
        elif word == "tomorrow":
            after = self._word(i - 2) == "day" and self._word(i - 1) == "after"
            self._date(
                i - 2 if after else i, i + 1, self.today + datetime.timedelta(2 if after else 1)
            )
        elif word in WEEKDAYS:
            ahead = (WEEKDAYS[word] - self.today.weekday() - 1) % 7 + 1
            self._date(i, i + 1, self.today + datetime.timedelta(ahead))
        elif (day := _ordinal(self.tokens, i)) is not None:
            ordinal_end = i + day[1]
            month = self.today.month
            if self._word(i - 1) in MONTHS:
                month, i = MONTHS[self._word(i - 1)], i - 1
            elif self._word(ordinal_end) == "of" and self._word(ordinal_end + 1) in MONTHS:
                month, ordinal_end = MONTHS[self._word(ordinal_end + 1)], ordinal_end + 2
            self._day(i, ordinal_end, month, day[0])
        elif word in MONTHS and (number := _number(self.tokens, i + 1)) is not None:
            self._day(i, i + 1 + number[1], MONTHS[word], number[0])

    def _day(self, start: int, end: int, month: int, day: int) -> None:
        try:
            self._date(start, end, datetime.date(self.today.year, month, day))
        except ValueError:
            return

    def _date(self, start: int, end: int, date: datetime.date) -> None:
        self.dates.append((start, date.isoformat()))
        self._use(start, end)

    # --- times --------------------------------------------------------------------------------

    def _time_at(self, i: int) -> None:
        word = self._word(i)
        if word in ("noon", "midday"):
            self._time(i, i + 1, [(12, 0)])
            return
        if word == "midnight":
            self._time(i, i + 1, [(0, 0)])
            return
        if word in ("half", "quarter") and self._word(i + 1) in ("past", "to"):
            number = _number(self.tokens, i + 2)
            if number is None or not 1 <= number[0] <= 12:
                return
            hour, minutes = number[0], 30 if word == "half" else 15
            if self._word(i + 1) == "to":
                hour, minutes = (hour - 2) % 12 + 1, 45
            self._time_with_period(i, i + 3, hour, minutes, explicit=True)
            return
        clock = _clock(self.tokens, i)
        if clock is None:
            return
        hour, minutes, length = clock
        end = i + length
        oclock = self._word(end) == "oclock"
        parts_of_the_day = (*LATER_IN_THE_DAY, *EARLY_IN_THE_DAY)
        explicit = ":" in word or oclock or self._unused_word(i - 1) in parts_of_the_day
        self._time_with_period(i, end + oclock, hour, minutes, explicit=explicit)

    def _time_with_period(
        self, start: int, end: int, hour: int, minutes: int, *, explicit: bool
    ) -> None:
        period, end = self._period(start, end)
        if period is None and not explicit and self._word(start - 1) not in ("at", "around", "by"):
            return
        if period == "later" and hour < 12:
            hours = [hour + 12]
        elif period == "early" and hour == 12:
            hours = [0]
        elif period is not None or hour == 0 or hour >= 12:
            hours = [hour]
        else:
            hours = [hour, hour + 12]
        self._time(start, end, [(h, minutes) for h in hours])

    def _period(self, start: int, end: int) -> tuple[str | None, int]:
        """``later`` (pm) or ``early`` (am) from the words around a time, if they say, and
        where the time's words end."""
        after = [(end + 3, self._word(end + 2))] if self._word(end) == "in" else []
        at_night = self._word(end) == "at" and self._word(end + 1) == "night"
        after += [(end + 2, "night")] if at_night else []
        after += [(end + 1, self._word(end)), (end, self._unused_word(start - 1))]
        for stop, word in after:
            if word in LATER_IN_THE_DAY:
                return "later", stop
            if word in EARLY_IN_THE_DAY:
                return "early", stop
        return None, end

    def _time(self, start: int, end: int, values: list[tuple[int, int]]) -> None:
        for hour, minutes in values:
            if 0 <= hour < 24 and 0 <= minutes < 60:
                self.times.append((start, f"{hour:02d}:{minutes:02d}"))
        self._use(start, min(end, len(self.tokens)))


def _number(tokens: list[str], i: int) -> tuple[int, int] | None:
    """The number at ``tokens[i]`` (digits or words up to 59) and how many tokens it takes."""
    word = tokens[i] if 0 <= i < len(tokens) else ""
    if word.isdigit():
        return int(word), 1
    if word in UNITS:
        return UNITS.index(word), 1
    if word in TENS:
        unit = tokens[i + 1] if i + 1 < len(tokens) else ""
        if unit in UNITS[1:10]:
            return TENS[word] + UNITS.index(unit), 2
        return TENS[word], 1
    return None


def _ordinal(tokens: list[str], i: int) -> tuple[int, int] | None:
    """A day of the month at ``tokens[i]``: "12th", "twelfth", "twenty first"."""
    word = tokens[i]
    if match := re.fullmatch(r"(\d{1,2})(st|nd|rd|th)", word):
        return int(match[1]), 1
    if word in ORDINAL_UNITS[1:]:
        return ORDINAL_UNITS.index(word), 1
    if word in ORDINAL_TENS:
        return ORDINAL_TENS[word], 1
    if word in TENS and i + 1 < len(tokens) and tokens[i + 1] in ORDINAL_UNITS[1:10]:
        return TENS[word] + ORDINAL_UNITS.index(tokens[i + 1]), 2
    return None


def _clock(tokens: list[str], i: int) -> tuple[int, int, int] | None:
    """A time on the clock at ``tokens[i]``: "12:30", "6", "six forty five"; hour, minutes,
    tokens taken."""
    word = tokens[i]
    if match := re.fullmatch(r"(\d{1,2}):(\d{2})", word):
        return int(match[1]), int(match[2]), 1
    hour = _number(tokens, i)
    if hour is None or not 0 <= hour[0] <= 23:
        return None
    minutes = _number(tokens, i + hour[1])
    if minutes is not None and hour[0] <= 12 and tokens[i + hour[1]] in (*TENS, "fifteen"):
        return hour[0], minutes[0], hour[1] + minutes[1]
    return hour[0], 0, hour[1]
