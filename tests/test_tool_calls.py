"""Tool calls in the turn engine: the tool API, then whole replies that call tools — against
the fake OpenAI-compatible service (the real `openai` backend, real sockets, real event-stream
bytes) for what the service and the tools do, and on a virtual clock with a scripted
generator for what timing decides (the filler, the commit, the hang-up). No speech models:
the caller's turns come as transcript frames.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pytest
from openai_service import FAULT_LIMIT_MS, LIMIT_MS, settings
from pydantic import Field
from stub_generators import ScriptedGenerator
from turn_engine import WAIT_S, Engine, engine_of

from cadence.core.clock import MonotonicClock, VirtualClock
from cadence.llm.dialogue import ToolCall
from cadence.llm.remote import create_openai_generator
from cadence.pipeline.config import (
    CadenceConfig,
    ToolsConfig,
)
from cadence.pipeline.frames import (
    BargeInFrame,
    DTMFFrame,
    EndCallFrame,
    EndOfReplyFrame,
    EndpointFrame,
    FinalTranscriptFrame,
    HangUpFrame,
    SpeculativeTranscriptFrame,
    SpeechStartFrame,
    TextPieceFrame,
    ToolCallFrame,
    TurnWithdrawnFrame,
)
from cadence.pipeline.stages.playout import DEFAULT_LEAD_MS
from cadence.pipeline.tools import (
    BUILTIN_TOOLS,
    Tool,
    ToolDefinitionError,
    ToolSelectionError,
    offered_tools,
    tool,
)
from cadence.tooling.emulators.openai import FakeOpenAI, Stream, StreamedCall, ToolCalls

# --- the tool API ----------------------------------------------------------------------------


@tool(read_only=True)
async def find_table(
    restaurant: str,
    party_size: Annotated[int, Field(ge=1, le=20, description="people at the table")],
    time: str = "19:00",
) -> dict[str, Any]:
    """Find a free table at a restaurant."""
    return {"restaurant": restaurant, "party_size": party_size, "time": time, "free": True}


def test_a_function_becomes_a_tool_with_its_schema() -> None:
    assert find_table.spec.to_openai() == {
        "type": "function",
        "function": {
            "name": "find_table",
            "description": "Find a free table at a restaurant.",
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "restaurant": {"type": "string"},
                    "party_size": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 20,
                        "description": "people at the table",
                    },
                    "time": {"type": "string", "default": "19:00"},
                },
                "required": ["restaurant", "party_size"],
            },
        },
    }
    assert find_table.read_only
    assert find_table.cancellable


def test_the_context_parameter_is_not_the_models_to_fill() -> None:
    assert BUILTIN_TOOLS["end_call"].spec.parameters["properties"] == {}
    assert set(BUILTIN_TOOLS["read_keypad"].spec.parameters["properties"]) == {"max_digits"}


def test_arguments_are_validated_with_reasons_the_model_can_act_on() -> None:
    arguments = find_table.validate('{"restaurant": "Ancient Szechuan", "party_size": 2}')
    assert arguments == {"restaurant": "Ancient Szechuan", "party_size": 2, "time": "19:00"}
    with pytest.raises(ValueError, match="party_size: Input should be greater than or equal to 1"):
        find_table.validate('{"restaurant": "X", "party_size": 0}')
    with pytest.raises(ValueError, match="restaurant: Field required"):
        find_table.validate('{"party_size": 2}')
    with pytest.raises(ValueError, match="Invalid JSON"):
        find_table.validate('{"restaurant": "X", "party_')


def test_functions_that_cannot_be_tools_are_refused_by_name() -> None:
    def not_async(city: str) -> str:
        """Weather."""
        return city

    async def untyped(city) -> str:  # type: ignore[no-untyped-def]
        """Weather."""
        return str(city)

    async def undocumented(city: str) -> str:
        return city

    with pytest.raises(ToolDefinitionError, match=r"not_async.*async function"):
        tool(not_async)  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match="'city' needs a type"):
        tool(untyped)
    with pytest.raises(ToolDefinitionError, match="description"):
        tool(undocumented)
    with pytest.raises(ToolDefinitionError, match="name"):
        tool(name="find table")(undocumented)


def test_a_configuration_offers_the_tools_it_enables() -> None:
    names = [t.name for t in offered_tools([find_table], ToolsConfig())]
    assert names == ["find_table", "end_call"]
    with_services = [
        t.name for t in offered_tools([find_table], ToolsConfig(services=["Restaurants_1"]))
    ]
    assert with_services[0] == "find_table"
    assert {"FindRestaurants", "ReserveRestaurant"} <= set(with_services)
    only_builtins = ToolsConfig(enabled=[], builtins=["read_keypad"])
    assert [t.name for t in offered_tools([find_table], only_builtins)] == ["read_keypad"]
    with pytest.raises(
        ToolSelectionError, match=r"tools\.enabled: the agent has no tool named 'book'"
    ):
        offered_tools([find_table], ToolsConfig(enabled=["book"]))
    config = CadenceConfig.model_validate(
        {"overlays": {"lookup": {"tools": {"enabled": ["find_table"], "builtins": []}}}}
    )
    overlay = config.with_overlay("lookup").tools
    assert [t.name for t in offered_tools([find_table], overlay)] == ["find_table"]


@pytest.fixture
def remote(
    fake: FakeOpenAI, api_key: str
) -> Callable[[Sequence[Tool], ToolsConfig | None], Engine]:
    """A turn engine over the `openai` backend talking to ``fake``."""
    options = settings(fake.base_url)

    def make(tools: Sequence[Tool], tools_config: ToolsConfig | None = None) -> Engine:
        clock = MonotonicClock()
        return engine_of(
            create_openai_generator(options, clock), tools, clock, tools_config=tools_config
        )

    return make


@pytest.fixture
async def running() -> AsyncIterator[Callable[[Engine], Engine]]:
    """Starts engines, and stops every one at the end of the test."""
    engines: list[Engine] = []

    def start(engine: Engine) -> Engine:
        engines.append(engine)
        return engine

    yield start
    for engine in engines:
        await engine.pipeline.cancel("test over")


async def started(engine: Engine, running: Callable[[Engine], Engine]) -> Engine:
    await engine.pipeline.start()
    return running(engine)


def tool_messages(body: dict[str, Any]) -> dict[str, Any]:
    """The tool results a request sent, by call id, parsed."""
    return {
        m["tool_call_id"]: json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"
    }


# --- against the service ---------------------------------------------------------------------


@dataclass
class Calls:
    """What the test's tools were called with."""

    made: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


async def test_two_calls_then_a_second_round_answer_from_the_results(
    fake: FakeOpenAI, remote: Callable[..., Engine], running: Callable[[Engine], Engine]
) -> None:
    calls = Calls()

    @tool(read_only=True)
    async def opening_hours(restaurant: str) -> dict[str, str]:
        """When a restaurant is open."""
        calls.made.append(("opening_hours", {"restaurant": restaurant}))
        return {"restaurant": restaurant, "open": "17:00", "close": "23:00"}

    fake.script = [
        ToolCalls(
            pieces=("Let me ", "check that", " for you."),
            calls=(
                StreamedCall(
                    "call_a", "find_table", '{"restaurant": "Ancient Szechuan", "party_size": 2}'
                ),
                StreamedCall("call_b", "opening_hours", '{"restaurant": "Ancient Szechuan"}'),
            ),
            fragment_chars=3,
        ),
        Stream(("They have a table for two ", "at seven, and close at eleven.")),
    ]
    engine = await started(remote([find_table, opening_hours]), running)
    await engine.says("Can I get a table for two at Ancient Szechuan?")
    await engine.reply_ends()

    assert engine.seen.spoken() == (
        "Let me check that for you. They have a table for two at seven, and close at eleven."
    )
    assert calls.made == [("opening_hours", {"restaurant": "Ancient Szechuan"})]
    first, second = (request.body for request in fake.requests)
    assert [t["function"]["name"] for t in first["tools"]] == ["find_table", "opening_hours"]
    assert first["tool_choice"] == second["tool_choice"] == "auto"
    assert second["messages"][-3] == {
        "role": "assistant",
        "content": "Let me check that for you.",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {
                    "name": "find_table",
                    "arguments": '{"restaurant": "Ancient Szechuan", "party_size": 2}',
                },
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {
                    "name": "opening_hours",
                    "arguments": '{"restaurant": "Ancient Szechuan"}',
                },
            },
        ],
    }
    assert tool_messages(second) == {
        "call_a": {
            "restaurant": "Ancient Szechuan",
            "party_size": 2,
            "time": "19:00",
            "free": True,
        },
        "call_b": {"restaurant": "Ancient Szechuan", "open": "17:00", "close": "23:00"},
    }
    history = engine.stage.history
    assert [(t.speaker, t.tool_call_id) for t in history] == [
        ("user", None),
        ("agent", None),
        ("tool", "call_a"),
        ("tool", "call_b"),
        ("agent", None),
    ]
    assert [c.id for c in history[1].tool_calls] == ["call_a", "call_b"]
    assert history[-1].text == "They have a table for two at seven, and close at eleven."
    frames = engine.seen.of(ToolCallFrame)
    assert sorted((f.tool, f.outcome, f.round) for f in frames) == [
        ("find_table", "ok", 1),
        ("opening_hours", "ok", 1),
    ]
    assert {f.tool: f.argument_bytes for f in frames} == {
        "find_table": len(b'{"restaurant": "Ancient Szechuan", "party_size": 2}'),
        "opening_hours": len(b'{"restaurant": "Ancient Szechuan"}'),
    }


async def test_a_tool_that_raises_gives_the_model_an_error_and_the_caller_a_reply(
    fake: FakeOpenAI, remote: Callable[..., Engine], running: Callable[[Engine], Engine]
) -> None:
    @tool
    async def cancel_order(order_id: str) -> str:
        """Cancel an order."""
        raise LookupError(f"order {order_id} is not in the system")

    fake.script = [
        ToolCalls(calls=(StreamedCall("call_1", "cancel_order", '{"order_id": "A17"}'),)),
        Stream(("I could not find that order.",)),
    ]
    engine = await started(remote([cancel_order]), running)
    await engine.says("Cancel order A17 please.")
    await engine.reply_ends()

    result = tool_messages(fake.requests[1].body)["call_1"]
    assert result == {"error": "the tool failed (LookupError: order A17 is not in the system)"}
    assert engine.seen.spoken() == "I could not find that order."
    [frame] = engine.seen.of(ToolCallFrame)
    assert frame.outcome == "error"


async def test_a_tool_past_its_time_limit_gives_the_model_an_error(
    fake: FakeOpenAI, remote: Callable[..., Engine], running: Callable[[Engine], Engine]
) -> None:
    never = asyncio.Event()

    @tool(read_only=True)
    async def track_parcel(tracking_number: str) -> str:
        """Where a parcel is."""
        await never.wait()
        return "never"

    fake.script = [
        ToolCalls(calls=(StreamedCall("call_1", "track_parcel", '{"tracking_number": "1Z9"}'),)),
        Stream(("The tracking service is slow right now.",)),
    ]
    config = ToolsConfig(timeout_ms=FAULT_LIMIT_MS, filler="")
    engine = await started(remote([track_parcel], config), running)
    await engine.says("Where is my parcel?")
    await engine.reply_ends()

    result = tool_messages(fake.requests[1].body)["call_1"]
    assert result == {"error": f"the tool took longer than {FAULT_LIMIT_MS} ms"}
    [frame] = engine.seen.of(ToolCallFrame)
    assert frame.outcome == "timeout"
    assert engine.seen.spoken() == "The tracking service is slow right now."


async def test_bad_arguments_and_unknown_tools_are_answered_not_run(
    fake: FakeOpenAI, remote: Callable[..., Engine], running: Callable[[Engine], Engine]
) -> None:
    fake.script = [
        ToolCalls(
            calls=(
                StreamedCall(
                    "call_1", "find_table", '{"restaurant": "Nopa", "party_size": "many"}'
                ),
                StreamedCall("call_2", "find_table", '{"restaurant": "Nopa", "party_size": 2'),
                StreamedCall("call_3", "order_pizza", "{}"),
            )
        ),
        Stream(("How many people will there be?",)),
    ]
    engine = await started(remote([find_table]), running)
    await engine.says("A table at Nopa.")
    await engine.reply_ends()

    results = tool_messages(fake.requests[1].body)
    assert results["call_1"]["error"].startswith("invalid arguments: party_size:")
    assert results["call_2"]["error"].startswith("invalid arguments: arguments: Invalid JSON")
    assert results["call_3"] == {"error": "no tool named 'order_pizza' (offered: find_table)"}
    outcomes = sorted(f.outcome for f in engine.seen.of(ToolCallFrame))
    assert outcomes == ["invalid_arguments", "invalid_arguments", "unknown_tool"]
    assert engine.seen.spoken() == "How many people will there be?"
    # What is not JSON goes back as {}: a service parses the arguments it is sent back.
    [asked] = [m for m in fake.requests[1].body["messages"] if m.get("tool_calls")]
    sent = {call["id"]: call["function"]["arguments"] for call in asked["tool_calls"]}
    assert sent == {
        "call_1": '{"restaurant": "Nopa", "party_size": "many"}',
        "call_2": "{}",
        "call_3": "{}",
    }


async def test_after_the_last_round_the_model_must_answer_in_words(
    fake: FakeOpenAI, remote: Callable[..., Engine], running: Callable[[Engine], Engine]
) -> None:
    runs = Calls()

    @tool(read_only=True)
    async def search(query: str) -> list[str]:
        """Search the knowledge base."""
        runs.made.append(("search", {"query": query}))
        return []

    again = ToolCalls(calls=(StreamedCall(None, "search", '{"query": "refund"}'),))
    fake.script = [
        again,
        again,
        ToolCalls(pieces=("I found nothing on refunds.",), calls=again.calls),
    ]
    engine = await started(
        remote([search], ToolsConfig(max_rounds=2, timeout_ms=LIMIT_MS)), running
    )
    await engine.says("What is your refund policy?")
    await engine.reply_ends()

    assert [r.body["tool_choice"] for r in fake.requests] == ["auto", "auto", "none"]
    assert len(runs.made) == 2  # the third answer's call was not run
    assert engine.seen.spoken() == "I found nothing on refunds."
    ids = [call.id for turn in engine.stage.history for call in turn.tool_calls]
    assert len(ids) == len(set(ids)) == 2  # made-up ids, unique, each answered
    assert {t.tool_call_id for t in engine.stage.history if t.speaker == "tool"} == set(ids)


@pytest.mark.parametrize("cancellable", [True, False])
async def test_a_barge_in_during_a_tool(
    fake: FakeOpenAI,
    remote: Callable[..., Engine],
    running: Callable[[Engine], Engine],
    cancellable: bool,
) -> None:
    started_call, release, finished = asyncio.Event(), asyncio.Event(), asyncio.Event()
    ended: list[str] = []

    @tool(cancellable=cancellable)
    async def transfer_funds(amount: int) -> dict[str, str]:
        """Move money between the caller's accounts."""
        started_call.set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise
        ended.append("finished")
        finished.set()
        return {"status": "done"}

    fake.script = [
        ToolCalls(
            pieces=("One moment while I move that.",),
            calls=(StreamedCall("call_1", "transfer_funds", '{"amount": 50}'),),
        ),
        Stream(("Done.",)),
    ]
    engine = await started(remote([transfer_funds]), running)
    await engine.says("Move fifty dollars to savings.")
    async with asyncio.timeout(WAIT_S):
        await started_call.wait()
    engine.hear()
    await engine.pipeline.queue(SpeechStartFrame(at_ms=engine.clock.now_ms()))
    await engine.seen.until(lambda: bool(engine.seen.of(ToolCallFrame)))

    [frame] = engine.seen.of(ToolCallFrame)
    history = engine.stage.history
    assert [t.speaker for t in history] == ["user", "agent", "tool"]
    assert history[1].text == "One moment while I move that."
    assert [c.name for c in history[1].tool_calls] == ["transfer_funds"]
    if cancellable:
        assert frame.outcome == "cancelled"
        await engine.seen.until(lambda: ended == ["cancelled"])
        assert json.loads(history[2].text) == {"error": "the caller interrupted; it was cancelled"}
    else:
        assert frame.outcome == "left_running"
        assert json.loads(history[2].text) == {
            "error": "the caller interrupted; it is still running"
        }
        release.set()  # it finishes in the background, and the history learns its result
        async with asyncio.timeout(WAIT_S):
            await finished.wait()
        await settle()
        assert json.loads(engine.stage.history[2].text) == {"status": "done"}
    assert len(fake.requests) == 1  # no second round for a reply that was cut


async def test_tool_calls_are_in_the_turns_trace(
    fake: FakeOpenAI, remote: Callable[..., Engine], running: Callable[[Engine], Engine]
) -> None:
    fake.script = [
        ToolCalls(
            calls=(StreamedCall("c1", "find_table", '{"restaurant": "Nopa", "party_size": 4}'),)
        ),
        Stream(("Nopa has a table for four at seven.",)),
    ]
    engine = await started(remote([find_table]), running)
    await engine.says("Table for four at Nopa.")
    await engine.reply_ends()
    await engine.pipeline.cancel("call over")
    engine.observer.close()
    [trace] = [t for t in engine.traces.turns if t.tools]
    [record] = trace.tools
    assert (record.name, record.round, record.outcome) == ("find_table", 1, "ok")
    assert record.argument_bytes == len(b'{"restaurant": "Nopa", "party_size": 4}')
    assert record.result_bytes > 0
    assert record.end_ms >= record.start_ms


# --- timing, on a virtual clock --------------------------------------------------------------


async def settle() -> None:
    for _ in range(100):
        await asyncio.sleep(0)


async def slow_stock_call(
    running: Callable[[Engine], Engine], said_first: str, answer: str
) -> tuple[Engine, VirtualClock, asyncio.Event]:
    """A call on a virtual clock whose model says ``said_first``, asks a stock tool that
    waits for the returned event, then says ``answer``; the caller has just asked."""
    clock, release = VirtualClock(), asyncio.Event()

    @tool(read_only=True)
    async def check_stock(item: str) -> dict[str, bool]:
        """Whether an item is in stock."""
        await release.wait()
        return {"in_stock": True}

    call = ToolCall("c1", "check_stock", '{"item": "kettle"}')
    generator = ScriptedGenerator(clock, [(said_first, (call,)), (answer, ())])
    config = ToolsConfig(filler_after_ms=700, filler="One moment.", timeout_ms=LIMIT_MS)
    engine = await started(engine_of(generator, [check_stock], clock, tools_config=config), running)
    await engine.says("Do you have kettles?")
    await settle()
    return engine, clock, release


async def test_the_filler_is_spoken_once_when_a_slow_tool_keeps_the_caller_waiting(
    running: Callable[[Engine], Engine],
) -> None:
    engine, clock, release = await slow_stock_call(running, "", "We have some.")
    committed_ms = clock.now_ms()
    await clock.advance(699)
    await settle()
    assert engine.seen.spoken() == ""  # not yet
    await clock.advance(1)
    await settle()
    [filler] = engine.seen.of(TextPieceFrame)
    assert (filler.text, filler.at_ms, filler.flush) == ("One moment.", committed_ms + 700, True)
    await clock.advance(5000)
    await settle()
    assert engine.seen.spoken() == "One moment."  # once per turn
    release.set()
    await engine.seen.until(lambda: bool(engine.seen.of(EndOfReplyFrame)))
    assert engine.seen.spoken() == "One moment. We have some."
    assert engine.stage.history[1].text == "One moment."  # said while the tool ran


async def test_no_filler_when_the_model_spoke_before_its_call(
    running: Callable[[Engine], Engine],
) -> None:
    engine, clock, release = await slow_stock_call(running, "Let me look", "We have some.")
    [words, pause] = engine.seen.of(TextPieceFrame)
    assert (words.text, words.flush) == ("Let me look", False)
    assert (pause.text, pause.flush) == ("", True)  # said now, though no phrase ends there
    await clock.advance(3000)
    await settle()
    assert engine.seen.spoken() == "Let me look"
    release.set()
    await engine.seen.until(lambda: bool(engine.seen.of(EndOfReplyFrame)))
    assert engine.seen.spoken() == "Let me look We have some."


async def test_without_early_emission_the_words_before_a_call_are_spoken_at_the_pause(
    running: Callable[[Engine], Engine],
) -> None:
    clock = VirtualClock()
    call = ToolCall("c1", "find_table", '{"restaurant": "Nopa", "party_size": 2}')
    generator = ScriptedGenerator(clock, [("Let me check.", (call,)), ("Nopa has one.", ())])
    engine = await started(engine_of(generator, [find_table], clock, early_emission=False), running)
    await engine.says("A table at Nopa for two?")
    await engine.seen.until(lambda: bool(engine.seen.of(EndOfReplyFrame)))
    pieces = [(piece.text, piece.flush) for piece in engine.seen.of(TextPieceFrame)]
    assert pieces == [("Let me check.", True), (" Nopa has one.", False)]


async def test_repeated_call_ids_are_made_unique_within_a_reply(
    running: Callable[[Engine], Engine],
) -> None:
    clock = VirtualClock()
    arguments = '{"restaurant": "Nopa", "party_size": 2}'
    calls = (ToolCall("same", "find_table", arguments), ToolCall("same", "find_table", arguments))
    generator = ScriptedGenerator(clock, [("", calls), ("", calls[:1]), ("Both free.", ())])
    engine = await started(engine_of(generator, [find_table], clock), running)
    await engine.says("Two tables at Nopa?")
    await engine.seen.until(lambda: bool(engine.seen.of(EndOfReplyFrame)))
    ids = [c.id for turn in engine.stage.history for c in turn.tool_calls]
    assert ids == ["same", "same_1", "same_2"]
    answered = [t.tool_call_id for t in engine.stage.history if t.speaker == "tool"]
    assert answered == ids
    assert engine.seen.spoken() == "Both free."


async def test_a_tool_that_acts_waits_for_the_commit_and_a_lookup_does_not(
    running: Callable[[Engine], Engine],
) -> None:
    clock = VirtualClock()
    ran: list[str] = []

    @tool(read_only=True)
    async def lookup(name: str) -> str:
        """Look a booking up."""
        ran.append("lookup")
        return "found"

    @tool
    async def book(name: str) -> str:
        """Book."""
        ran.append("book")
        return "booked"

    calls = (ToolCall("c1", "lookup", '{"name": "Ann"}'), ToolCall("c2", "book", '{"name": "Ann"}'))
    generator = ScriptedGenerator(clock, [("", calls), ("Booked.", ())])
    engine = await started(engine_of(generator, [lookup, book], clock), running)
    # Decoded at the pause onset, before the endpoint: the reply is generated ahead of the commit.
    await engine.pipeline.queue(SpeechStartFrame(at_ms=0))
    await engine.pipeline.queue(SpeculativeTranscriptFrame(text="Book it for Ann.", at_ms=100))
    await settle()
    assert ran == ["lookup"]
    await clock.advance(300)
    await engine.pipeline.queue(EndpointFrame(at_ms=300, speech_end_ms=100))
    await engine.pipeline.queue(FinalTranscriptFrame(text="Book it for Ann.", at_ms=300))
    await engine.seen.until(lambda: bool(engine.seen.of(EndOfReplyFrame)))
    assert ran == ["lookup", "book"]


async def test_speech_over_a_tool_that_acts_keeps_the_call_in_the_history(
    running: Callable[[Engine], Engine],
) -> None:
    """A reply that booked something is part of the conversation even if none of it was
    heard: the caller's words are a barge-in, not a continuation of their turn."""
    clock, release = VirtualClock(), asyncio.Event()

    @tool(cancellable=False)
    async def book(name: str) -> str:
        """Book."""
        await release.wait()
        return "booked"

    generator = ScriptedGenerator(clock, [("", (ToolCall("c1", "book", '{"name": "Ann"}'),))])
    engine = await started(engine_of(generator, [book], clock), running)
    await engine.says("Book it for Ann.")
    await settle()
    await engine.pipeline.queue(SpeechStartFrame(at_ms=clock.now_ms()))  # nothing heard yet
    await engine.seen.until(lambda: bool(engine.seen.of(BargeInFrame)))
    assert engine.seen.of(TurnWithdrawnFrame) == []
    assert [t.speaker for t in engine.stage.history] == ["user", "agent", "tool"]
    release.set()
    await settle()
    assert engine.stage.history[2].text == '"booked"'


async def test_end_call_hangs_up_once_the_goodbye_was_heard(
    running: Callable[[Engine], Engine],
) -> None:
    clock = VirtualClock()
    generator = ScriptedGenerator(
        clock, [("Thanks for calling, goodbye!", (ToolCall("c1", "end_call", "{}"),))]
    )
    engine = await started(engine_of(generator, [BUILTIN_TOOLS["end_call"]], clock), running)
    await engine.says("That's all, bye.")
    await engine.seen.until(lambda: bool(engine.seen.of(EndOfReplyFrame)))
    await settle()
    assert engine.seen.of(HangUpFrame) == []  # the goodbye is still being heard
    assert len(generator.requests) == 1  # end_call ends the rounds
    engine.ledger.finish(0)  # its last frame handed over: up to the playout's lead to hear
    await settle()
    await clock.advance(DEFAULT_LEAD_MS - 1)
    await settle()
    assert engine.seen.of(HangUpFrame) == []
    await clock.advance(1)
    await engine.seen.until(lambda: bool(engine.seen.of(HangUpFrame)))
    assert engine.seen.spoken() == "Thanks for calling, goodbye!"


async def test_the_application_ending_the_call_lets_the_reply_finish_first(
    running: Callable[[Engine], Engine],
) -> None:
    clock, release = VirtualClock(), asyncio.Event()

    @tool(read_only=True)
    async def lookup(name: str) -> str:
        """Look it up."""
        await release.wait()
        return "found"

    call = ToolCall("c1", "lookup", '{"name": "Ann"}')
    generator = ScriptedGenerator(clock, [("Let me see.", (call,)), ("Found it.", ())])
    engine = await started(engine_of(generator, [lookup], clock), running)
    await engine.says("Is Ann booked?")
    await settle()
    await engine.pipeline.queue(EndCallFrame(reason="closing time", at_ms=clock.now_ms()))
    release.set()
    await engine.seen.until(lambda: bool(engine.seen.of(EndOfReplyFrame)))
    assert engine.seen.spoken() == "Let me see. Found it."  # the answer, not a goodbye
    assert engine.seen.of(HangUpFrame) == []
    engine.ledger.finish(0)
    await settle()
    await clock.advance(DEFAULT_LEAD_MS)
    await engine.seen.until(lambda: bool(engine.seen.of(HangUpFrame)))
    await engine.pipeline.queue(EndCallFrame(reason="again", at_ms=clock.now_ms()))
    await settle()
    [hang_up] = engine.seen.of(HangUpFrame)  # once
    assert hang_up.reason == "closing time"


async def test_the_application_ending_the_call_stands_through_a_barge_in(
    running: Callable[[Engine], Engine],
) -> None:
    clock = VirtualClock()
    generator = ScriptedGenerator(clock, [("We close at nine tonight.", ())])
    engine = await started(engine_of(generator, [], clock), running)
    await engine.says("When do you close?")
    await engine.seen.until(lambda: bool(engine.seen.of(EndOfReplyFrame)))
    await engine.pipeline.queue(EndCallFrame(reason="closing time", at_ms=clock.now_ms()))
    engine.hear()  # being heard, not to its end
    await engine.pipeline.queue(SpeechStartFrame(at_ms=clock.now_ms()))
    await engine.seen.until(lambda: bool(engine.seen.of(HangUpFrame)))
    assert engine.seen.of(BargeInFrame)
    [hang_up] = engine.seen.of(HangUpFrame)
    assert hang_up.reason == "closing time"


async def test_end_call_without_words_says_the_configured_goodbye(
    running: Callable[[Engine], Engine],
) -> None:
    clock = VirtualClock()
    generator = ScriptedGenerator(clock, [("", (ToolCall("c1", "end_call", "{}"),))])
    config = ToolsConfig(goodbye="Bye now.")
    engine = await started(
        engine_of(generator, [BUILTIN_TOOLS["end_call"]], clock, tools_config=config), running
    )
    await engine.says("Hang up.")
    await engine.seen.until(lambda: bool(engine.seen.of(EndOfReplyFrame)))
    assert engine.seen.spoken() == "Bye now."


async def test_read_keypad_returns_the_keys_the_caller_presses(
    running: Callable[[Engine], Engine],
) -> None:
    clock = VirtualClock()
    generator = ScriptedGenerator(
        clock,
        [
            ("Please type your account number, then hash.", (ToolCall("c1", "read_keypad", "{}"),)),
            ("Thank you.", ()),
        ],
    )
    engine = await started(engine_of(generator, [BUILTIN_TOOLS["read_keypad"]], clock), running)
    await engine.says("I want to check my balance.")
    await settle()
    for digit in "4417#9":
        await engine.pipeline.queue(DTMFFrame(digit=digit, at_ms=clock.now_ms()))
    await engine.seen.until(lambda: bool(engine.seen.of(EndOfReplyFrame)))
    history, _ = generator.requests[1]
    assert json.loads(history[-1].text) == {"digits": "4417"}
    assert engine.stage.keypad.pressed == "4417#9"


def test_the_tools_benchmark_prints_its_figures_and_reports_the_tools(tmp_path: Path) -> None:
    # One sentence said without a pause: a clip with one ("ask not what your country can do
    # for you — ask what…") may have its first reply withdrawn when the caller goes on, as it
    # should, which leaves a one-turn run no tool turn to count.
    speech = Path(__file__).parent / "data" / "speech"
    clip = next(
        json.loads(line)
        for line in (speech / "manifest.jsonl").read_text().splitlines()
        if json.loads(line)["id"] == "ds_ldc93s1_16k"
    )
    manifest = tmp_path / "clip.jsonl"
    manifest.write_text(json.dumps({**clip, "file": str(speech / clip["file"])}) + "\n")
    run = subprocess.run(
        [
            str(Path(sys.executable).with_name("cadence")),
            "bench-tools",
            "-m",
            str(manifest),
            "-o",
            str(tmp_path),
            "--turns",
            "1",
            "--slow-turns",
            "1",
            "--slow-tool-ms",
            "1000",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert re.search(r"tool round, Cadence's own time \([1-9]\d* rounds\): p50 [\d.]+", run.stdout)
    assert re.search(r"1000 ms tool, commit → first sound \(1 turns\): p50 [\d.]+", run.stdout)
    summary = json.loads((tmp_path / "summary.json").read_text())
    variants = summary["variants"]
    assert variants["instant_tool"]["tools"]["turns"] == 1
    assert variants["slow_tool_1000ms"]["tools"]["turns"] == 1
    assert "## Tools" in (tmp_path / "report.md").read_text()
