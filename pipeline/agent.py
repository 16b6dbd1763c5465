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
gets a turn generator of its own, since its cache holds that conversation.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable

from cadence.core.clock import MonotonicClock
from cadence.llm import create_generator
from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.model_loading import load_stt, load_tts
from cadence.pipeline.pipeline import FrameObserver
from cadence.pipeline.session import VoiceSession
from cadence.pipeline.stages.playout import AudioOutput
from cadence.pipeline.tracing import TraceSink

_session_numbers = itertools.count(1)


class Agent:
    def __init__(self, config: CadenceConfig | None = None) -> None:
        self.config = config or CadenceConfig()

    async def load(self) -> None:
        """Load every model the configuration and its overlays name, off the event loop, so
        that a missing or broken one fails here rather than in the first call."""
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
        # Loading the generator's checkpoint takes a while: not on the event loop, where other
        # calls' audio is being paced.
        generator = await asyncio.to_thread(create_generator, config.models.llm, clock)
        session = VoiceSession(
            config,
            output,
            session_id=session_id or f"session-{next(_session_numbers)}",
            output_sample_rate=output_sample_rate,
            clock=clock,
            generator=generator,
            trace_sinks=trace_sinks,
            observers=observers,
        )
        await session.start()
        return session

    def _load_all(self) -> None:
        configs = [self.config, *map(self.config.with_overlay, self.config.overlays)]
        for config in configs:
            load_stt(config.models.stt)
            load_tts(config.models.tts)
            create_generator(config.models.llm)  # sessions load their own; this checks it
