"""The Schema-Guided Dialogue services, served offline: restaurants, hotels, events, flights…
with the real names, addresses and times the SGD corpus's services returned.

Each service of ``tools.services`` (``Restaurants_1``, ``Hotels_3``, …) offers its methods as
tools, named as in the corpus (``FindRestaurants``, ``ReserveRestaurant``) with the
published schema's slots as string parameters — what the embedded models learned to call in
training (``cadence train`` on ``sgd_tools_train``), and what any model that reads tool
descriptions can call too. The data is a catalogue built from the corpora's own results
(``cadence build-sgd-catalogue``), shipped as package data: nothing is fetched.

* A **search** (a method that is not transactional) returns the rows of the catalogue whose
  fields equal every argument given (case and spacing aside; ``dontcare`` matches anything),
  as the corpus's services did: ``{"n_results": N, "results": [the first 5 rows]}``.
* A **transaction** (``ReserveRestaurant``, ``BuyEventTickets``…) "succeeds": it returns one
  row, the arguments with the details of the entity they name filled in from the catalogue
  (the restaurant's address and phone, the event's venue), like the corpus's confirmations;
  one that names a restaurant, event, hotel… the catalogue does not have returns no rows.
  Nothing is booked anywhere.
* Before either, the arguments are **grounded** in the conversation
  (:mod:`cadence.pipeline.tools.grounding`): a city, cuisine, date, time or count the model
  wrote that the caller never said gives way to the one they did say ("next Tuesday" read as
  ``2019-03-05``), and an empty name to the one the last search returned.
* A slot **the caller never gave is asked for, not filled**: a required one the model left
  out (or named as another version of the service does: ``city_of_event``, ignored) is taken
  from the conversation if the caller said it, and otherwise the call does not run — the
  reply asks for it (``AskTheCaller``: "How many seats, and which ride type would you like,
  Pool, Regular or Luxury?"); a required value nobody said and no service returned is asked
  for the same way, and an optional one is left out.

The corpus's world is fixed in time: its "today" is 2019-03-01, and its dates and results
follow from it.
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from pydantic import ConfigDict, Field, create_model

from cadence.llm.dialogue import Turn
from cadence.llm.spoken_values import SGD_TODAY
from cadence.pipeline.tools.context import ToolContext
from cadence.pipeline.tools.grounding import GroundedCall, SlotKind, ground_call, slot_kind
from cadence.pipeline.tools.tool import AskTheCaller, Tool, tool_from_fields

logger = logging.getLogger(__name__)

CATALOGUE = "sgd_services.json.gz"
"""The packaged catalogue (``cadence.pipeline.tools/data``)."""
RESULTS_SHOWN = 5
"""Rows a search returns, as the corpus's services did."""
DONT_CARE = "dontcare"


class ServiceUnavailableError(ValueError):
    """The configuration names a service the catalogue does not have."""


@dataclass(frozen=True)
class ServiceMethod:
    """One method of a service, as its schema publishes it."""

    service: str
    name: str
    description: str
    transactional: bool
    required: tuple[str, ...]
    optional: dict[str, str]
    """Optional slots with their defaults."""
    result_slots: tuple[str, ...]
    slot_descriptions: dict[str, str]
    slot_values: dict[str, tuple[str, ...]]
    """The values a categorical slot takes."""


@dataclass(frozen=True)
class SGDCatalogue:
    """The services' methods and the rows their searches return."""

    methods: dict[str, ServiceMethod]
    """By ``Service.Method``."""
    rows: dict[str, list[dict[str, str]]]
    """Result rows by ``Service.Method``; a transaction's rows are its confirmations."""

    @classmethod
    def read(cls, path: Path | None = None) -> SGDCatalogue:
        """The catalogue at ``path`` (default: the packaged one)."""
        if path is None:
            data = resources.files("cadence.pipeline.tools").joinpath("data", CATALOGUE)
            raw = data.read_bytes()
        else:
            raw = path.read_bytes()
        payload = json.loads(gzip.decompress(raw))
        methods = {
            key: ServiceMethod(
                service=value["service"],
                name=value["name"],
                description=value["description"],
                transactional=value["transactional"],
                required=tuple(value["required"]),
                optional=dict(value["optional"]),
                result_slots=tuple(value["result_slots"]),
                slot_descriptions=dict(value["slot_descriptions"]),
                slot_values={k: tuple(v) for k, v in value["slot_values"].items()},
            )
            for key, value in payload["methods"].items()
        }
        return cls(methods=methods, rows=payload["rows"])

    @property
    def services(self) -> list[str]:
        return sorted({method.service for method in self.methods.values()})

    def service_methods(self, service: str) -> list[ServiceMethod]:
        found = [m for m in self.methods.values() if m.service == service]
        if not found:
            raise ServiceUnavailableError(
                f"tools.services: no service {service!r} in the SGD catalogue "
                f"(it has: {', '.join(self.services)})"
            )
        return found

    def method_named(self, services: Sequence[str], name: str) -> ServiceMethod | None:
        """The method called ``name`` of one of ``services``, if they have one."""
        for service in services:
            if (method := self.methods.get(f"{service}.{name}")) is not None:
                return method
        return None

    def ground(
        self, method: ServiceMethod, arguments: dict[str, str], conversation: Sequence[Turn]
    ) -> GroundedCall:
        """``arguments`` of a call of ``method`` grounded in ``conversation``
        (:func:`ground_call`), as the services run it."""
        key = f"{method.service}.{method.name}"
        if key not in self._slot_kinds:
            values = self._slot_values.get(method.service, {})
            self._slot_kinds[key] = {
                slot: slot_kind(slot, method.slot_values.get(slot, ()), values.get(slot, ()))
                for slot in (*method.required, *method.optional)
            }
        return ground_call(
            arguments, self._slot_kinds[key], method.slot_values, conversation, SGD_TODAY
        )

    @functools.cached_property
    def _slot_kinds(self) -> dict[str, dict[str, SlotKind]]:
        """``Service.Method`` → how each slot is read, filled as methods are grounded."""
        return {}

    @functools.cached_property
    def _slot_values(self) -> dict[str, dict[str, set[str]]]:
        """Service → slot → the values its rows hold."""
        found: dict[str, dict[str, set[str]]] = {}
        for key, rows in self.rows.items():
            slots = found.setdefault(key.split(".")[0], {})
            for row in rows:
                for slot, value in row.items():
                    slots.setdefault(slot, set()).add(value)
        return found

    def search(self, method: ServiceMethod, arguments: dict[str, str]) -> dict[str, Any]:
        """The rows of ``method`` that match every argument given."""
        wanted = {k: _norm(v) for k, v in arguments.items() if v and _norm(v) != DONT_CARE}
        rows = [
            row
            for row in self.rows.get(f"{method.service}.{method.name}", [])
            if all(_norm(row.get(k, "")) == v for k, v in wanted.items() if k in row)
        ]
        return {"n_results": len(rows), "results": rows[:RESULTS_SHOWN]}

    def transact(self, method: ServiceMethod, arguments: dict[str, str]) -> dict[str, Any]:
        """The confirmation of a transaction: the arguments, with the details of the entity
        they name taken from the row of the service that agrees with the most of them. A
        transaction that names something (``restaurant_name``, ``event_name``…) the
        catalogue does not have fails as the corpus's services did: no rows; so does one
        that leaves a required argument empty (a model's slot its context could not fill)."""
        given = {k: v for k, v in arguments.items() if v.strip()}
        if any(slot not in given for slot in method.required):
            return {"n_results": 0, "results": []}
        entity: dict[str, str] = {}
        agreeing = 0  # the row that agrees with the most arguments wins
        for key, rows in self.rows.items():
            if not key.startswith(f"{method.service}."):
                continue
            for row in rows:
                shared = [k for k in given if k in row]
                if len(shared) > agreeing and all(_norm(row[k]) == _norm(given[k]) for k in shared):
                    entity, agreeing = row, len(shared)
        if any("name" in k and k not in entity for k in given):
            return {"n_results": 0, "results": []}
        confirmed = {
            slot: given.get(slot, entity.get(slot, ""))
            for slot in method.result_slots
            if slot in given or slot in entity
        }
        return {"n_results": 1, "results": [confirmed]}


@functools.cache
def packaged_catalogue() -> SGDCatalogue:
    """The packaged catalogue, read once per process."""
    return SGDCatalogue.read()


def sgd_service_tools(services: Sequence[str], catalogue: SGDCatalogue | None = None) -> list[Tool]:
    """The tools of ``services`` (their methods), served from ``catalogue``."""
    catalogue = catalogue or packaged_catalogue()
    return [
        _method_tool(method, catalogue)
        for service in services
        for method in catalogue.service_methods(service)
    ]


def _method_tool(method: ServiceMethod, catalogue: SGDCatalogue) -> Tool:
    fields: dict[str, Any] = {}
    for slot in (*method.required, *method.optional):
        described = Field(
            description=method.slot_descriptions.get(slot, slot.replace("_", " ")),
            examples=list(method.slot_values.get(slot, ())) or None,
        )
        fields[slot] = (Annotated[str, described], method.optional.get(slot, ...))

    async def run(context: ToolContext, **given: str | None) -> dict[str, Any]:
        arguments = {slot: value for slot, value in given.items() if value is not None}
        arguments |= {slot: "" for slot in method.required if not arguments.get(slot)}
        grounded = catalogue.ground(method, arguments, context.conversation)
        if grounded.replaced or grounded.ungrounded:
            logger.info(
                "%s: %s grounded: %s; not said nor returned: %s",
                context.session_id,
                method.name,
                ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in grounded.replaced.items()),
                ", ".join(grounded.ungrounded) or "none",
            )
        unknown = set(grounded.ungrounded)
        missing = [s for s in method.required if s in unknown or not grounded.arguments[s]]
        if missing:
            raise AskTheCaller(question(missing, method.slot_values))
        kept = {k: v for k, v in grounded.arguments.items() if k not in unknown}
        if method.transactional:
            return catalogue.transact(method, kept)
        return catalogue.search(method, kept)

    strict = tool_from_fields(
        run,
        method.name,
        f"{method.description} ({method.service}).",
        fields,
        "context",
        read_only=not method.transactional,
    )
    # The schema offered says what is required; the call is read leniently (a slot left out
    # is asked for, one of another version's name ignored), so that the caller is asked
    # rather than the model told "invalid arguments", which it was never trained to read.
    given: dict[str, Any] = {slot: (str | None, None) for slot in method.required}
    given |= {slot: (str | None, default) for slot, default in method.optional.items()}
    lenient = create_model(f"{method.name}_given", __config__=ConfigDict(extra="ignore"), **given)
    return replace(strict, arguments=lenient)


def question(slots: Sequence[str], values: dict[str, tuple[str, ...]]) -> str:
    """One question for ``slots``, in the order given: "How many seats, and which ride type
    would you like, Pool, Regular or Luxury?" (a schema's few values are offered; never
    ``ride type:``, which reads as a call)."""
    asked = [_asking(slot, values.get(slot, ())) for slot in slots]
    joined = asked[0] if len(asked) == 1 else ", ".join(asked[:-1]) + ", and " + asked[-1]
    return joined[0].upper() + joined[1:] + "?"


def _asking(slot: str, values: Sequence[str]) -> str:
    words = slot.split("_")
    if words[:2] == ["number", "of"]:
        return "how many " + " ".join(words[2:])
    if slot in ("party_size", "travelers", "passengers", "group_size"):
        return "for how many people"
    named = " ".join(w for w in words if w != "name") or slot
    if "time" in words:
        return f"at what {named}" if named != "time" else "at what time"
    if 1 < len(values) <= 4 and not all(v.isdigit() for v in values):
        return f"which {named} would you like, {', '.join(values[:-1])} or {values[-1]}"
    return f"which {named}"


def _norm(value: object) -> str:
    return " ".join(str(value).lower().split())
