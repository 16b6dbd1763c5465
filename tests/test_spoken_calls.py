"""A reply never speaks a tool call (``llm/spoken_calls.py``), built on the exchange a new user
had with the demo: asked for "Italian food please", the agent said its own call aloud, "In
FindRestaurants city: San Francisco; cuisine: Italian". Offered the demo's tools (the SGD
restaurant service), the words from the tool's name on are never said: they become the call
(``tool_choice: auto``) or are dropped and logged (``none``, or nothing that parses) — through
the local generators (embedded AR and diffusion models, open-weight checkpoints: one
``DecoderTurnGenerator``) and the remote backend alike."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator, Sequence

import pytest
from openai_service import settings

from cadence.core.clock import MonotonicClock
from cadence.llm import ReplyPiece, Turn
from cadence.llm.checkpoint import load_model
from cadence.llm.decoding import ReplyStats
from cadence.llm.emission import WordEmitter
from cadence.llm.generator import DecoderTurnGenerator, GeneratorOptions
from cadence.llm.remote import create_openai_generator
from cadence.llm.result_slots import ReplyFacts
from cadence.llm.tools import ToolChoice, ToolSpec
from cadence.pipeline.tools.sgd_services import sgd_service_tools
from cadence.tooling.emulators.openai import FakeOpenAI, Stream

SPOKEN = "In FindRestaurants city: San Francisco; cuisine: Italian"
"""What the demo's agent said to "Italian food please"."""
HISTORY = [
    Turn("user", "I'd like a table for two in San Jose."),
    Turn("agent", "What kind of food would you like?"),
    Turn("user", "Italian food please"),
]
CALLED = {"city": "San Francisco", "cuisine": "Italian"}


def restaurant_tools() -> list[ToolSpec]:
    """What the demo's configuration offers of the restaurant service."""
    return [tool.spec for tool in sgd_service_tools(["Restaurants_1"])]


class ScriptedDecoder:
    """Writes ``reply`` whatever the prompt, in the pieces the local decoders emit (the shipped
    tool model's tokenizer, the runtime's ``WordEmitter``): what the demo's model did."""

    def __init__(self, reply: str) -> None:
        self.tokenizer = load_model("llm/checkpoints/dllm-tools.pt").tokenizer
        self.tokens = self.tokenizer.encode(reply)

    def prefill(self, context: list[int]) -> None:
        pass

    def decode(
        self,
        prompt: list[int],
        stats: ReplyStats | None = None,
        *,
        calls: bool = False,
        facts: ReplyFacts | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[ReplyPiece]:
        emitter = WordEmitter(self.tokenizer, MonotonicClock())
        for end in range(1, len(self.tokens) + 1):
            if (piece := emitter.update(self.tokens[:end])) is not None:
                yield piece
        if (last := emitter.finish(self.tokens)) is not None:
            yield last


class ScriptedFormat:
    def visible(self, history: Sequence[Turn]) -> list[Turn]:
        return list(history)

    def reply_facts(self, history: Sequence[Turn]) -> ReplyFacts:
        return ReplyFacts()

    def prompt(
        self, history: Sequence[Turn], history_turns: int, max_context_tokens: int
    ) -> list[int]:
        return [0]


def local_reply(reply: str, tool_choice: ToolChoice = "auto") -> list[ReplyPiece]:
    generator = DecoderTurnGenerator(ScriptedDecoder(reply), ScriptedFormat(), GeneratorOptions())

    async def pieces() -> list[ReplyPiece]:
        return [p async for p in generator.stream(HISTORY, restaurant_tools(), tool_choice)]

    return asyncio.run(pieces())


def test_a_local_model_that_writes_its_call_as_words_makes_the_call_instead() -> None:
    pieces = local_reply(SPOKEN)
    assert "".join(p.text for p in pieces) == "In"
    assert all(not p.tool_calls for p in pieces[:-1])
    [call] = pieces[-1].tool_calls
    assert call.name == "FindRestaurants"
    assert json.loads(call.arguments) == CALLED
    assert pieces[-1].error is None


def test_a_call_written_as_words_where_none_may_be_made_is_dropped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="cadence.llm.spoken_calls"):
        pieces = local_reply(SPOKEN, tool_choice="none")
    assert "".join(p.text for p in pieces) == "In"
    assert not any(p.tool_calls for p in pieces)
    assert "FindRestaurants city: San Francisco" in caplog.text


def test_a_tool_named_without_arguments_is_neither_said_nor_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="cadence.llm.spoken_calls"):
        pieces = local_reply("Let me look that up with FindRestaurants now")
    assert "".join(p.text for p in pieces) == "Let me look that up with"
    assert not any(p.tool_calls for p in pieces)
    assert "not said, not run" in caplog.text


def test_words_that_only_resemble_a_tool_name_are_said() -> None:
    reply = "I can find restaurants in San Jose; which cuisine: Italian?"
    pieces = local_reply(reply)
    assert "".join(p.text for p in pieces) == reply
    assert not any(p.tool_calls for p in pieces)


def test_without_tools_offered_a_call_written_as_words_is_neither_said_nor_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A session that offers no tools still has a model that learned them (the demo's
    exchange, heard through ``cadence converse`` before it offered the configuration's
    tools): its call, written as words, is recognised by its shape and dropped."""
    generator = DecoderTurnGenerator(ScriptedDecoder(SPOKEN), ScriptedFormat(), GeneratorOptions())

    async def pieces() -> list[ReplyPiece]:
        return [p async for p in generator.stream(HISTORY)]

    with caplog.at_level(logging.WARNING, logger="cadence.llm.spoken_calls"):
        heard = asyncio.run(pieces())
    assert "".join(p.text for p in heard) == "In"
    assert not any(p.tool_calls for p in heard)
    assert "FindRestaurants city: San Francisco" in caplog.text
    for said in (
        "Your table at McDonald is booked for 7 pm.",  # CamelCase, but no field after it
        "Please confirm: a table for two in San Jose.",  # a field, but no method's name
        "I'm sending it to iPhone users on YouTube.",
    ):
        generator = DecoderTurnGenerator(
            ScriptedDecoder(said), ScriptedFormat(), GeneratorOptions()
        )
        assert "".join(p.text for p in asyncio.run(pieces())) == said


async def test_a_service_that_writes_its_call_in_its_content_makes_the_call_instead(
    fake: FakeOpenAI, api_key: str
) -> None:
    fake.script = [
        Stream(pieces=("In Find", "Restaurants city: San Fran", "cisco; cuisine: Italian"))
    ]
    generator = create_openai_generator(settings(fake.base_url))
    try:
        pieces = [p async for p in generator.stream(HISTORY, restaurant_tools())]
    finally:
        await generator.aclose()
    assert "".join(p.text for p in pieces) == "In"
    [call] = pieces[-1].tool_calls
    assert (call.name, json.loads(call.arguments)) == ("FindRestaurants", CALLED)
    assert all(p.error is None for p in pieces)
