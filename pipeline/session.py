"""``VoiceSession``: one conversation — the pipeline VAD → STT → turn → TTS → playout, its
history and its latency trace. Transports create one per call and feed it audio; the
reply audio comes out of the ``AudioSink`` they hand in.

This is the Python API a telephony team embeds::

    session = VoiceSession(config, sink, session_id="call-42", output_sample_rate=8000)
    await session.start()
    await session.feed(pcm, sample_rate=8000)   # as audio arrives, any rate
    ...
    await session.close()                       # every task finished, the trace written
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from llm import Turn, TurnGenerator, create_generator
from pipeline.clock import Clock, MonotonicClock
from pipeline.config import CadenceConfig
from pipeline.frames import AudioInFrame
from pipeline.models import load_stt, load_tts
from pipeline.pipeline import FrameObserver, Pipeline
from pipeline.playback_ledger import PlaybackLedger
from pipeline.stages import STTStage, TTSStage, VADStage
from pipeline.stages.playout import AudioSink, PlayoutStage
from pipeline.stages.turn import TurnStage
from pipeline.tracing import LatencyTracer, session_tracer
from pipeline.tracing.turn_observer import TurnTraceObserver
from voice.audio import Pcm16, StreamResampler

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
"""The rate the VAD and STT run at; audio is resampled to it on the way in."""

RESYNC_MS = 200.0
"""Audio timestamps run on from the first chunk; if arrivals drift this far from the clock
(a stalled connection), they are re-anchored to the clock."""


class VoiceSession:
    def __init__(
        self,
        config: CadenceConfig,
        sink: AudioSink,
        *,
        session_id: str,
        output_sample_rate: int,
        clock: Clock | None = None,
        generator: TurnGenerator | None = None,
        tracer: LatencyTracer | None = None,
        observers: Iterable[FrameObserver] = (),
    ) -> None:
        self.session_id = session_id
        self.clock = clock or MonotonicClock()
        self.tracer = tracer or session_tracer(config.tracing, session_id, self.clock)
        self.ledger = PlaybackLedger()
        self._trace_observer = TurnTraceObserver(self.tracer, self.clock)
        self._turn = TurnStage(
            generator or create_generator(config.models.llm, self.clock),
            clock=self.clock,
            ledger=self.ledger,
            config=config.turn,
        )
        stt = config.models.stt
        self.pipeline = Pipeline(
            [
                VADStage(config.vad, sample_rate=SAMPLE_RATE),
                STTStage(
                    load_stt(stt),
                    clock=self.clock,
                    partials_interval_ms=stt.partials_interval_ms,
                    speculative=config.turn.speculation,
                ),
                self._turn,
                TTSStage(
                    load_tts(config.models.tts),
                    output_sample_rate=output_sample_rate,
                    first_phrase_max_words=config.models.tts.first_phrase_max_words,
                ),
                PlayoutStage(sink, clock=self.clock, ledger=self.ledger),
            ],
            name=session_id,
            observers=[self._trace_observer, *observers],
        )
        self._resampler: StreamResampler | None = None
        self._audio_end_ms: float | None = None

    @property
    def history(self) -> list[Turn]:
        return list(self._turn.history)

    async def start(self) -> None:
        await self.pipeline.start()

    async def feed(self, pcm: Pcm16, sample_rate: int) -> None:
        """The caller's next chunk of audio, just received (mono PCM16, any rate)."""
        if self._resampler is None or self._resampler.in_rate != sample_rate:
            self._resampler = StreamResampler(sample_rate, SAMPLE_RATE)
        audio = self._resampler.process(pcm)
        if not len(audio):
            return
        duration_ms = 1000.0 * len(audio) / SAMPLE_RATE
        arrived_start = self.clock.now_ms() - duration_ms
        start = self._audio_end_ms
        if start is None or abs(start - arrived_start) > RESYNC_MS:
            start = arrived_start
        self._audio_end_ms = start + duration_ms
        await self.pipeline.queue(
            AudioInFrame(pcm=audio, sample_rate=SAMPLE_RATE, timestamp_ms=start)
        )

    async def close(self, timeout_s: float | None = 30.0) -> None:
        """Let queued audio and the reply in progress finish, then stop and write the trace."""
        try:
            if self.pipeline.failure is None and not self.pipeline.finished:
                await self.pipeline.end(timeout_s=timeout_s)
        finally:
            await self.cancel("closed")

    async def cancel(self, reason: str) -> None:
        """Stop now (a dropped connection): nothing more is played; the trace is written."""
        await self.pipeline.cancel(reason)
        self._trace_observer.close()
        self.tracer.close()
