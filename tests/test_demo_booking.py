"""The demo's agent books a restaurant: a scripted caller who wants American food in San Jose
at 7 pm, and answers what the agent asks, talks to the real turn engine running the demo's
configuration (``configs/sgd-services.yaml``, what ``make demo`` serves: the shipped
tool-calling diffusion model and the offline SGD services). The booking is of a restaurant
the search returned, in the city and at the time the caller asked for, and the caller hears
its name. ``CADENCE_DEMO_CHECKPOINT`` (and ``CADENCE_DEMO_BACKEND``) try a model in
training instead."""

from __future__ import annotations

import os
from pathlib import Path

from service_ledger import Ledger
from turn_engine import engine_of

from cadence.core.clock import MonotonicClock
from cadence.llm.backends import create_generator
from cadence.pipeline.config.loader import load_config
from cadence.pipeline.frames import EndOfReplyFrame
from cadence.pipeline.tools import offered_tools

DEMO = Path(__file__).parents[1] / "configs" / "sgd-services.yaml"
MAX_TURNS = 8
ANSWERS = (
    # what the agent asked about (words of its reply) → what the caller says
    (("confirm", "correct", "right?"), "Yes, that's right."),
    (("anything else", "help you with anything"), "No, that's all. Thanks!"),
    (("time",), "At 7 pm please."),
    (("city", "where", "area", "location"), "In San Jose."),
    (("cuisine", "kind of food", "type of food", "what food"), "American food."),
    (("how many", "people", "party"), "Just two of us."),
    (("date", "when", "day"), "Today."),
)
BOOK = "That sounds good. Please book me a table there for two at 7 pm today."


def _answer(reply: str) -> str:
    said = reply.lower()
    for words, answer in ANSWERS:
        if any(word in said for word in words):
            return answer
    return BOOK


async def test_a_scripted_caller_finds_and_books_a_restaurant_with_names_from_the_results() -> None:
    config = load_config(DEMO)
    # The words must not depend on how busy the machine is: no deadline lowers the
    # threshold of a block that runs late (the rule is tested in test_llm_decoding).
    unhurried = {"first_emit_budget_ms": 60_000.0, "block_budget_ms": 60_000.0}
    llm = config.models.llm.model_copy(update=unhurried)
    if checkpoint := os.environ.get("CADENCE_DEMO_CHECKPOINT"):  # a model in training
        backend = os.environ.get("CADENCE_DEMO_BACKEND", llm.backend)
        llm = llm.model_copy(update={"checkpoint": checkpoint, "backend": backend})
    ledger = Ledger()
    tools = [ledger.spy(t) for t in offered_tools([], config.tools)]
    clock = MonotonicClock()
    engine = engine_of(create_generator(llm, clock), tools, clock, tools_config=config.tools)
    transcript: list[str] = []

    await engine.pipeline.start()
    try:
        said = "Hi! I'm looking for an American restaurant in San Jose."
        for turn in range(MAX_TURNS):
            transcript.append(f"caller: {said}")
            await engine.says(said)
            await engine.reply_ends(turn + 1)
            reply_index = engine.seen.of(EndOfReplyFrame)[-1].reply_index
            reply = engine.seen.spoken(reply_index)
            engine.hear(reply_index)
            transcript.append(f"agent: {reply}")
            if ledger.booked():
                break
            said = _answer(reply)
    finally:
        await engine.pipeline.cancel("test over")
    story = "\n".join(transcript) + "\n" + "\n".join(map(str, ledger.calls))
    found = ledger.found_names()
    assert found, story
    [booking] = ledger.booked() or [{}]
    assert booking.get("restaurant_name") in found, story
    assert (booking["city"], booking["time"]) == ("San Jose", "19:00"), story
    spoken = " ".join(transcript)
    assert booking["restaurant_name"] in spoken, story  # the caller heard the name it booked
