"""Tool calls through the `openai` backend against the fake service on loopback: the tools
offered in the request, the calls streamed back in fragments and assembled, the history with
calls and results sent on the next round."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest
from openai_service import FAULT_LIMIT_MS, settings

from cadence.llm import ReplyPiece, Turn
from cadence.llm.dialogue import ToolCall
from cadence.llm.remote import create_openai_generator
from cadence.llm.tools import ToolChoice, ToolSpec
from cadence.tooling.emulators.openai import FakeOpenAI, Stream, StreamedCall, ToolCalls

QUESTION = [Turn("user", "Is it raining in Paris? And book a table for two, please.")]
WEATHER = ToolSpec(
    "get_weather",
    "The current weather in a city; use it when the caller asks about the weather.",
    {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city's name"}},
        "required": ["city"],
    },
)
BOOKING = ToolSpec(
    "book_table",
    "Books a table; use it once the caller has said for how many and when.",
    {
        "type": "object",
        "properties": {"party": {"type": "integer"}, "time": {"type": "string"}},
        "required": ["party", "time"],
    },
)
WEATHER_ARGS = '{"city": "Paris"}'
BOOKING_ARGS = '{"party": 2, "time": "19:30", "note": "by the window, \\"quiet\\" – merci"}'


async def reply(
    base_url: str,
    history: Sequence[Turn] = QUESTION,
    tools: Sequence[ToolSpec] = (WEATHER, BOOKING),
    tool_choice: ToolChoice = "auto",
    **changes: object,
) -> list[ReplyPiece]:
    generator = create_openai_generator(settings(base_url, **changes))
    try:
        return [piece async for piece in generator.stream(history, tools, tool_choice)]
    finally:
        await generator.aclose()


async def test_a_call_whose_arguments_arrive_in_many_fragments_is_assembled_exactly(
    fake: FakeOpenAI, api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake.script = [
        ToolCalls(calls=(StreamedCall("call_Xk3", "book_table", BOOKING_ARGS),), fragment_chars=3)
    ]
    [piece] = await reply(fake.base_url)
    # A reply of only a call is no failure: no fallback, nothing logged.
    assert (piece.text, piece.error) == ("", None)
    assert piece.tool_calls == (ToolCall("call_Xk3", "book_table", BOOKING_ARGS),)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_two_calls_in_one_response_keep_their_order_ids_names_and_arguments(
    fake: FakeOpenAI, api_key: str
) -> None:
    fake.script = [
        ToolCalls(
            calls=(
                StreamedCall("call_w1", "get_weather", WEATHER_ARGS),
                StreamedCall("call_b2", "book_table", BOOKING_ARGS),
            )
        )
    ]
    [piece] = await reply(fake.base_url)
    assert piece.tool_calls == (
        ToolCall("call_w1", "get_weather", WEATHER_ARGS),
        ToolCall("call_b2", "book_table", BOOKING_ARGS),
    )


async def test_words_before_a_call_come_as_pieces_before_the_one_that_carries_it(
    fake: FakeOpenAI, api_key: str
) -> None:
    fake.script = [
        ToolCalls(
            pieces=("Let me ", "check the fore", "cast for you."),
            calls=(StreamedCall("call_w1", "get_weather", WEATHER_ARGS),),
        )
    ]
    pieces = await reply(fake.base_url)
    assert [p.text for p in pieces] == ["Let me", " check the", " forecast for", " you.", ""]
    assert [p.tool_calls for p in pieces] == [()] * 4 + [
        (ToolCall("call_w1", "get_weather", WEATHER_ARGS),)
    ]
    assert all(p.error is None for p in pieces)


@pytest.mark.parametrize("tool_choice", ["auto", "none"])
async def test_the_request_offers_the_tools_in_the_chat_completions_format(
    fake: FakeOpenAI, api_key: str, tool_choice: ToolChoice
) -> None:
    await reply(fake.base_url, tool_choice=tool_choice, extra_body={"realtime": True})
    [request] = fake.requests
    assert request.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": (
                    "The current weather in a city; use it when the caller asks about the weather."
                ),
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "description": "The city's name"}},
                    "required": ["city"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "book_table",
                "description": (
                    "Books a table; use it once the caller has said for how many and when."
                ),
                "parameters": {
                    "type": "object",
                    "properties": {"party": {"type": "integer"}, "time": {"type": "string"}},
                    "required": ["party", "time"],
                },
            },
        },
    ]
    assert request.body["tool_choice"] == tool_choice
    # extra_body comes last, so a service's own options can override anything before.
    assert list(request.body) == [
        "model",
        "messages",
        "max_tokens",
        "stream",
        "tools",
        "tool_choice",
        "realtime",
    ]


async def test_no_tools_offered_means_neither_tools_nor_tool_choice_in_the_request(
    fake: FakeOpenAI, api_key: str
) -> None:
    await reply(fake.base_url, tools=(), tool_choice="none")
    [request] = fake.requests
    assert list(request.body) == ["model", "messages", "max_tokens", "stream"]


async def test_calls_and_their_results_go_back_as_assistant_and_tool_messages(
    fake: FakeOpenAI, api_key: str
) -> None:
    history = [
        *QUESTION,
        Turn(
            "agent",
            "",
            tool_calls=(
                ToolCall("call_w1", "get_weather", WEATHER_ARGS),
                ToolCall("call_b2", "book_table", BOOKING_ARGS),
            ),
        ),
        Turn("tool", '{"sky": "rain", "celsius": 14}', tool_call_id="call_w1"),
        Turn("tool", '{"error": "no table at 19:30"}', tool_call_id="call_b2"),
        Turn("agent", "It is raining. No table at half past seven; eight?"),
        Turn("user", "Eight is fine."),
        Turn("agent", "Booking it.", tool_calls=(ToolCall("call_b3", "book_table", "{}"),)),
        Turn("tool", '{"booked": true}', tool_call_id="call_b3"),
    ]
    await reply(fake.base_url, history, system_prompt="Be brief.")
    [request] = fake.requests
    assert request.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": QUESTION[0].text},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_w1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": WEATHER_ARGS},
                },
                {
                    "id": "call_b2",
                    "type": "function",
                    "function": {"name": "book_table", "arguments": BOOKING_ARGS},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_w1", "content": '{"sky": "rain", "celsius": 14}'},
        {"role": "tool", "tool_call_id": "call_b2", "content": '{"error": "no table at 19:30"}'},
        {"role": "assistant", "content": "It is raining. No table at half past seven; eight?"},
        {"role": "user", "content": "Eight is fine."},
        {
            "role": "assistant",
            "content": "Booking it.",
            "tool_calls": [
                {
                    "id": "call_b3",
                    "type": "function",
                    "function": {"name": "book_table", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_b3", "content": '{"booked": true}'},
    ]


async def test_calls_without_an_id_get_ids_unique_in_the_session(
    fake: FakeOpenAI, api_key: str
) -> None:
    unnamed = StreamedCall(None, "get_weather", WEATHER_ARGS)
    fake.script = [ToolCalls(calls=(unnamed, unnamed)), ToolCalls(calls=(unnamed,))]
    generator = create_openai_generator(settings(fake.base_url))
    try:
        replies = [[p async for p in generator.stream(QUESTION, (WEATHER,))] for _ in range(2)]
    finally:
        await generator.aclose()
    ids = [call.id for [piece] in replies for call in piece.tool_calls]
    assert len(ids) == len(set(ids)) == 3
    assert all(ids)


async def test_a_call_without_a_name_ends_the_reply_with_the_reason(
    fake: FakeOpenAI, api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake.script = [
        ToolCalls(
            pieces=("One moment. ",),
            calls=(
                StreamedCall("call_w1", "get_weather", WEATHER_ARGS),
                StreamedCall("call_x2", None, "{}"),
            ),
        )
    ]
    pieces = await reply(fake.base_url)
    # The words were heard; no call is run, and no fallback follows them.
    assert [(p.text, p.tool_calls) for p in pieces] == [("One moment.", ()), ("", ())]
    assert pieces[-1].error == "malformed tool call: no function name (call 1)"
    assert pieces[-1].error in caplog.text


async def test_a_call_is_progress_for_the_first_piece_deadline(
    fake: FakeOpenAI, api_key: str
) -> None:
    # The call begins at once; its arguments then take twice the first-piece limit (four
    # fragments, 150 ms apart).
    fake.script = [
        ToolCalls(
            calls=(StreamedCall("call_w1", "get_weather", WEATHER_ARGS),),
            fragment_chars=5,
            gap_s=0.15,
        )
    ]
    [piece] = await reply(fake.base_url, first_piece_timeout_ms=FAULT_LIMIT_MS)
    assert piece.error is None
    assert piece.tool_calls == (ToolCall("call_w1", "get_weather", WEATHER_ARGS),)


async def test_a_stream_that_stalls_in_a_call_runs_into_the_stall_deadline(
    fake: FakeOpenAI, api_key: str
) -> None:
    fake.script = [
        ToolCalls(calls=(StreamedCall("call_w1", "get_weather", WEATHER_ARGS),), end="hang")
    ]
    [piece] = await reply(fake.base_url, stall_timeout_ms=FAULT_LIMIT_MS)
    assert (piece.text, piece.tool_calls) == ("", ())  # nothing was heard: the fallback
    assert piece.error == f"the stream stalled: nothing for stall_timeout_ms ({FAULT_LIMIT_MS} ms)"


async def test_the_round_after_the_results_streams_the_spoken_answer(
    fake: FakeOpenAI, api_key: str
) -> None:
    fake.script = [
        ToolCalls(calls=(StreamedCall("call_w1", "get_weather", WEATHER_ARGS),)),
        Stream(("It is rain", "ing in Paris", ", 14 degrees.")),
    ]
    generator = create_openai_generator(settings(fake.base_url))
    try:
        [called] = [p async for p in generator.stream(QUESTION, (WEATHER,))]
        history = [
            *QUESTION,
            Turn("agent", "", tool_calls=called.tool_calls),
            Turn("tool", '{"sky": "rain", "celsius": 14}', tool_call_id="call_w1"),
        ]
        answer = [p async for p in generator.stream(history, (WEATHER,))]
    finally:
        await generator.aclose()
    assert [p.text for p in answer] == ["It is", " raining in", " Paris, 14", " degrees."]
    assert all(p.error is None and not p.tool_calls for p in answer)
    roles = [m["role"] for m in fake.requests[-1].body["messages"]]
    assert roles[-3:] == ["user", "assistant", "tool"]
    assert (len(fake.requests), fake.connections) == (2, 1)


def test_the_fake_streams_a_call_as_the_documented_deltas() -> None:
    """What the client is tested against is what OpenAI sends: the first delta names the call,
    the others only continue its arguments."""
    call = StreamedCall("call_w1", "get_weather", WEATHER_ARGS)
    assert ToolCalls(calls=(call,), fragment_chars=8).deltas() == [
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_w1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ' "Paris"'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]},
    ]
    assert ToolCalls.finish_reason == "tool_calls"
