"""``VoiceSession``: one conversation — the pipeline VAD → STT → turn → TTS → playout, its
history, its events and its latency trace.

Transports and embedding programs open one per call (through :class:`cadence.pipeline.agent.Agent`,
which shares the models between sessions) and feed it the caller's audio; the reply audio
comes out of the ``AudioOutput`` they hand in, or, without one, as events::

    session = await agent.open_session(output_sample_rate=8000)
    async with session:                          # closed (every task finished) on exit
        await session.feed(pcm, sample_rate=8000)    # as audio arrives, any rate
        async for event in session.events:       # transcripts, reply audio, barge-ins, …
            ...
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from types import TracebackType

import numpy as np

from cadence.core.clock import Clock, MonotonicClock
from cadence.llm import Turn, TurnGenerator, create_generator
from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.events import EventAudioOutput, SessionEvents
from cadence.pipeline.frames import AudioInFrame, DTMFFrame, EndCallFrame, StopReplyFrame
from cadence.pipeline.model_loading import load_end_of_turn, load_stt, load_tts
from cadence.pipeline.pipeline import FrameObserver, Pipeline
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.playout_gate import PlayoutGate
from cadence.pipeline.stages import STTStage, TTSStage, VADStage
from cadence.pipeline.stages.playout import AudioOutput, PlayoutStage
from cadence.pipeline.stages.turn import TurnStage
from cadence.pipeline.tools import Tool, offered_tools
from cadence.pipeline.tracing import TraceSink, session_tracer
from cadence.pipeline.tracing.turn_observer import TurnTraceObserver
from cadence.voice.audio import PCM16, StreamResampler

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
"""The rate the VAD and STT run at; audio is resampled to it on the way in."""

RESYNC_MS = 200.0
"""Audio timestamps run on from the first chunk; if arrivals drift this far from the clock
(a stalled connection), they are re-anchored to the clock."""

MAX_INPUT_RATE = 192_000
"""Caller audio above this rate is not audio from a microphone or a phone line."""

DTMF_DIGITS = re.compile(r"[0-9*#A-D]")


class VoiceSession:
    def __init__(
        self,
        config: CadenceConfig,
        output: AudioOutput | None = None,
        *,
        session_id: str,
        output_sample_rate: int,
        clock: Clock | None = None,
        generator: TurnGenerator | None = None,
        tools: Sequence[Tool] | None = None,
        trace_sinks: Iterable[TraceSink] = (),
        observers: Iterable[FrameObserver] = (),
    ) -> None:
        """``output`` plays the reply audio; without one it comes as ``ReplyAudioEvent``s.
        ``tools`` are offered to the generator as they are (``Agent`` adds its own to
        those the configuration's ``tools`` section enables); without them, the session
        offers what that section names (its SGD services and built-ins), as the demo does —
        one rule for every way a session is opened. ``trace_sinks`` get each finished turn trace
        besides the log ``config.tracing`` names; ``observers`` see every frame."""
        self.session_id = session_id
        self.config = config
        self.clock = clock or MonotonicClock()
        self.events = SessionEvents(session_id)
        """The session's events, to be read by one reader (``async for``) until it ends."""
        self.tracer = session_tracer(
            config.tracing, session_id, self.clock, extra_sinks=[self.events, *trace_sinks]
        )
        self.ledger = PlaybackLedger()
        gate = PlayoutGate()
        self._trace_observer = TurnTraceObserver(self.tracer, self.clock)
        self.generator = generator or create_generator(config.models.llm, self.clock)
        """The session's turn generator (its cache holds this conversation)."""
        self._turn = TurnStage(
            self.generator,
            clock=self.clock,
            ledger=self.ledger,
            config=config.turn,
            end_of_turn=load_end_of_turn(config.turn.end_of_turn, config.models.lm),
            gate=gate,
            faults=config.faults,
            tools=offered_tools((), config.tools) if tools is None else tools,
            tools_config=config.tools,
            first_phrase_max_words=config.models.tts.first_phrase_max_words,
            yield_to_urgent=True,
            session_id=session_id,
        )
        stt = config.models.stt
        self.pipeline = Pipeline(
            [
                VADStage(config.vad, sample_rate=SAMPLE_RATE),
                STTStage(
                    load_stt(stt, config.threads),
                    clock=self.clock,
                    partials_interval_ms=stt.partials_interval_ms,
                    speculative=config.turn.speculation,
                    timeout_ms=config.faults.stt_timeout_ms,
                ),
                self._turn,
                TTSStage(
                    load_tts(config.models.tts, config.threads),
                    output_sample_rate=output_sample_rate,
                    first_phrase_max_words=config.models.tts.first_phrase_max_words,
                    timeout_ms=config.faults.tts_timeout_ms,
                    ledger=self.ledger,
                ),
                PlayoutStage(
                    output or EventAudioOutput(self.events),
                    clock=self.clock,
                    ledger=self.ledger,
                    gate=gate,
                ),
            ],
            name=session_id,
            observers=[self._trace_observer, self.events, *observers],
        )
        self._resampler: StreamResampler | None = None
        self._audio_end_ms: float | None = None

    @property
    def history(self) -> list[Turn]:
        return list(self._turn.history)

    async def start(self) -> None:
        await self.pipeline.start()

    async def feed(self, pcm: PCM16, sample_rate: int) -> None:
        """The caller's next chunk of audio, just received (mono PCM16, any rate)."""
        if not 0 < sample_rate <= MAX_INPUT_RATE:
            raise ValueError(f"sample rate must be 1–{MAX_INPUT_RATE} Hz, got {sample_rate}")
        if pcm.dtype != np.int16 or pcm.ndim != 1:
            raise ValueError(f"audio must be 1-D int16 PCM, got {pcm.ndim}-D {pcm.dtype}")
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

    async def dtmf(self, digit: str) -> None:
        """The caller pressed a key; it comes back as a ``DTMFEvent`` in order with the audio."""
        if not DTMF_DIGITS.fullmatch(digit):
            raise ValueError(f"a DTMF digit is one of 0-9 * # A-D, got {digit!r}")
        await self.pipeline.queue(DTMFFrame(digit=digit, at_ms=self.clock.now_ms()))

    async def end_call(self, reason: str = "the application ended the call") -> None:
        """Hang up once the caller has heard the reply in progress (at once if none is): a
        ``HangUpEvent`` follows, and a transport's call ends on it."""
        await self.pipeline.queue(EndCallFrame(reason=reason, at_ms=self.clock.now_ms()))

    async def interrupt(self) -> None:
        """Stop the agent's reply now, as if the caller had barged in: the rest of it is not
        played, and the history keeps the words heard (a ``BargeInEvent`` says which)."""
        await self.pipeline.queue(StopReplyFrame(at_ms=self.clock.now_ms()))

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
        if (failure := self.pipeline.failure) is not None:
            # Into the turn in progress, or a turn of its own: the record says why it ended.
            self.tracer.annotate("failure", f"{failure.stage}: {failure.error!r}")
        self._trace_observer.close()
        self.tracer.close()
        self.events.end(reason)

    async def __aenter__(self) -> VoiceSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            await self.close()
        else:
            await self.cancel(f"ended by {exc_type.__name__ if exc_type else 'an error'}")
