"""Server-sent events, decoded from the bytes as they arrive (the WHATWG event-stream format,
as far as a chat-completions stream uses it: ``data`` fields, comments, any line ending)."""

from __future__ import annotations

import re

_LINE_END = re.compile(rb"\r\n|\r|\n")


class EventStreamDecoder:
    """Turns the chunks of an event stream, cut anywhere, into the ``data`` of each event."""

    def __init__(self) -> None:
        self._pending = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        """The data of every event that ``chunk`` completes."""
        buffer = self._pending + chunk
        # A CR at the end may be the first half of a CRLF: it waits for the next chunk.
        held_cr = buffer.endswith(b"\r")
        *lines, unfinished = _LINE_END.split(buffer[:-1] if held_cr else buffer)
        self._pending = unfinished + b"\r" if held_cr else unfinished
        events = []
        for line in lines:
            if (data := self._line(line.decode("utf-8", errors="replace"))) is not None:
                events.append(data)
        return events

    def _line(self, line: str) -> str | None:
        if not line:  # a blank line dispatches the event
            data, self._data = self._data, []
            return "\n".join(data) if data else None
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value.removeprefix(" "))
        # Comments (":" first), `event`, `id` and `retry` mean nothing to a chat completion.
        return None

    def finish(self) -> list[str]:
        """At the end of the stream: the data of an event whose blank line ended in a CR that
        was still waiting for a possible LF."""
        return self.feed(b"\n") if self._pending.endswith(b"\r") else []
