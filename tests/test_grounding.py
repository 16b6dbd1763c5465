"""Grounding a service call in the conversation: the caller's dates, times and counts read as
the services write them (against what the corpus's calls sent after the caller said them), the
corpus's own calls left as they are, and a model's made-up values replaced by the caller's —
through the real offline services."""

from __future__ import annotations

import asyncio
import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from cadence.llm.dialogue import ToolCall, Turn
from cadence.llm.spoken_values import SGD_TODAY, read_spoken_values
from cadence.pipeline.tools.context import ToolContext
from cadence.pipeline.tools.grounding import GroundedCall
from cadence.pipeline.tools.keypad import Keypad
from cadence.pipeline.tools.sgd_services import packaged_catalogue, sgd_service_tools
from cadence.tooling.training.tool_evaluation import ToolUseTally, check_grounding

DEV_SAMPLE = Path(__file__).parent / "data" / "dialogue" / "sgd_tools_dev_sample.jsonl"


@pytest.mark.parametrize(
    ("said", "dates", "times", "counts"),
    [
        ("A table for 2 at 7 pm tomorrow.", ["2019-03-02"], ["19:00"], ["2"]),
        ("March 3rd at half past six in the evening", ["2019-03-03"], ["18:30"], []),
        ("next Friday at 11:30 am", ["2019-03-08"], ["11:30"], []),
        ("on the 7th please, for four of us", ["2019-03-07"], [], ["4"]),
        ("Make it quarter to 5 in the afternoon on the 12th of this month", ["2019-03-12"],
         ["16:45"], []),
        ("the day after tomorrow at noon", ["2019-03-03"], ["12:00"], []),
        ("Saturday this week, evening 4:30", ["2019-03-02"], ["16:30"], []),
        ("5 o\"clock in the evening, three people", [], ["17:00"], ["3"]),
        ("at 7", [], ["07:00", "19:00"], []),
        ("six forty five pm on March 14", ["2019-03-14"], ["18:45"], []),
        ("Thanks for watching!", [], [], []),
    ],
)  # fmt: skip
def test_spoken_dates_times_and_counts_are_read_as_the_services_write_them(
    said: str, dates: list[str], times: list[str], counts: list[str]
) -> None:
    values = read_spoken_values(said, SGD_TODAY)
    assert (list(values.dates), list(values.times), list(values.counts)) == (dates, times, counts)
    assert SGD_TODAY.weekday() == 4  # a Friday: "next Friday" is a week on


def test_the_corpus_own_calls_come_out_as_sent_and_its_callers_values_read_as_they_sent_them() -> (
    None
):
    """Ground truth: the corpus's agents called with what the callers said, so grounding must
    leave their calls as they were (98.6 % of sgd_tools_dev's 6,027 calls, docs/tools.md), and
    the dates and times of their replies as they said them (all but one of 3,066); and a
    caller's informed date, time or count (their dialogue act, their words) reads as
    the value the call then sent. Times miss where the corpus's agent booked another time
    than the one asked (a quarter hour rounded to a half), so that share stays below 1."""
    check = check_grounding(DEV_SAMPLE, packaged_catalogue())
    assert check.calls_kept[1] >= 100
    assert all(n >= 15 for _, n in check.spoken_read.values()), check.spoken_read
    figures = check.summary()
    assert figures["calls_kept"] >= 0.95, check.changed
    assert figures["dates"] >= 0.98, figures
    assert figures["times"] >= 0.8, figures
    assert figures["counts"] >= 0.85, figures
    # the corpus's agents said the caller's dates and times back: a reply keeps its own
    assert check.replies_kept[1] >= 50
    assert figures["replies_kept"] >= 0.995, figures


def _context(conversation: list[Turn]) -> ToolContext:
    return ToolContext("call-1", 0, Keypad(), conversation, lambda why: None)


def _run(name: str, arguments: dict[str, str], conversation: list[Turn]) -> dict[str, Any]:
    tools = {t.name: t for t in sgd_service_tools(["Restaurants_1"])}
    validated = tools[name].validate(json.dumps(arguments))
    result: dict[str, Any] = json.loads(
        asyncio.run(tools[name].call(validated, _context(conversation)))
    )
    return result


def test_a_search_with_values_the_caller_never_said_runs_with_the_ones_they_did() -> None:
    """What a small model did: asked for American food in San Jose, it searched for Italian
    food in Oakland. The service reads the caller's words as its own values."""
    conversation = [
        Turn("user", "Hi, I'd like American food in San Jose, around 7 pm."),
    ]
    found = _run("FindRestaurants", {"city": "Oakland", "cuisine": "Italian"}, conversation)
    assert found["n_results"] > 0
    assert {(row["city"], row["cuisine"]) for row in found["results"]} == {("San Jose", "American")}
    # a piece of what the caller said is not what they said
    found = _run("FindRestaurants", {"city": "San", "cuisine": "American"}, conversation)
    assert {row["city"] for row in found["results"]} == {"San Jose"}
    # what the model wrote is kept when the caller did say it, whatever else they said
    said = [Turn("user", "Italian in Oakland, or American in San Jose, either.")]
    found = _run("FindRestaurants", {"city": "Oakland", "cuisine": "Italian"}, said)
    assert {(row["city"], row["cuisine"]) for row in found["results"]} == {("Oakland", "Italian")}


def test_a_booking_with_an_empty_name_books_what_the_search_found_when_the_caller_asked() -> None:
    """The diffusion model's failure: ReserveRestaurant with an empty name after the search.
    The name comes from the search's first row (the one offered), the time and date and party
    from the caller's words."""
    search = _run(
        "FindRestaurants",
        {"city": "San Jose", "cuisine": "American"},
        [Turn("user", "American food in San Jose please.")],
    )
    offered = search["results"][0]["restaurant_name"]
    call = ToolCall("c1", "FindRestaurants", '{"city": "San Jose", "cuisine": "American"}')
    conversation = [
        Turn("user", "American food in San Jose please."),
        Turn("agent", "", tool_calls=(call,)),
        Turn("tool", json.dumps(search), tool_call_id="c1"),
        Turn("agent", f"How about {offered}?"),
        Turn("user", "Yes, book it for four of us next Tuesday at half past 7 in the evening."),
    ]
    booked = _run(
        "ReserveRestaurant",
        {"restaurant_name": "", "city": "San Jose", "time": "7 pm", "party_size": "2"},
        conversation,
    )
    assert booked["n_results"] == 1
    [row] = booked["results"]
    assert row["restaurant_name"] == offered
    assert (row["time"], row["date"], row["party_size"]) == ("19:30", "2019-03-05", "4")
    assert datetime.date.fromisoformat(row["date"]).strftime("%A") == "Tuesday"


def _ground(service: str, method: str, said: str, arguments: dict[str, str]) -> GroundedCall:
    catalogue = packaged_catalogue()
    found = catalogue.method_named([service], method)
    assert found is not None
    return catalogue.ground(found, arguments, [Turn("user", said)])


def test_a_value_nobody_said_and_no_catalogue_lists_is_reported_not_replaced() -> None:
    said = "I need a cab to The Villa for 3 people, luxury please."
    made_up = {"destination": "Kuk Kaung", "number_of_seats": "1", "ride_type": "Regular"}
    grounded = _ground("RideSharing_2", "GetRide", said, made_up)
    assert grounded.arguments == {
        "destination": "Kuk Kaung",
        "number_of_seats": "3",
        "ride_type": "Luxury",
    }
    assert grounded.ungrounded == ("destination",)
    assert set(grounded.replaced) == {"number_of_seats", "ride_type"}


def test_a_trip_origin_does_not_become_its_destination() -> None:
    said = "I'm going from New York to Philly on the 3rd."
    wanted = {"from_location": "New York", "to_location": "Philadelphia", "leaving_date": "x"}
    grounded = _ground("Buses_1", "FindBus", said, wanted)
    assert grounded.arguments["to_location"] == "Philadelphia"  # nobody said it; nothing else to
    assert grounded.arguments["leaving_date"] == "2019-03-03"


def test_eval_lm_counts_a_call_right_as_written_or_as_grounded() -> None:
    wanted = ToolCall("c", "GetRide", '{"destination": "The Villa", "number_of_seats": "3"}')
    made = ToolCall("c", "GetRide", '{"destination": "The Villa", "number_of_seats": "three"}')
    fixed = ToolCall("c", "GetRide", '{"destination": "The Villa", "number_of_seats": "3"}')
    tally = ToolUseTally()
    tally.add_call_turn([made], wanted, fixed)
    tally.add_call_turn([made], wanted)
    summary = tally.summary()
    assert (summary["call_exact_match"], summary["call_exact_match_grounded"]) == (0.0, 0.5)
    assert tally.misses == [
        {"wanted": "GetRide " + wanted.arguments, "made": "GetRide " + made.arguments}
    ]
