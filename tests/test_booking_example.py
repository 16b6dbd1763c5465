"""The booking agent of ``examples/booking_agent.py``, as its users run it: a spoken request
(real speech, real STT and TTS), the model a service that calls the example's tools (the fake
OpenAI-compatible one, scripted as a model would answer), the booking made with what the
tools returned, and the README showing how to start it."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import ModuleType

import pytest
from speech_data import clip

from cadence.pipeline.agent import Agent
from cadence.pipeline.config import TracingConfig
from cadence.pipeline.events import (
    HangUpEvent,
    ReplyAudioEvent,
    ReplyPlayedEvent,
    SessionEvent,
    ToolCallEvent,
)
from cadence.pipeline.session import VoiceSession
from cadence.tooling.caller import SimulatedCaller
from cadence.tooling.emulators.openai import (
    Behaviour,
    FakeOpenAI,
    ReceivedRequest,
    Stream,
    StreamedCall,
    ToolCalls,
)

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "examples" / "booking_agent.py"


def load_example() -> ModuleType:
    """A fresh copy of the example (its restaurants and bookings are module state)."""
    spec = importlib.util.spec_from_file_location("booking_agent", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


def test_the_readme_shows_how_to_run_it() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "python examples/booking_agent.py --base-url" in readme
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--help"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert "--base-url" in run.stdout


async def test_the_agent_books_a_table_from_what_its_tools_found(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CADENCE_LLM_API_KEY", "sk-cadence-test-booking")
    example = load_example()
    config = example.configuration(fake.base_url, "mercury-2").model_copy(
        update={"tracing": TracingConfig(jsonl_path=None)}
    )
    fake.respond = booking_model
    agent = Agent(config, example.TOOLS)
    await agent.load()
    session = await agent.open_session()
    caller = SimulatedCaller(session)
    seen: list[SessionEvent] = []
    reader = asyncio.create_task(read(session, seen))
    async with session:
        await caller.pause(500)
        await caller.say(clip("sb_spk2_snt4").audio())
        await until(lambda: len(session.history) == 6, caller)  # caller, check, book, answer
        await until(lambda: any(isinstance(e, ReplyPlayedEvent) for e in seen), caller)
        await caller.pause(500)  # the answer was heard to its end
        await caller.say(clip("sb_spk2_snt2").audio())
        await until(lambda: any(isinstance(e, HangUpEvent) for e in seen), caller)
    await reader
    events = seen

    assert example.BOOKINGS == [
        {
            "restaurant": "Ancient Szechuan",
            "party_size": 2,
            "time": "19:30",
            "name": "Ann",
            "reference": "R0001",
        }
    ]
    history = session.history
    assert [t.speaker for t in history[:6]] == ["user", "agent", "tool", "agent", "tool", "agent"]
    assert json.loads(history[2].text) == {
        "restaurant": "Ancient Szechuan",
        "available": True,
        "other_times": ["18:00", "19:30", "21:00"],
    }
    assert history[5].text == "You're booked, reference R0001."  # the booking tool's result
    tools = [(e.name, e.outcome) for e in events if isinstance(e, ToolCallEvent)]
    assert ("book_table", "ok") in tools
    assert tools[-1] == ("end_call", "ok")
    assert len({e.reply_index for e in events if isinstance(e, ReplyAudioEvent)}) >= 2
    [hang_up] = [e for e in events if isinstance(e, HangUpEvent)]
    assert hang_up.reason == "the agent ended the call"


def booking_model(request: ReceivedRequest) -> Behaviour:
    """What a model would answer the booking line's first caller, from the conversation: check
    the table, book it, confirm the booking from its result; to the next words, goodbye."""
    messages = request.body["messages"]
    users = [m for m in messages if m["role"] == "user"]
    last = messages[-1]
    if len(users) > 1:
        return ToolCalls(pieces=("Goodbye!",), calls=(StreamedCall("bye", "end_call", "{}"),))
    if last["role"] == "user":
        arguments = {"restaurant": "ancient szechuan", "party_size": 2, "time": "19:30"}
        call = StreamedCall("check", "check_availability", json.dumps(arguments))
        return ToolCalls(pieces=("Let me check.",), calls=(call,))
    result = json.loads(last["content"])
    if last["tool_call_id"] == "check" and result["available"]:
        arguments = {"restaurant": result["restaurant"], "party_size": 2, "time": "19:30"}
        call = StreamedCall("book", "book_table", json.dumps(arguments | {"name": "Ann"}))
        return ToolCalls(calls=(call,))
    return Stream((f"You're booked, reference {result['reference']}.",))


async def read(session: VoiceSession, into: list[SessionEvent]) -> None:
    async for event in session.events:
        into.append(event)


async def until(condition: Callable[[], bool], caller: SimulatedCaller) -> None:
    """Let the caller stay silent until ``condition`` holds."""
    for _ in range(600):
        if condition():
            return
        await caller.pause(100)
    raise AssertionError("the call did not get there within 60 s")
