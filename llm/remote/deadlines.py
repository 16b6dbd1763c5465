"""How long one reply may keep the caller waiting on the service."""

from __future__ import annotations

from cadence.llm.options import OpenAIOptions


class ReplyDeadlines:
    """The first words (or the first tool call) must come within ``first_piece_timeout_ms`` of
    the request; after them, no gap between chunks may exceed ``stall_timeout_ms``; and the
    whole reply must end within ``reply_timeout_ms``. Times are seconds on the event loop's
    clock: the wait is real network time, whatever clock the session stamps its events with."""

    def __init__(self, settings: OpenAIOptions, started_s: float) -> None:
        self._settings = settings
        self._first_s = started_s + settings.first_piece_timeout_ms / 1000
        self._end_s = started_s + settings.reply_timeout_ms / 1000
        self._last_chunk_s = started_s
        self.spoken = False
        """Whether words of the reply have been handed on."""
        self.calling = False
        """Whether a tool call has begun: the reply is under way, though nothing is spoken."""

    def chunk_arrived(self, at_s: float) -> None:
        self._last_chunk_s = at_s

    def next_s(self) -> float:
        """When to give up waiting for the next chunk."""
        return min(self._end_s, self._wait_s())

    def missed(self) -> str:
        """Which deadline ``next_s`` was, as the reason the reply ended."""
        s = self._settings
        if self._end_s <= self._wait_s():
            return f"the reply took longer than reply_timeout_ms ({s.reply_timeout_ms} ms)"
        if self._under_way:
            return f"the stream stalled: nothing for stall_timeout_ms ({s.stall_timeout_ms} ms)"
        return f"no words within first_piece_timeout_ms ({s.first_piece_timeout_ms} ms)"

    @property
    def _under_way(self) -> bool:
        return self.spoken or self.calling

    def _wait_s(self) -> float:
        if self._under_way:
            return self._last_chunk_s + self._settings.stall_timeout_ms / 1000
        return self._first_s
