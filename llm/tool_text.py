"""How the embedded models write a tool call and read its result: one short line of text each.

The embedded models read and write tokens of a 4,096-word vocabulary learned from dialogue,
and a turn holds at most ``max_turn_tokens`` of them; JSON spends most of that on quotes and
braces. So a call is written as the method and its arguments, and a result as how many rows
came back and the first row's fields::

    FindRestaurants city: San Jose; cuisine: American
    10 results: restaurant name: 71 Saint Peter; phone number: 408-971-8523; price range: moderate

Values are copied as they are (entity names, times, prices) after a space, so that they are
the same tokens as in the caller's words — what lets the model copy them into a call, and a
reply repeat them rather than invent them. Keys are written with spaces for underscores, as
words the vocabulary knows. What the runtime exchanges stays the tool API's:
``ToolCall.arguments`` is JSON text, a tool's result is JSON text; this module converts at
the model's edge, in both directions, for training data and for decoding alike.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)

FIELD_SEPARATOR = "; "
"""Between two ``key: value`` fields (a value seldom holds it; one that does has it replaced)."""
KEY_SEPARATOR = ": "


class ToolTextError(ValueError):
    """The model wrote something that is not a call."""


def call_text(name: str, arguments: Mapping[str, Any]) -> str:
    """``name key: value; key: value`` — the arguments in the order given."""
    fields = FIELD_SEPARATOR.join(_field(key, value) for key, value in arguments.items())
    return f"{name} {fields}".strip()


def parse_call(text: str) -> tuple[str, dict[str, str]]:
    """The method and arguments of a call the model wrote (``call_text``'s inverse; every
    value comes back as a string: the tool's schema converts it when the call is run). A
    field that is not ``key: value`` ("time] 12:30", a model's garble) is left out and the
    call stands on the rest (a key written twice keeps its first value); a call with no
    field that parses is refused."""
    name, _, rest = text.strip().partition(" ")
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ToolTextError(f"no tool name at the start of {text!r}")
    arguments: dict[str, str] = {}
    garbled: list[str] = []
    for field in rest.split(FIELD_SEPARATOR.strip()):
        if not field.strip():
            continue
        key, separator, value = field.partition(KEY_SEPARATOR.strip())
        key = "_".join(key.split())
        if not separator or not key.isidentifier():
            garbled.append(field.strip())
        else:
            arguments.setdefault(key, value.strip())
    if garbled and not arguments:
        raise ToolTextError(f"{garbled[0]!r} is not 'key: value' in {text!r}")
    if garbled:  # the call stands on what parses; the tool says what is missing
        logger.info("call %s: left out what is not 'key: value': %s", name, "; ".join(garbled))
    return name, arguments


def result_text(result: str, known: Mapping[str, Any] = {}) -> str:
    """The JSON text of a tool's result as the model reads it. A search result
    (``{"n_results": N, "results": [row, …]}``, what the SGD services return) becomes ``N
    results:`` and the first row, the one an agent offers first; any other object its fields;
    a list its length and first item. Fields that name something come first, and a field
    that repeats a ``known`` argument of the call (same name, same value) is left out: the
    model has it already, and a turn has little room."""
    try:
        value = json.loads(result)
    except json.JSONDecodeError:
        return result.strip()
    if isinstance(value, dict) and isinstance(value.get("results"), list):
        rows = value["results"]
        count = value.get("n_results", len(rows))
        head = f"{count} results"
        return f"{head}: {_fields(rows[0], known)}" if rows else head
    if isinstance(value, list):
        head = f"{len(value)} results"
        return f"{head}: {_fields(value[0], known)}" if value else head
    return _fields(value, known)


def _fields(value: Any, known: Mapping[str, Any]) -> str:
    if not isinstance(value, dict):
        return _value_text(value)
    fields = [
        (key, item)
        for key, item in value.items()
        if key not in known or str(known[key]) != str(item)
    ]
    # Names first: the turn may be cut, and the name is what a reply needs most.
    fields.sort(key=lambda field: "name" not in field[0])
    return FIELD_SEPARATOR.join(_field(key, item) for key, item in fields)


def _field(key: str, value: Any) -> str:
    return f"{key.replace('_', ' ')}{KEY_SEPARATOR}{_value_text(value)}"


def _value_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace(FIELD_SEPARATOR.strip(), ",").strip()
