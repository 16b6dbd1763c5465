"""``FakeOpenAI``: a local stand-in for an OpenAI-compatible chat-completions service.

The ``openai`` backend is tested against it with the real client library over real sockets:
it speaks HTTP/1.1 on loopback (keep-alive, chunked bodies) and sends real server-sent-event
bytes. Only the remote service is faked. Each request is answered by the next behaviour of
``script`` (then ``respond``'s choice, or ``default``), and every request is kept in
``requests`` as it arrived, so a test can see the model name, the body's options and the
bearer token the service received.
The benchmark of the backend (``tooling/bench/openai_first_piece.py``) plays against it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Literal


@dataclass(frozen=True)
class Stream:
    """A 200 event stream: ``pieces`` as chat-completion chunk deltas, the first after
    ``first_delay_s`` and each next one ``gap_s`` later. ``end``: ``done`` sends the final
    chunk and ``[DONE]``; ``hang`` sends nothing more and waits for the client to go (a
    stalled service); ``drop`` closes the connection in the middle of the body."""

    pieces: tuple[str, ...]
    first_delay_s: float = 0.0
    gap_s: float = 0.0
    end: Literal["done", "hang", "drop"] = "done"
    finish_reason: ClassVar[str] = "stop"

    def deltas(self) -> list[dict[str, Any]]:
        """The deltas of the chunks after the role's, in order."""
        return [{"content": piece} for piece in self.pieces]


@dataclass(frozen=True)
class StreamedCall:
    """One call of a ``ToolCalls`` reply. ``None`` leaves the id, or the name, out of the
    stream (some servers send no id; a malformed stream no name)."""

    id: str | None
    name: str | None
    arguments: str

    def deltas(self, index: int, fragment_chars: int) -> list[dict[str, Any]]:
        """As OpenAI streams a call: its index, id, type and name with empty arguments, then
        the arguments in fragments, each delta naming only the index."""
        first: dict[str, Any] = {"index": index, "type": "function", "function": {}}
        if self.id is not None:
            first["id"] = self.id
        if self.name is not None:
            first["function"]["name"] = self.name
        first["function"]["arguments"] = ""
        fragments = [
            self.arguments[start : start + fragment_chars]
            for start in range(0, len(self.arguments), fragment_chars)
        ]
        rest = [{"index": index, "function": {"arguments": part}} for part in fragments]
        return [{"tool_calls": [delta]} for delta in [first, *rest]]


@dataclass(frozen=True, kw_only=True)
class ToolCalls(Stream):
    """A 200 event stream of a reply that calls tools: ``pieces`` of text first (if any), then
    each of ``calls`` in turn, its arguments ``fragment_chars`` at a time, one delta a chunk;
    the final chunk's ``finish_reason`` is ``tool_calls``. Timing and ``end`` as ``Stream``'s;
    ``pieces`` too is named, as every field here."""

    pieces: tuple[str, ...] = ()
    calls: tuple[StreamedCall, ...]
    fragment_chars: int = 4
    finish_reason: ClassVar[str] = "tool_calls"

    def deltas(self) -> list[dict[str, Any]]:
        calls = [
            delta
            for index, call in enumerate(self.calls)
            for delta in call.deltas(index, self.fragment_chars)
        ]
        return [*super().deltas(), *calls]


@dataclass(frozen=True)
class Status:
    """An HTTP error with an OpenAI-style JSON error body."""

    code: int
    message: str


@dataclass(frozen=True)
class RawEvents:
    """A 200 event stream whose body is these bytes, as they are (malformed streams)."""

    body: bytes


@dataclass(frozen=True)
class Silent:
    """Takes the request and never answers (a service that hangs)."""


Behaviour = Stream | ToolCalls | Status | RawEvents | Silent


@dataclass(frozen=True)
class ReceivedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Header names in lower case."""
    body: dict[str, Any]
    arrived_s: float
    """When the whole request had arrived (the event loop's clock)."""


@dataclass
class FakeOpenAI:
    default: Behaviour = Stream(("Sure, ", "I can ", "help ", "with that."))
    script: list[Behaviour] = field(default_factory=list)
    """Behaviours for the next requests, first first; ``default`` once it is empty."""
    respond: Callable[[ReceivedRequest], Behaviour] | None = None
    """Once ``script`` is empty, chooses the answer from the request, as a model would from
    the conversation: for calls whose number of requests is not known in advance (a reply
    generated on a transcript that then changed is asked for again)."""
    requests: list[ReceivedRequest] = field(default_factory=list)
    answered_s: dict[int, float] = field(default_factory=dict)
    """When the answer to ``requests[i]`` was written to its end (the event loop's clock)."""
    connections: int = 0
    """Connections the client opened."""
    disconnects: int = 0
    """Replies the client walked away from before the service had finished them."""
    _disconnected: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _server: asyncio.Server | None = field(default=None, init=False)
    _open: dict[asyncio.Task[None], asyncio.StreamWriter] = field(default_factory=dict, init=False)
    """Each open connection's handler and writer."""

    @property
    def base_url(self) -> str:
        assert self._server is not None, "use `async with FakeOpenAI()`"
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def wait_for_disconnect(self, timeout_s: float) -> None:
        """Returns once the client has closed a connection in the middle of a reply."""
        await asyncio.wait_for(self._disconnected.wait(), timeout_s)

    async def __aenter__(self) -> FakeOpenAI:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        handlers = list(self._open)
        for writer in self._open.values():
            writer.close()  # the handler reads the end of its connection and returns
        await asyncio.gather(*handlers)
        await self._server.wait_closed()

    # --- one connection ---------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._open[task] = writer
        self.connections += 1
        try:
            while (request := await _read_request(reader)) is not None:
                index = len(self.requests)
                self.requests.append(request)
                if self.script:
                    behaviour = self.script.pop(0)
                elif self.respond is not None:
                    behaviour = self.respond(request)
                else:
                    behaviour = self.default
                kept = await self._answer(request, behaviour, reader, writer)
                self.answered_s[index] = asyncio.get_running_loop().time()
                if not kept:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            del self._open[task]
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(
        self,
        request: ReceivedRequest,
        behaviour: Behaviour,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """Answer one request; ``False`` when the connection is to be closed after it."""
        match behaviour:
            case Status(code, message):
                body = json.dumps({"error": {"message": message, "type": "fake", "code": code}})
                writer.write(_head(code, "application/json", len(body)) + body.encode())
                await writer.drain()
                return True
            case RawEvents(raw):
                writer.write(_head(200, "text/event-stream") + _chunk(raw) + b"0\r\n\r\n")
                await writer.drain()
                return True
            case Stream():  # a ToolCalls too
                return await self._stream(request, behaviour, reader, writer)
            case Silent():
                await self._wait(reader, None)
                return False

    async def _stream(
        self,
        request: ReceivedRequest,
        stream: Stream,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        model = str(request.body.get("model", ""))
        writer.write(_head(200, "text/event-stream") + _chunk(_event(model, {"role": "assistant"})))
        await writer.drain()
        for index, delta in enumerate(stream.deltas()):
            if not await self._wait(reader, stream.gap_s if index else stream.first_delay_s):
                return False
            writer.write(_chunk(_event(model, delta)))
            await writer.drain()
        match stream.end:
            case "done":
                writer.write(_chunk(_event(model, {}, finish=stream.finish_reason)))
                writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
                await writer.drain()
                return True
            case "hang":
                await self._wait(reader, None)
                return False
            case "drop":
                return False

    async def _wait(self, reader: asyncio.StreamReader, seconds: float | None) -> bool:
        """Let ``seconds`` pass (forever: ``None``) unless the client closes the connection
        first; ``False`` if it did. (The client sends nothing while it awaits the reply, so
        anything the reader returns is the end of the connection.)"""
        if seconds == 0:
            return True
        try:
            await asyncio.wait_for(reader.read(1), seconds)
        except TimeoutError:
            return True
        self.disconnects += 1
        self._disconnected.set()
        return False


async def _read_request(reader: asyncio.StreamReader) -> ReceivedRequest | None:
    """The next request on a keep-alive connection, or ``None`` once the client closed it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    request_line, *header_lines = head.decode("latin-1").split("\r\n")[:-2]
    method, path, _ = request_line.split(" ", 2)
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    arrived_s = asyncio.get_running_loop().time()
    return ReceivedRequest(method, path, headers, json.loads(body) if body else {}, arrived_s)


def _head(status: int, content_type: str, length: int | None = None) -> bytes:
    framing = f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    return (
        f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
        f"content-type: {content_type}\r\n{framing}\r\ncache-control: no-cache\r\n\r\n"
    ).encode()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()
