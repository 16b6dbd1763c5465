"""The turn generator the pipeline calls: an async stream of reply pieces per turn.

``TurnGenerator`` is the interface every backend meets (``cadence.llm.backends.create_generator``
picks one from ``models.llm``). The local models share :class:`DecoderTurnGenerator`:
:class:`DiffusionTurnGenerator` (block diffusion, the default) and
:class:`AutoregressiveTurnGenerator` (the baseline). Decoding is synchronous PyTorch work;
each piece is computed in a worker thread so the event loop keeps moving audio meanwhile, and
turns of one generator are serialised because they share the conversation's KV cache.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cadence.core.clock import Clock, MonotonicClock
from cadence.llm.autoregressive import AutoregressiveDecoder
from cadence.llm.block_diffusion import BlockDiffusionDecoder
from cadence.llm.checkpoint import LoadedModel
from cadence.llm.decoding import DecodingOptions, ReplyStats
from cadence.llm.dialogue import Turn
from cadence.llm.emission import ReplyPiece
from cadence.llm.graphed_decoder import GraphedBlockDiffusionDecoder
from cadence.llm.options import LLMOptions
from cadence.llm.result_slots import ReplyFacts
from cadence.llm.spoken_calls import guard_spoken_calls, spoken_call_ids
from cadence.llm.tools import ToolChoice, ToolSpec


@dataclass(frozen=True)
class GeneratorOptions:
    decoding: DecodingOptions = field(default_factory=DecodingOptions)
    history_turns: int = 3
    """Past turns the model sees; older turns are dropped first."""
    max_context_tokens: int = 128
    """The oldest turns are dropped until the history fits this many tokens."""

    @classmethod
    def from_options(cls, config: LLMOptions) -> GeneratorOptions:
        return cls(
            decoding=DecodingOptions(
                confidence_threshold=config.confidence_threshold,
                first_emit_budget_ms=config.first_emit_budget_ms,
                block_budget_ms=config.block_budget_ms,
                max_reply_tokens=config.max_reply_tokens,
            ),
            history_turns=config.history_turns,
            max_context_tokens=config.max_context_tokens,
        )


class _Decoder(Protocol):
    def prefill(self, context: list[int]) -> None: ...

    def decode(
        self,
        prompt: list[int],
        stats: ReplyStats | None = None,
        *,
        calls: bool = False,
        facts: ReplyFacts | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[ReplyPiece]: ...


class PromptFormat(Protocol):
    """How a local model's conversation becomes the token ids a reply is generated from."""

    def visible(self, history: Sequence[Turn]) -> list[Turn]:
        """The turns of ``history`` the model reads (tool turns only if it knows tools)."""
        ...

    def reply_facts(self, history: Sequence[Turn]) -> ReplyFacts:
        """What a reply to ``history`` fills its slots from and checks its dates and times
        against (nothing, for a model that knows no tools)."""
        ...

    def prompt(
        self, history: Sequence[Turn], history_turns: int, max_context_tokens: int
    ) -> list[int]: ...


class TurnGenerator(Protocol):
    """Generates the agent's next turn from the conversation so far — what the turn engine
    needs of any backend."""

    async def prefill(self, history: Sequence[Turn]) -> None:
        """Prepare for the reply after ``history`` plus one more user turn (called while the
        user speaks); a backend with nothing to prepare returns at once."""
        ...

    def stream(
        self,
        history: Sequence[Turn],
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice = "auto",
    ) -> AsyncGenerator[ReplyPiece, None]:
        """The reply to ``history`` (ending with the user's turn, or with the results of the
        tools the agent called), piece by piece as it is decided; cancelling or closing the
        iteration stops the work. A backend that can call ``tools`` ends a reply that calls
        some with a piece carrying the calls (``ReplyPiece.tool_calls``); the runtime runs
        them and asks again with their results. ``tool_choice: none`` forbids calls."""
        ...

    async def aclose(self) -> None:
        """Release what the backend holds for the session (the remote backend's connection);
        called once when the session closes."""
        ...


class DecoderTurnGenerator:
    """A turn generator over a local model's decoder."""

    def __init__(self, decoder: _Decoder, fmt: PromptFormat, options: GeneratorOptions) -> None:
        self._decoder = decoder
        self._format = fmt
        self.options = options
        self.last_stats = ReplyStats()
        """Statistics of the latest reply (steps per block, timings, final text)."""
        self._lock = asyncio.Lock()
        self._spoken_ids = spoken_call_ids()

    @property
    def decoder(self) -> _Decoder:
        """The decoder behind the generator (which one, the backend and device decide)."""
        return self._decoder

    def prompt(self, history: Sequence[Turn]) -> list[int]:
        """Token ids the reply to ``history`` is generated from."""
        return self._format.prompt(
            history, self.options.history_turns, self.options.max_context_tokens
        )

    async def prefill(self, history: Sequence[Turn]) -> None:
        """Cache the context that the reply after ``history`` plus one more user turn will
        start with, so that reply prefills only the new turn (call while the user speaks)."""
        turns = self.options.history_turns - 1
        visible = self._format.visible(history)
        context = self.prompt(visible[-turns:] if turns else [])[:-1]
        async with self._lock:
            await asyncio.to_thread(self._decoder.prefill, context)

    def stream(
        self,
        history: Sequence[Turn],
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice = "auto",
    ) -> AsyncGenerator[ReplyPiece, None]:
        """The reply to ``history`` (ending with the user's turn, or a tool's result), piece
        by piece as the words are committed; ``last_stats`` holds its final text once the
        stream ends. A model trained with tool calls (its tokenizer has the tool tokens) may
        end the reply with calls when ``tools`` are offered and ``tool_choice`` is ``auto``;
        it does not read the tools' descriptions, it learned its services' methods and
        arguments in training. Other models read only the words of the history. Whatever
        the model, words that read as a call of one of ``tools`` are not said
        (``llm/spoken_calls.py``)."""
        pieces = self._pieces(history, tools, tool_choice)
        return guard_spoken_calls(pieces, tools, tool_choice, self._spoken_ids)

    async def _pieces(
        self, history: Sequence[Turn], tools: Sequence[ToolSpec], tool_choice: ToolChoice
    ) -> AsyncGenerator[ReplyPiece, None]:
        prompt = self.prompt(history)
        calls = bool(tools) and tool_choice == "auto"
        async with self._lock:
            stats = ReplyStats()
            self.last_stats = stats
            facts = self._format.reply_facts(history)
            stop = threading.Event()
            pieces = self._decoder.decode(prompt, stats, calls=calls, facts=facts, stop=stop)
            while (piece := await _next_in_thread(pieces, stop)) is not None:
                yield piece

    async def reply(self, history: Sequence[Turn]) -> str:
        """The whole reply at once."""
        return "".join([piece.text async for piece in self.stream(history)])

    async def aclose(self) -> None:
        """Nothing to release: the model stays loaded with the generator."""


class DiffusionTurnGenerator(DecoderTurnGenerator):
    """Block-diffusion turn generator (threshold commits, early emission, deadlines)."""

    def __init__(
        self, loaded: LoadedModel, options: GeneratorOptions, clock: Clock | None = None
    ) -> None:
        # On CUDA the in-block steps replay captured graphs; elsewhere they run eagerly.
        kind = (
            GraphedBlockDiffusionDecoder
            if loaded.model.embedding.weight.device.type == "cuda"
            else BlockDiffusionDecoder
        )
        decoder = kind(loaded.model, loaded.format, options.decoding, clock or MonotonicClock())
        super().__init__(decoder, loaded.format, options)


class AutoregressiveTurnGenerator(DecoderTurnGenerator):
    """Greedy autoregressive baseline with the same interface."""

    def __init__(
        self, loaded: LoadedModel, options: GeneratorOptions, clock: Clock | None = None
    ) -> None:
        decoder = AutoregressiveDecoder(
            loaded.model, loaded.format, options.decoding, clock or MonotonicClock()
        )
        super().__init__(decoder, loaded.format, options)


async def _next_in_thread(pieces: Iterator[ReplyPiece], stop: threading.Event) -> ReplyPiece | None:
    """The next piece, computed in a worker thread. If the caller is cancelled (a barge-in,
    ``llm_timeout_ms``, a hang-up), ``stop`` ends the decode before its next step, and the
    step in flight finishes before the cancellation goes on: the lock must not be released
    while a thread is still writing the KV cache that the next reply will use — but it is
    released within one step (``reply_loops.stopped``), not at the end of the piece."""
    step = asyncio.ensure_future(asyncio.to_thread(next, pieces, None))
    try:
        return await asyncio.shield(step)
    except asyncio.CancelledError:
        stop.set()
        await asyncio.gather(step, return_exceptions=True)
        raise
