"""The exchange a new user had with the demo, spoken: the caller's three requests in the
project's own voice, through ``converse`` — VAD, whisper, the turn engine, the demo's
configuration (``configs/sgd-services.yaml``: SmolLM2 with its tool adapter on the int8 graph,
the offline SGD services), TTS — and what the agent said, read from the conversation, with
the services' own record of what ran.

The issue it answers heard "In FindRestaurants city: San Francisco; cuisine: Italian" and
"Please confirm: Booking a table for 2 at  in  at 7 pm on March 1st." for this exchange: a
session opened without the configuration's tools, a call written as words, slots with nothing
to fill them."""

from __future__ import annotations

from demo_caller import call_words, demo_config, spoken
from service_ledger import Ledger

from cadence.pipeline.tools import offered_tools
from cadence.tooling.converse import converse

CALLER = (
    "I wanted to find a restaurant in San Jose.",
    "Italian food please.",
    "Yes, book the table for two people at seven in the evening.",
)


async def test_the_demo_finds_where_the_caller_said_and_never_speaks_a_call_or_a_gap() -> None:
    config = demo_config()
    ledger = Ledger()
    tools = [ledger.spy(tool) for tool in offered_tools([], config.tools)]
    conversation = await converse(spoken(CALLER), config, tools=tools)
    said = [turn.text for turn in conversation.history if turn.speaker == "agent"]
    transcript = "\n".join(f"{t.speaker}: {t.text}" for t in conversation.history)
    assert len([t for t in conversation.history if t.speaker == "user"]) == 3, transcript
    forbidden = call_words(tools)
    for line in said:
        assert not forbidden.search(line), transcript
        assert "  " not in line, transcript  # a slot with nothing in it
        assert " ." not in line, transcript

    # The search ran where the caller said, for what they said.
    searches = [(args, result) for name, args, result in ledger.calls if name == "FindRestaurants"]
    assert searches, transcript
    _, found = searches[0]
    rows = found["results"]
    assert rows, transcript
    assert {(row["city"], row["cuisine"]) for row in rows} == {("San Jose", "Italian")}

    # The booking is stated with the restaurant, city and time it will book — or asked for.
    last = said[-1]
    offered = {row["restaurant_name"] for row in rows}
    states = any(name in last for name in offered) and "San Jose" in last and "7 pm" in last
    asks = last.rstrip().endswith("?")
    assert states or asks, transcript
