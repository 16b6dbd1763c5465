"""``ground_call``: a service call's arguments grounded in the conversation — each value one the
caller said or a service returned, never one the model made up.

A small model picks the right method far more often than it copies the caller's values into
it: asked for American food in San Jose at 7 pm, it searched for Italian food in Oakland;
asked to book what the search found, it left the name empty (docs/llm.md). The SGD services
therefore read each argument against what was said and returned before they run
(:mod:`cadence.pipeline.tools.sgd_services`), as a service with its own language
understanding would. For each argument, in this order:

1. ``dontcare``, a flag (``True``/``False``) and a value the conversation holds — said by the
   caller in those words, returned by a service, or read from the caller's words as the
   service writes it (:func:`read_spoken_values`: "next Tuesday" is ``2019-03-05``) — stand;
   but not a piece of a longer candidate ("San" when the caller said "San Jose"), and of a
   date, time or count only the latest said or returned: a caller who asks for tickets "on
   March 5th" after the search offered an event on the 14th is not booked for the 14th.
2. Otherwise the slot's **candidates** in the conversation are the values of that slot the
   caller said (a date, a time or a count read from their words; a value of the slot's schema
   or of the service's catalogue, "San Jose", "American", named in their words) and, for a
   slot without a schema's list of values, those the services' results returned for it; a
   value another argument of the call already has is not one (a trip's origin is not its
   destination). The latest candidate replaces the model's value. A result's rows count
   from the last to the first, so of one result its first row (the one the agent offered)
   is the latest.
3. With no candidate, a value of the slot's schema (a ride type the caller never chose: the
   model's default) stands; any other value stands too but is reported **ungrounded** — the
   caller never said it and no service returned it.

What this does not do: find a value the caller said that no catalogue lists ("take me to The
Villa") when the model wrote another; that needs the model to copy it.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cadence.llm.dialogue import Turn
from cadence.llm.result_slots import result_rows
from cadence.llm.spoken_values import MAX_COUNT, SpokenValues, read_spoken_values

DONT_CARE = "dontcare"
FLAGS = frozenset({"True", "False"})
MAX_VALUE_WORDS = 8
"""Catalogue values are looked for in the caller's words up to this many words long."""
WORD = re.compile(r"[\w$]+(?:['’.][\w]+)*")


@dataclass(frozen=True)
class SlotKind:
    """How a slot's values are read from the caller's words."""

    spoken: Callable[[SpokenValues], tuple[str, ...]] | None
    """Dates, times or counts read from the words; ``None``: values named in the words."""
    names: dict[str, str] = field(default_factory=dict)
    """Values named in the words (the schema's and the catalogue's): normalised → as written."""


@dataclass(frozen=True)
class GroundedCall:
    arguments: dict[str, str]
    """The arguments to run the call with."""
    replaced: dict[str, tuple[str, str]]
    """Slot → (the model's value, the one from the conversation)."""
    ungrounded: tuple[str, ...]
    """Slots whose value nobody said and no service returned (left as the model wrote it)."""


def slot_kind(slot: str, schema_values: Sequence[str], catalogue_values: Iterable[str]) -> SlotKind:
    """How ``slot`` is read: a date, a time, a count (a schema of numbers only), or a value
    named in the words (its schema's and catalogue's values)."""
    if "date" in slot:
        return SlotKind(lambda spoken: spoken.dates)
    if "time" in slot:
        return SlotKind(lambda spoken: spoken.times)
    if schema_values and all(v.isdigit() and int(v) <= MAX_COUNT for v in schema_values):
        return SlotKind(lambda spoken: spoken.counts)
    names = {normalise(v): v for v in (*catalogue_values, *schema_values) if _nameable(v)}
    return SlotKind(None, names)


def ground_call(
    arguments: dict[str, str],
    kinds: dict[str, SlotKind],
    schema_values: Mapping[str, Sequence[str]],
    conversation: Sequence[Turn],
    today: datetime.date,
) -> GroundedCall:
    """``arguments`` grounded in ``conversation`` (the rules in the module's docstring);
    ``kinds`` says how each slot is read (:func:`slot_kind`)."""
    said = [turn.text for turn in conversation if turn.speaker == "user"]
    spoken_words = " " + " ".join(normalise(text) for text in said) + " "
    returned = [
        row for turn in conversation if turn.speaker == "tool" for row in result_rows(turn.text)
    ]
    returned_values = {normalise(str(v)) for row in returned for v in row.values()}
    spoken = [read_spoken_values(text, today) for text in said]
    grounded: dict[str, str] = {}
    replaced: dict[str, tuple[str, str]] = {}
    ungrounded: list[str] = []
    for slot, value in arguments.items():
        kind = kinds.get(slot)
        wanted = normalise(value)
        if kind is None or wanted == DONT_CARE or value in FLAGS:
            grounded[slot] = value
            continue
        others = {normalise(v) for k, v in arguments.items() if k != slot}
        schema = schema_values.get(slot, ())
        candidates = [
            c
            for c in _candidates(slot, kind, conversation, spoken, results=not schema)
            if normalise(c) not in others
        ]
        named = {normalise(c) for c in candidates}
        if kind.spoken is not None and candidates:
            named = {normalise(candidates[-1])}  # a date, time or count: the latest one said
        fragment = any(f" {wanted} " in f" {c} " and wanted != c for c in named)
        if wanted and (
            wanted in named
            or (
                kind.spoken is None
                and not fragment  # "San" of "San Jose"
                and (f" {wanted} " in spoken_words or wanted in returned_values)
            )
        ):
            grounded[slot] = value
        elif candidates:
            grounded[slot] = candidates[-1]
            replaced[slot] = (value, candidates[-1])
        else:
            grounded[slot] = value
            if value not in schema:
                ungrounded.append(slot)
    return GroundedCall(grounded, replaced, tuple(ungrounded))


def normalise(text: str) -> str:
    """Lower case, words only: how values are compared."""
    return " ".join(WORD.findall(text.lower()))


def _candidates(
    slot: str,
    kind: SlotKind,
    conversation: Sequence[Turn],
    spoken: list[SpokenValues],
    *,
    results: bool,
) -> list[str]:
    """The slot's values in the conversation, oldest first: said, and returned if
    ``results``."""
    found: list[str] = []
    said = iter(spoken)
    for turn in conversation:
        if turn.speaker == "user":
            values = next(said)
            if kind.spoken is not None:
                found += kind.spoken(values)
            else:
                found += _named(normalise(turn.text), kind)
        elif turn.speaker == "tool" and results:
            found += [str(row[slot]) for row in reversed(result_rows(turn.text)) if row.get(slot)]
    return found


def _named(words: str, kind: SlotKind) -> list[str]:
    """The slot's values named in ``words``, in the order named; of overlapping ones the
    longest."""
    tokens = words.split()
    found: list[tuple[int, int, str]] = []
    for start in range(len(tokens)):
        for length in range(min(MAX_VALUE_WORDS, len(tokens) - start), 0, -1):
            phrase = " ".join(tokens[start : start + length])
            if phrase in kind.names:
                found.append((start, start + length, kind.names[phrase]))
                break
    kept: list[str] = []
    end = 0
    for start, stop, value in found:
        if start >= end:
            kept.append(value)
            end = stop
    return kept


def _nameable(value: str) -> bool:
    """A value worth looking for in words: not a flag, not one or two letters."""
    return value not in FLAGS and len(normalise(value)) > 2
