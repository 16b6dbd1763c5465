"""Turn generators for the turn engine's tests, written once: the ``TurnGenerator`` protocol
(``prefill``, ``stream``, ``aclose``) is the same for every stub, and a copy per test file
drifts from the protocol as it changes.

* ``ScriptedGenerator`` answers from a script — words, then tool calls — with no model: for
  tests of what the engine does with a reply, where a model's words would only be noise.
* ``GatedGenerator`` is a real generator whose every reply first waits on a gate: for the
  fault tests, where the gate raises or hangs while the fault is on.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence

from cadence.core.clock import Clock
from cadence.llm import ReplyPiece, Turn, TurnGenerator
from cadence.llm.dialogue import ToolCall
from cadence.llm.tools import ToolChoice, ToolSpec

Words = str | tuple[str, ...]
"""A reply's words: one piece, or several pieces in order."""
Round = tuple[Words, tuple[ToolCall, ...]]
"""One answer: its words (``""`` for none), then the tools it calls (``()`` for none)."""


class ScriptedGenerator:
    """Answers the n-th request with ``rounds[n]`` — its pieces, stamped with ``clock``, then
    a piece carrying its calls, if any — and records what it was asked. With ``cycle``, the
    rounds start over once used up (a canned answer to every turn); without, a request past
    the last round fails the test. ``on_piece`` hears each piece's text as it is generated,
    just before it is handed on."""

    def __init__(
        self,
        clock: Clock,
        rounds: Sequence[Round],
        *,
        cycle: bool = False,
        on_piece: Callable[[str], None] | None = None,
    ) -> None:
        self._clock = clock
        self._rounds = list(rounds)
        self._cycle = cycle
        self._on_piece = on_piece
        self.requests: list[tuple[list[Turn], ToolChoice]] = []

    async def prefill(self, history: Sequence[Turn]) -> None:
        return None

    async def stream(
        self,
        history: Sequence[Turn],
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice = "auto",
    ) -> AsyncGenerator[ReplyPiece, None]:
        number = len(self.requests)
        self.requests.append((list(history), tool_choice))
        assert self._cycle or number < len(self._rounds), f"request {number + 1} is unscripted"
        words, calls = self._rounds[number % len(self._rounds)]
        for text in (words,) if isinstance(words, str) else words:
            if not text:
                continue
            if self._on_piece is not None:
                self._on_piece(text)
            yield ReplyPiece(text, self._clock.now_ms())
        if calls:
            yield ReplyPiece("", self._clock.now_ms(), tool_calls=calls)

    async def aclose(self) -> None:
        return None


class GatedGenerator:
    """``real``, but each reply first awaits ``gate()`` — which may raise, or never return
    until the reply is cancelled."""

    def __init__(self, real: TurnGenerator, gate: Callable[[], Awaitable[None]]) -> None:
        self._real = real
        self._gate = gate

    async def prefill(self, history: Sequence[Turn]) -> None:
        await self._real.prefill(history)

    async def stream(
        self,
        history: Sequence[Turn],
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice = "auto",
    ) -> AsyncGenerator[ReplyPiece, None]:
        await self._gate()
        async for piece in self._real.stream(history, tools, tool_choice):
            yield piece

    async def aclose(self) -> None:
        await self._real.aclose()
