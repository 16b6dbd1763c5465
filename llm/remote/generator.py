"""``OpenAITurnGenerator``: the turn generator over an OpenAI-compatible chat-completions
service, streamed — what ``models.llm.backend: openai`` runs."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing

import httpx2

from cadence.core.clock import Clock, MonotonicClock
from cadence.llm.checkpoint import CheckpointError
from cadence.llm.dialogue import Turn
from cadence.llm.emission import ReplyPiece
from cadence.llm.options import OpenAIOptions
from cadence.llm.remote.chunks import DONE, Delta, ServiceError, chunk_delta, error_message
from cadence.llm.remote.deadlines import ReplyDeadlines
from cadence.llm.remote.failures import describe_failure
from cadence.llm.remote.messages import chat_messages, offered_tools
from cadence.llm.remote.sse import EventStreamDecoder
from cadence.llm.remote.tool_calls import ToolCallAssembler, ToolCallError
from cadence.llm.remote.words import WordBuffer
from cadence.llm.spoken_calls import guard_spoken_calls
from cadence.llm.tools import ToolChoice, ToolSpec

logger = logging.getLogger(__name__)


def create_openai_generator(
    settings: OpenAIOptions, clock: Clock | None = None
) -> OpenAITurnGenerator:
    """The generator for the service ``settings`` (``models.llm.openai``) names; fails fast
    with a :class:`CheckpointError` naming the config key when the API key is not there."""
    if not settings.base_url or not settings.model:
        raise CheckpointError("models.llm.openai: backend `openai` needs `base_url` and `model`")
    api_key = os.environ.get(settings.api_key_env, "").strip()
    if not api_key:
        raise CheckpointError(
            f"models.llm.openai.api_key_env: the environment variable {settings.api_key_env} "
            "is not set; export the service's API key in it"
        )
    return OpenAITurnGenerator(
        settings,
        base_url=settings.base_url,
        model=settings.model,
        api_key=api_key,
        clock=clock or MonotonicClock(),
    )


class OpenAITurnGenerator:
    """Streams each reply from the service and hands it on at word boundaries.

    A reply that calls tools ends with a piece carrying the calls, after its words (if any):
    the service streams each call in fragments, and only the whole call can be run.

    No failure of the service ends the call: a reply that cannot begin (no connection, an HTTP
    error, a malformed or empty stream, no words within ``first_piece_timeout_ms``) or that
    stalls or breaks after its first words ends there, with a last piece that carries the
    reason as ``error`` — the turn engine then speaks ``faults.reply_fallback`` if nothing of
    the reply was heard, and traces the reason. The reason is logged (never the API key).

    One HTTP client per generator, that is per session: its pooled keep-alive connection
    spares each later turn the TCP and TLS handshakes. Nothing is retried: a retry waits out a
    back-off that the caller would hear as silence, so a failed reply speaks the fallback
    instead, and the caller's next words start a fresh request.

    The client is httpx2 (the HTTP layer of the official ``openai`` SDK) with the event stream
    decoded here: the SDK's stream, ended early (an error, a barge-in), leaves its inner async
    generators to the garbage collector, whose finalizers then run as stray tasks; here every
    layer is closed in place, so a cancelled reply closes its connection before it returns.
    """

    def __init__(
        self,
        settings: OpenAIOptions,
        *,
        base_url: str,
        model: str,
        api_key: str,
        clock: Clock,
    ) -> None:
        self._settings = settings
        self._model = model
        self._api_key = api_key
        self._clock = clock
        self._made_up_ids = (f"call_{n}" for n in itertools.count(1))
        """Ids for the calls a service streams without one, unique in the session."""
        self._client = httpx2.AsyncClient(
            base_url=base_url.rstrip("/") + "/",
            headers={"Authorization": f"Bearer {api_key}", "Accept": "text/event-stream"},
            timeout=httpx2.Timeout(
                settings.reply_timeout_ms / 1000, connect=settings.connect_timeout_ms / 1000
            ),
        )

    async def prefill(self, history: Sequence[Turn]) -> None:
        """Nothing to prepare: the service keeps no state between requests."""

    def stream(
        self,
        history: Sequence[Turn],
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice = "auto",
    ) -> AsyncGenerator[ReplyPiece, None]:
        """The reply to ``history`` (ending with the user's turn, or with the results of the
        agent's calls), piece by piece as its words arrive, then the calls of ``tools`` it
        makes, if any. Closing or cancelling the iteration closes the HTTP stream at once. A
        call the service writes in its words is not said (``llm/spoken_calls.py``)."""
        pieces = self._pieces(history, tools, tool_choice)
        return guard_spoken_calls(pieces, tools, tool_choice, self._made_up_ids)

    async def _pieces(
        self, history: Sequence[Turn], tools: Sequence[ToolSpec], tool_choice: ToolChoice
    ) -> AsyncGenerator[ReplyPiece, None]:
        loop = asyncio.get_running_loop()
        deadlines = ReplyDeadlines(self._settings, loop.time())
        words = WordBuffer()
        calls = ToolCallAssembler()
        failure: str | None = None
        async with aclosing(self._deltas(history, tools, tool_choice)) as deltas:
            while True:
                try:
                    async with asyncio.timeout_at(deadlines.next_s()):
                        delta = await anext(deltas, None)
                except TimeoutError:
                    failure = deadlines.missed()
                    break
                except Exception as exc:  # whatever the service does, the call goes on
                    failure = describe_failure(exc, self._api_key)
                    break
                if delta is None:
                    break
                deadlines.chunk_arrived(loop.time())
                if delta.tool_calls:
                    calls.feed(delta.tool_calls)
                    deadlines.calling = True
                if (piece := words.feed(delta.content or "")) is not None:
                    deadlines.spoken = True
                    yield ReplyPiece(piece, self._clock.now_ms())
        if failure is not None:
            yield self._failed(failure, spoken=deadlines.spoken)
            return
        if (rest := words.flush()) is not None:
            deadlines.spoken = True
            yield ReplyPiece(rest, self._clock.now_ms())
        if (last := self._last_piece(calls, spoken=deadlines.spoken)) is not None:
            yield last

    async def aclose(self) -> None:
        """Close the pooled connection (the session is over)."""
        await self._client.aclose()

    async def _deltas(
        self, history: Sequence[Turn], tools: Sequence[ToolSpec], tool_choice: ToolChoice
    ) -> AsyncGenerator[Delta, None]:
        """The reply event by event as the service streams it (an empty delta for an event
        with nothing, such as the role or the finish reason). After ``[DONE]`` the rest of the
        body is read, so that the connection can serve the next turn."""
        body = {
            "model": self._model,
            "messages": chat_messages(self._settings.system_prompt, history),
            "max_tokens": self._settings.max_tokens,
            "stream": True,
            **offered_tools(tools, tool_choice),
            **self._settings.extra_body,
        }
        async with self._client.stream("POST", "chat/completions", json=body) as response:
            if response.status_code != 200:
                message = error_message(await response.aread())
                raise ServiceError(f"HTTP {response.status_code}: {message}")
            events = EventStreamDecoder()
            async with aclosing(response.aiter_bytes()) as parts:
                async for part in parts:
                    for data in events.feed(part):
                        if data == DONE:
                            async for _ in parts:  # the end of the body, normally at hand
                                pass
                            return
                        yield chunk_delta(data)
            for data in events.finish():
                if data != DONE:
                    yield chunk_delta(data)

    def _last_piece(self, calls: ToolCallAssembler, *, spoken: bool) -> ReplyPiece | None:
        """What ends a reply the service finished: the piece with its calls; a failure if a
        call cannot be run, or if there was neither a word nor a call; nothing after words
        alone."""
        try:
            tool_calls = calls.finish(self._made_up_ids)
        except ToolCallError as exc:
            return self._failed(str(exc), spoken=spoken)
        if tool_calls:
            return ReplyPiece("", self._clock.now_ms(), tool_calls=tool_calls)
        if not spoken:
            return self._failed("the service sent no text", spoken=False)
        return None

    def _failed(self, failure: str, *, spoken: bool) -> ReplyPiece:
        """The empty piece that ends a failed reply with its reason (a word held back may be
        cut in half: it is dropped)."""
        logger.warning(
            "models.llm.openai (%s at %s): %s; %s",
            self._model,
            self._client.base_url,
            failure,
            "the reply ends here" if spoken else "no reply",
        )
        return ReplyPiece("", self._clock.now_ms(), error=failure)
