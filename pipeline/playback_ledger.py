"""``PlaybackLedger``: which words of each reply the caller actually heard.

TTS reports where each phrase lies in the reply's audio; the playout stage reports how much
of that audio went out. On barge-in, the turn engine asks for the words heard so far, and the
agent's turn in the history is cut there — the model must not believe it said what the caller
never heard.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class _ReplyPlayback:
    phrases: list[tuple[str, float, float]] = field(default_factory=list)
    played_ms: float = 0.0
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    voiced: asyncio.Event = field(default_factory=asyncio.Event)


class PlaybackLedger:
    def __init__(self) -> None:
        self._replies: dict[int, _ReplyPlayback] = {}

    def phrase(self, reply_index: int, text: str, start_ms: float, end_ms: float) -> None:
        reply = self._reply(reply_index)
        reply.phrases.append((text, start_ms, end_ms))
        reply.voiced.set()

    def played(self, reply_index: int, duration_ms: float) -> None:
        self._reply(reply_index).played_ms += duration_ms

    def finish(self, reply_index: int) -> None:
        """All of the reply's audio went out."""
        self._reply(reply_index).finished.set()

    def played_ms(self, reply_index: int) -> float:
        return self._reply(reply_index).played_ms

    def finished(self, reply_index: int) -> bool:
        return self._reply(reply_index).finished.is_set()

    async def wait_voiced(self, reply_index: int) -> None:
        """Returns once the reply's first phrase is synthesized: the caller's wait is over,
        and the rest of the reply may have the cores."""
        await self._reply(reply_index).voiced.wait()

    async def wait_finished(self, reply_index: int) -> None:
        """Returns once all of the reply's audio went out (heard, where the output confirms
        what was played)."""
        await self._reply(reply_index).finished.wait()

    def heard_text(self, reply_index: int) -> str:
        """Whole phrases played, plus the share of the words of the phrase being played that
        its played share of audio covers (speech rate within a phrase is close to even)."""
        reply = self._reply(reply_index)
        heard: list[str] = []
        for text, start, end in reply.phrases:
            if reply.played_ms >= end:
                heard.append(text)
            elif reply.played_ms > start:
                words = text.split()
                share = (reply.played_ms - start) / max(end - start, 1e-9)
                heard.append(" ".join(words[: int(len(words) * share)]))
        return " ".join(part for part in heard if part)

    def forget(self, reply_index: int) -> None:
        self._replies.pop(reply_index, None)

    def _reply(self, reply_index: int) -> _ReplyPlayback:
        return self._replies.setdefault(reply_index, _ReplyPlayback())
