"""A turn engine to talk to in text: the real ``TurnStage`` over any generator, its frames
seen as they come, the caller's words given as whole turns (the tool-call tests)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from openai_service import LIMIT_MS

from cadence.core.clock import Clock
from cadence.llm import TurnGenerator
from cadence.pipeline.config import EndOfTurnConfig, InterruptionConfig, ToolsConfig, TurnConfig
from cadence.pipeline.end_of_turn import EndOfTurnDetector
from cadence.pipeline.frames import (
    EndOfReplyFrame,
    EndpointFrame,
    FinalTranscriptFrame,
    Frame,
    SpeechStartFrame,
    TextPieceFrame,
)
from cadence.pipeline.pipeline import Pipeline
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.playout_gate import PlayoutGate
from cadence.pipeline.stage import Stage
from cadence.pipeline.stages.turn import TurnStage
from cadence.pipeline.tools import Tool
from cadence.pipeline.tracing import LatencyTracer, MemoryTraceSink
from cadence.pipeline.tracing.turn_observer import TurnTraceObserver

F = TypeVar("F", bound=Frame)

WAIT_S = 20.0
"""How long a test waits for an event that follows from what it did."""


class Seen:
    """Every frame the turn engine hands on, and an event per kind as it comes."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self._changed = asyncio.Event()

    def on_frame(self, source: str, frame: Frame) -> None:
        if source == "turn":
            self.frames.append(frame)
            self._changed.set()

    def of(self, kind: type[F]) -> list[F]:
        return [f for f in self.frames if isinstance(f, kind)]

    def spoken(self, reply_index: int | None = None) -> str:
        """The words handed to TTS: of one reply, or of all."""
        pieces = self.of(TextPieceFrame)
        return "".join(p.text for p in pieces if reply_index in (None, p.reply_index))

    async def until(self, done: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not done():
                self._changed.clear()
                await self._changed.wait()


@dataclass
class Engine:
    stage: TurnStage
    pipeline: Pipeline
    ledger: PlaybackLedger
    clock: Clock
    seen: Seen
    observer: TurnTraceObserver
    traces: MemoryTraceSink

    async def says(self, text: str) -> None:
        """The caller says ``text`` (a whole turn: the engine commits at once)."""
        now = self.clock.now_ms()
        await self.pipeline.queue(SpeechStartFrame(at_ms=now))
        await self.pipeline.queue(EndpointFrame(at_ms=now, speech_end_ms=now))
        await self.pipeline.queue(FinalTranscriptFrame(text=text, at_ms=now))

    async def reply_ends(self, count: int = 1) -> None:
        await self.seen.until(lambda: len(self.seen.of(EndOfReplyFrame)) >= count)

    def hear(self, reply_index: int = 0) -> None:
        """The caller hears all of the reply's words so far."""
        self.ledger.phrase(reply_index, self.seen.spoken(reply_index), 0.0, 1000.0)
        self.ledger.played(reply_index, 1000.0)


def engine_of(
    generator: TurnGenerator,
    tools: Sequence[Tool],
    clock: Clock,
    *,
    tools_config: ToolsConfig | None = None,
    backchannels: bool = False,
    early_emission: bool = True,
) -> Engine:
    seen, ledger, traces = Seen(), PlaybackLedger(), MemoryTraceSink()
    config = TurnConfig(
        end_of_turn=EndOfTurnConfig(model="silence", min_wait_ms=0),
        interruption=InterruptionConfig(backchannels=backchannels),
        early_emission=early_emission,
    )
    stage = TurnStage(
        generator,
        clock=clock,
        ledger=ledger,
        config=config,
        end_of_turn=EndOfTurnDetector(config.end_of_turn, None),
        gate=PlayoutGate(),
        tools=tools,
        tools_config=tools_config or ToolsConfig(timeout_ms=LIMIT_MS),
        session_id="test-call",
    )
    observer = TurnTraceObserver(LatencyTracer("test-call", clock, [traces]), clock)
    pipeline = Pipeline([stage, Stage(name="sink")], observers=[seen, observer])
    return Engine(stage, pipeline, ledger, clock, seen, observer, traces)
