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
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from cadence.llm.dialogue import Turn
from cadence.llm.emission import TextDecoder

ResultRow = Mapping[str, str]
"""A result's fields by key, every value as text."""

_SLOT = re.compile(r"\[([a-z0-9]+(?: [a-z0-9]+)*)\]")
_UNSAYABLE = frozenset({"true", "false", "none", "null"})
"""Field values never turned into slots: flags, not words a reply says."""


def result_row(text: str) -> dict[str, str]:
    """The fields of a tool result's JSON text as the model reads them: a search result's
    first row, a list's first item, or the object itself; ``{}`` for anything else."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    if isinstance(value, dict) and isinstance(value.get("results"), list):
        value = value["results"][0] if value["results"] else {}
    elif isinstance(value, list):
        value = value[0] if value else {}
    if not isinstance(value, dict):
        return {}
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
    """Decodes a reply's tokens with its slots filled from ``row``: a tokenizer's ``decode``
    that still turns every prefix of the tokens into a prefix of the text, because text
    after an unclosed ``[`` waits until the slot is complete. A slot ``row`` has no value
    for is dropped and counted in ``unfilled`` (the model named a field the result lacks)."""

    def __init__(self, tokenizer: TextDecoder, row: ResultRow) -> None:
        self._tokenizer = tokenizer
        self._row = {"_".join(key.lower().split()): value for key, value in row.items()}
        self.unfilled: set[str] = set()
        """The slots decoded so far that the row could not fill (one filler per reply)."""

    def decode(self, ids: Sequence[int]) -> str:
        text = self._tokenizer.decode(ids)
        opened = text.rfind("[")
        if opened > text.rfind("]"):
            text = text[:opened]
        return _SLOT.sub(self._fill, text)

    def _fill(self, match: re.Match[str]) -> str:
        key = "_".join(match.group(1).split())
        if key in self._row:
            return self._row[key]
        self.unfilled.add(match.group(0))
        return ""
