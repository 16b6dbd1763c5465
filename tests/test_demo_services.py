"""Five more bookings spoken to the demo, in five other SGD services — a hotel, an event, a
flight, a rental car, a ride — each a caller's three requests in the project's own voice
through ``converse`` with the demo's configuration, side by side (one process, one copy of the
models, as a server holds them).

What every one must show, whatever the model makes of it: no line the caller hears holds a
tool's name, a ``key:`` of a call, or a gap where a slot was; and a call that ran, ran with
what this caller said (or a service returned) — the values below, written by hand from the
scripts, not read by the code under test. A call missing what the caller never gave is asked
for, not run. Whether a booking gets all the way through is the model's part: docs/tools.md,
"Measured", says how far each got."""

from __future__ import annotations

import asyncio

from demo_caller import call_words, demo_config, spoken
from service_ledger import Ledger

from cadence.pipeline.tools import offered_tools
from cadence.tooling.converse import converse

SCRIPTS: dict[str, tuple[str, ...]] = {
    "hotel": (
        "I'm looking for a hotel in New York.",
        "Yes, please book it. I'll check in on March 8th and check out on March 10th.",
        "Yes, that's right.",
    ),
    "event": (
        "Find me a concert in Seattle.",
        "Yes, I'd like to buy two tickets for it on March 5th.",
        "Yes, that's correct.",
    ),
    "flight": (
        "I need a one way flight from Chicago to Seattle on March 6th.",
        "That sounds good, please reserve it.",
        "Yes, please.",
    ),
    "car": (
        "I need a rental car in San Diego from March 4th at 10 am until March 7th.",
        "That works. Please reserve a standard car.",
        "Yes.",
    ),
    "ride": (
        "I need a cab to 2083 Camden Avenue for two people.",
        "A shared ride is fine.",
        "Yes, please.",
    ),
}
SAID: dict[str, dict[str, set[str]]] = {
    # the values each caller gave, slot by slot, as the services write them
    "hotel": {
        "location": {"New York"},
        "check_in_date": {"2019-03-08"},
        "check_out_date": {"2019-03-10"},
        "number_of_rooms": {"1"},
    },
    "event": {
        "city": {"Seattle"},
        "event_type": {"Music"},
        "number_of_tickets": {"2"},
        "date": {"2019-03-05"},
    },
    "flight": {
        "origin_city": {"Chicago"},
        "destination_city": {"Seattle"},
        "departure_date": {"2019-03-06"},
    },
    "car": {
        "pickup_city": {"San Diego"},
        "pickup_location": {"San Diego"},
        "pickup_date": {"2019-03-04"},
        "pickup_time": {"10:00"},
        "dropoff_date": {"2019-03-07"},
        "car_type": {"Standard"},
    },
    "ride": {"destination": {"2083 Camden Avenue"}, "number_of_seats": {"2"}},
}
DEFAULTS = {"False", "True", "Economy", "Pool", "Regular", "Luxury", "1"}
"""Values a service's schema offers that the model may choose for a slot nobody asked about
(a schema default, a flag)."""


async def _call(name: str, ledger: Ledger) -> tuple[str, list[str]]:
    config = demo_config()
    tools = [ledger.spy(tool) for tool in offered_tools([], config.tools)]
    conversation = await converse(spoken(SCRIPTS[name]), config, tools=tools)
    transcript = "\n".join(f"{t.speaker}: {t.text}" for t in conversation.history)
    forbidden = call_words(tools)
    for line in (t.text for t in conversation.history if t.speaker == "agent"):
        assert not forbidden.search(line), transcript
        assert "  " not in line, transcript
        assert " ." not in line, transcript
    return transcript, [t.text for t in conversation.history if t.speaker == "user"]


def _ran_with_what_was_said(name: str, ledger: Ledger, transcript: str) -> None:
    """Every call that ran, ran with the caller's values for the slots it was given: read
    off what it returned — a search's rows all hold the values it searched for, a booking's
    confirmation the values it booked — so a value grounding let through shows."""
    said = SAID[name]
    for method, arguments, result in ledger.calls:
        given = {slot for slot, value in arguments.items() if value not in (None, "dontcare")}
        for row in result.get("results", []):
            for slot in given & said.keys() & row.keys():
                assert str(row[slot]) in said[slot] | DEFAULTS, (method, slot, row, transcript)


async def test_five_more_bookings_say_no_call_no_gap_and_run_only_what_was_said() -> None:
    ledgers = {name: Ledger() for name in SCRIPTS}
    # Every conversation runs to its end before any is judged: none is left half-done.
    ended = await asyncio.gather(
        *(_call(name, ledgers[name]) for name in SCRIPTS), return_exceptions=True
    )
    results: list[tuple[str, list[str]]] = []
    for outcome in ended:
        if isinstance(outcome, BaseException):
            raise outcome
        results.append(outcome)
    for (transcript, users), name in zip(results, SCRIPTS, strict=True):
        assert users, transcript
        _ran_with_what_was_said(name, ledgers[name], transcript)
    hotel = ledgers["hotel"]
    booked = [result for method, _, result in hotel.calls if method == "ReserveHotel"]
    searched = {
        row["hotel_name"]
        for method, _, result in hotel.calls
        if method == "SearchHotel"
        for row in result["results"]
    }
    assert booked, results[0][0]  # the hotel is booked: what the search offered, when asked
    [row] = booked[-1]["results"]
    assert row["hotel_name"] in searched
    assert (row["location"], row["check_in_date"], row["check_out_date"]) == (
        "New York",
        "2019-03-08",
        "2019-03-10",
    )
