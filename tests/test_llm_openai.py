"""The `openai` backend against a fake OpenAI-compatible service on loopback: the real client
library, real sockets and real event-stream bytes; only the service is a stand-in."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence

import pytest
from openai_service import FAULT_LIMIT_MS, KEY, KEY_ENV, LIMIT_MS, settings
from speech_data import clip
from voice_call import PlayedOut

from cadence.llm import CheckpointError, ReplyPiece, Turn, create_generator
from cadence.llm.options import LLMOptions
from cadence.llm.remote import create_openai_generator
from cadence.pipeline.agent import Agent
from cadence.pipeline.config import CadenceConfig, FaultsConfig, ModelsConfig, TracingConfig
from cadence.pipeline.events import ReplyAudioEvent, TraceEvent
from cadence.pipeline.tracing import AnchorEvent
from cadence.tooling.caller import SimulatedCaller
from cadence.tooling.emulators.openai import FakeOpenAI, RawEvents, Silent, Status, Stream

FALLBACK = "Sorry, one moment please."
QUESTION = [Turn("user", "Can you book a table for two tonight?")]


async def reply(
    base_url: str, history: Sequence[Turn] = QUESTION, **changes: object
) -> list[ReplyPiece]:
    generator = create_openai_generator(settings(base_url, **changes))
    try:
        return [piece async for piece in generator.stream(history)]
    finally:
        await generator.aclose()


async def test_a_streamed_reply_arrives_in_order_as_whole_words(
    fake: FakeOpenAI, api_key: str
) -> None:
    fake.script = [Stream(("Sure", ", I c", "an bo", "ok that", " for you", "."))]
    pieces = await reply(fake.base_url)
    assert [p.text for p in pieces] == ["Sure, I", " can", " book", " that for", " you."]
    assert [p.at_ms for p in pieces] == sorted(p.at_ms for p in pieces)
    assert all(p.error is None for p in pieces)


async def test_the_request_carries_the_conversation_model_and_extra_body(
    fake: FakeOpenAI, api_key: str
) -> None:
    history = [
        Turn("user", "Hi, I need a table."),
        Turn("agent", "For how many?"),
        Turn("agent", ""),  # a reply cut off before the caller heard any of it
        Turn("user", "Two, tonight."),
    ]
    extra = {"realtime": True, "reasoning_effort": "instant"}
    await reply(fake.base_url, history, extra_body=extra, max_tokens=64, system_prompt="Be brief.")
    [request] = fake.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    body = request.body
    assert body["model"] == "mercury-2"
    assert body["stream"] is True
    assert body["max_tokens"] == 64
    assert body["realtime"] is True
    assert body["reasoning_effort"] == "instant"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi, I need a table."},
        {"role": "assistant", "content": "For how many?"},
        {"role": "user", "content": "Two, tonight."},
    ]


async def test_the_api_key_goes_as_a_bearer_token_and_into_no_log(
    fake: FakeOpenAI, api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # A service that echoes the key back in its error message must not get it logged either.
    fake.script = [Stream(("Hello.",)), Status(401, f"Incorrect API key provided: {KEY}")]
    generator = create_openai_generator(settings(fake.base_url))
    try:
        assert [p.text async for p in generator.stream(QUESTION)] == ["Hello."]
        [failed] = [p async for p in generator.stream(QUESTION)]
    finally:
        await generator.aclose()
    assert [r.headers["authorization"] for r in fake.requests] == [f"Bearer {KEY}"] * 2
    assert failed.error == "HTTP 401: Incorrect API key provided: [API key]"
    assert "HTTP 401" in caplog.text
    assert KEY not in caplog.text


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


SHORT_CONNECT = {"connect_timeout_ms": FAULT_LIMIT_MS}
SHORT_FIRST_PIECE = {"first_piece_timeout_ms": FAULT_LIMIT_MS}
WITHIN_S = LIMIT_MS / 2000
"""A failure is seen at once, or by the short limit it runs into (``FAULT_LIMIT_MS``): only a
reply that waited for one of the other limits (``LIMIT_MS``) — or hung — takes this long, however
busy the machine. (One that waited out the slow service's 5 s would get its words, no error.)"""


@pytest.mark.parametrize(
    ("behaviour", "base_url", "limits", "reason"),
    [
        (
            None,
            f"http://127.0.0.1:{_closed_port()}/v1",
            {},
            r"^connection failed: \[Errno 111\] Connect call failed",
        ),
        (None, "http://cadence-test.invalid/v1", SHORT_CONNECT, r"^(connection failed|timed out)"),
        (Status(401, "Invalid API key"), None, {}, r"^HTTP 401: Invalid API key$"),
        (Status(429, "Rate limit reached"), None, {}, r"^HTTP 429: Rate limit reached$"),
        (Status(500, "The server had an error"), None, {}, r"^HTTP 500: The server had an error$"),
        (
            RawEvents(b'data: {"choices": [{"delta": {"content": "Hel\n\n'),
            None,
            {},
            r"^malformed event: not a chat-completion chunk",
        ),
        (RawEvents(b"<html>Bad gateway</html>"), None, {}, r"^the service sent no text$"),
        (
            RawEvents(b'data: {"error": {"message": "Overloaded"}}\n\n'),
            None,
            {},
            r"^the service reported an error in the stream: Overloaded$",
        ),
        (Stream(()), None, {}, r"^the service sent no text$"),
        (
            Silent(),
            None,
            SHORT_FIRST_PIECE,
            rf"^no words within first_piece_timeout_ms \({FAULT_LIMIT_MS} ms\)$",
        ),
        (
            Stream(("Hel",), end="hang"),
            None,
            SHORT_FIRST_PIECE,
            r"^no words within first_piece_timeout_ms",
        ),
        (
            Stream(("Sure.",), first_delay_s=5),
            None,
            SHORT_FIRST_PIECE,
            r"^no words within first_piece_timeout_ms",
        ),
    ],
    ids=[
        "connection-refused",
        "dns",
        "http-401",
        "http-429",
        "http-500",
        "malformed-json",
        "not-an-event-stream",
        "error-event",
        "empty-stream",
        "no-answer",
        "stall-before-a-word",
        "slow-first-piece",
    ],
)
async def test_a_reply_that_cannot_begin_speaks_the_fallback_and_reports_why(
    fake: FakeOpenAI,
    api_key: str,
    caplog: pytest.LogCaptureFixture,
    behaviour: Stream | Status | RawEvents | Silent | None,
    base_url: str | None,
    limits: dict[str, int],
    reason: str,
) -> None:
    if behaviour is not None:
        fake.script = [behaviour]
    async with asyncio.timeout(WITHIN_S):
        pieces = await reply(base_url or fake.base_url, QUESTION, **limits)
    assert [p.text for p in pieces] == [""]  # the turn engine speaks the fallback
    assert pieces[0].error is not None
    assert re.search(reason, pieces[0].error), pieces[0].error
    assert pieces[0].error in caplog.text  # logged with its reason


@pytest.mark.parametrize(
    ("end", "reason"),
    [
        ("hang", rf"^the stream stalled: nothing for stall_timeout_ms \({FAULT_LIMIT_MS} ms\)$"),
        ("drop", r"^connection failed: peer closed connection"),
    ],
)
async def test_a_reply_that_breaks_midway_ends_there_and_reports_why(
    fake: FakeOpenAI, api_key: str, end: str, reason: str
) -> None:
    fake.script = [
        Stream(("Let me ", "check the ", "availa"), end="hang" if end == "hang" else "drop")
    ]
    pieces = await reply(
        fake.base_url, stall_timeout_ms=FAULT_LIMIT_MS if end == "hang" else LIMIT_MS
    )
    # The words spoken stay; the half word held back is dropped; no fallback after them.
    assert [p.text for p in pieces] == ["Let me", " check the", ""]
    assert [p.error is None for p in pieces] == [True, True, False]
    assert re.search(reason, pieces[-1].error or ""), pieces[-1].error


async def test_a_reply_that_runs_too_long_is_cut_off(fake: FakeOpenAI, api_key: str) -> None:
    # Ten seconds of words, cut off after one: the first word is there well before the limit.
    fake.script = [Stream(("one ",) * 100, gap_s=0.1)]
    pieces = await reply(fake.base_url, reply_timeout_ms=1000)
    assert pieces[0].text == "one"
    assert pieces[-1].text == ""
    assert pieces[-1].error == "the reply took longer than reply_timeout_ms (1000 ms)"


@pytest.mark.parametrize("how", ["cancelled while waiting", "closed between pieces"])
async def test_barge_in_closes_the_http_stream_at_once(
    fake: FakeOpenAI, api_key: str, how: str
) -> None:
    fake.script = [Stream(("Let me ",), end="hang")]
    generator = create_openai_generator(settings(fake.base_url))  # no limit can close it
    stream = generator.stream(QUESTION)
    assert (await anext(stream)).text == "Let me"
    if how == "cancelled while waiting":
        waiting = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.05)  # the generator is now awaiting the service
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    else:
        await stream.aclose()  # what the turn engine does when cancelled while pushing
    await fake.wait_for_disconnect(timeout_s=10)  # the close, not a limit (30 s), ended it
    assert fake.disconnects == 1
    await generator.aclose()


async def test_later_turns_reuse_the_connection(fake: FakeOpenAI, api_key: str) -> None:
    generator = create_openai_generator(settings(fake.base_url))
    try:
        for _ in range(3):
            assert "".join([p.text async for p in generator.stream(QUESTION)])
    finally:
        await generator.aclose()
    assert (len(fake.requests), fake.connections) == (3, 1)


async def test_a_missing_api_key_fails_at_load_naming_the_config_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    llm = LLMOptions(backend="openai", openai=settings("http://127.0.0.1:9/v1"))
    expected = rf"models\.llm\.openai\.api_key_env: the environment variable {KEY_ENV} is not set"
    with pytest.raises(CheckpointError, match=expected):
        create_generator(llm)
    with pytest.raises(CheckpointError, match=expected):
        await Agent(CadenceConfig(models=ModelsConfig(llm=llm))).load()


async def test_a_session_on_the_openai_backend_answers_spoken_questions(
    fake: FakeOpenAI, api_key: str
) -> None:
    """A real call: speech in, the reply streamed from the service and spoken; the second
    turn's service error is heard as the fallback phrase and traced as `llm_error`."""
    config = CadenceConfig(
        models=ModelsConfig(llm=LLMOptions(backend="openai", openai=settings(fake.base_url))),
        faults=FaultsConfig(reply_fallback=FALLBACK),
        tracing=TracingConfig(jsonl_path=None),
    )
    agent = Agent(config)
    await agent.load()
    played = PlayedOut()
    session = await agent.open_session(observers=[played])
    caller = SimulatedCaller(session)
    async with session:
        fake.default = Stream(("Of course, ", "I will ", "mend it."), gap_s=0.02)
        await caller.pause(500)
        await caller.say(clip("sb_spk2_snt4").audio())
        await _until(lambda: len(session.history) == 2, caller)
        await _until(lambda: bool(played.replies), caller)  # the reply is played to its end
        fake.default = Status(500, "The model is overloaded")
        await caller.say(clip("sb_spk2_snt2").audio())
        await _until(lambda: len(session.history) == 4, caller)
    events = [event async for event in session.events]

    history = session.history
    assert [t.speaker for t in history] == ["user", "agent", "user", "agent"]
    assert "coat" in history[0].text.lower()
    assert history[1].text == "Of course, I will mend it."
    assert history[3].text == FALLBACK
    first, second = [e.trace for e in events if isinstance(e, TraceEvent)]
    assert set(first.events) >= {AnchorEvent.LLM_FIRST_EMIT, AnchorEvent.AUDIO_OUT_FIRST}
    assert "llm_error" not in first.annotations
    assert AnchorEvent.AUDIO_OUT_FIRST in second.events  # the caller heard the fallback
    assert second.annotations["llm_error"] == "HTTP 500: The model is overloaded"
    spoken = {e.reply_index for e in events if isinstance(e, ReplyAudioEvent)}
    assert len(spoken) == 2
    # The second request carried the first exchange.
    roles = [m["role"] for m in fake.requests[-1].body["messages"]]
    assert roles == ["system", "user", "assistant", "user"]


def test_the_first_piece_benchmark_prints_its_figure() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "cadence.tooling.bench.openai_first_piece", "--turns", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert re.search(r"next 3 turns \(kept connection\): median [\d.]+ ms", run.stdout)


async def _until(condition: Callable[[], bool], caller: SimulatedCaller) -> None:
    """Let the caller stay silent until ``condition`` holds (on a busy machine, transcribing
    and answering take their time)."""
    for _ in range(600):
        if condition():
            return
        await caller.pause(100)
    raise AssertionError("the session did not get there within 60 s")
