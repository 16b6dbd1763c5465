"""``Agent``: Cadence inside another program — one configuration's models, loaded once, and the
sessions (calls) opened on them. The browser demo and the telephony endpoints are built on it.

::

    agent = Agent(load_config(Path("configs/default.yaml")))
    await agent.load()                                   # fails fast on a missing model
    session = await agent.open_session(output_sample_rate=8000)
    async with session:
        await session.feed(pcm, sample_rate=8000)        # caller audio, any rate, as it comes
        async for event in session.events:               # ReplyAudioEvent, TranscriptEvent, …
            ...

The speech models (whisper, Piper) are shared by every session of the process; each session
gets a turn generator of its own, since its cache holds that conversation, over the weights
the agent loaded once. Tools (``cadence.pipeline.tools.tool``) belong to the agent; each
session offers those its configuration (or overlay) enables, with the built-ins it names
(docs/tools.md)::

    agent = Agent(config, tools=[find_table, book_table])
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable, Sequence

from cadence.core.clock import MonotonicClock
from cadence.llm import GeneratorFactory, generator_factory
from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.model_loading import (
    apply_thread_budget,
    load_end_of_turn,
    load_stt,
    prepare_fixed_phrases,
)
from cadence.pipeline.pipeline import FrameObserver
from cadence.pipeline.session import VoiceSession
from cadence.pipeline.stages.playout import AudioOutput
from cadence.pipeline.tools import Tool, offered_tools
from cadence.pipeline.tracing import TraceSink

_session_numbers = itertools.count(1)


class Agent:
    def __init__(self, config: CadenceConfig | None = None, tools: Sequence[Tool] = ()) -> None:
        self.config = config or CadenceConfig()
        self.tools = tuple(tools)
        """The agent's own tools; a session offers those its configuration enables."""
        self._generators: dict[str | None, GeneratorFactory] = {}
        """Each configuration's generators (by overlay), over the weights loaded once."""

    async def load(self) -> None:
        """Load every model the configuration and its overlays name, off the event loop, and
        check the tools they enable, so that a missing or broken one fails here rather than in
        the first call."""
        # On this thread, before any other runs torch: a thread keeps the thread count it had
        # when it first ran torch, and the threads started later take this one.
        apply_thread_budget(self.config.threads)
        await asyncio.to_thread(self._load_all)

    async def open_session(
        self,
        *,
        session_id: str | None = None,
        output_sample_rate: int = 16000,
        output: AudioOutput | None = None,
        overlay: str | None = None,
        trace_sinks: Iterable[TraceSink] = (),
        observers: Iterable[FrameObserver] = (),
    ) -> VoiceSession:
        """A started session. Reply audio goes to ``output`` at ``output_sample_rate``
        (without one, it comes as ``ReplyAudioEvent``s); ``overlay`` names one of the
        configuration's overlays (``UnknownOverlayError`` if it has none of that name)."""
        config = self.config if overlay is None else self.config.with_overlay(overlay)
        clock = MonotonicClock()
        tools = offered_tools(self.tools, config.tools)
        generators = self._generators.get(overlay)
        if generators is None:  # not loaded: loading takes a while, and not on the event loop
            generators = await asyncio.to_thread(generator_factory, config.models.llm)
            self._generators[overlay] = generators
        generator = generators(clock)
        session = VoiceSession(
            config,
            output,
            session_id=session_id or f"session-{next(_session_numbers)}",
            output_sample_rate=output_sample_rate,
            clock=clock,
            generator=generator,
            tools=tools,
            trace_sinks=trace_sinks,
            observers=observers,
        )
        await session.start()
        return session

    def _load_all(self) -> None:
        configs = {None: self.config} | {
            name: self.config.with_overlay(name) for name in self.config.overlays
        }
        for name, config in configs.items():
            offered_tools(self.tools, config.tools)
            load_stt(config.models.stt, config.threads)
            load_end_of_turn(config.turn.end_of_turn, config.models.lm)  # a missing model fails now
            prepare_fixed_phrases(config)  # the voice, and the phrases said when waiting hurts
            generators = generator_factory(config.models.llm)
            generators(None)  # one, now: a missing key fails here, not in the first call
            self._generators[name] = generators
