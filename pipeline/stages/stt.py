"""``STTStage``: collects each utterance's audio and transcribes it, speculatively.

The final decode starts at pause onset, while the endpointer is still waiting out the
silence, and its transcript goes downstream as soon as it is ready (a
``SpeculativeTranscriptFrame``, for preemptive generation). If the silence holds, the
endpoint finds the transcript ready (or nearly) and confirms it as final; if speech resumes,
the decode is abandoned and reported as discarded work — and never delays the next one: the
transcriber runs it beside the next, or drops it if it had not started (docs/cpu-budget.md).
Optional partial transcripts give live captions during speech, at a cost measured in
docs/voice.md; they are background work: started only when no decode of any call is queued
or running (under load they thin out instead of taking the cores), behind every decode a
caller is waiting for, and the one in flight at a pause is dropped.

A final decode that fails, or runs past ``timeout_ms``, yields a ``TranscriptFailedFrame``
instead of a transcript: the turn engine asks the caller to repeat, and the session goes on.
A speculative or partial decode that fails is only logged — the final decode is what counts.
(A decode past its limit is abandoned, not stopped: CTranslate2 cannot be interrupted, so
the decoder thread stays busy until it returns.)
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

import numpy as np

from cadence.core.clock import Clock
from cadence.core.priority import Priority
from cadence.pipeline.frames import (
    AudioInFrame,
    EndpointFrame,
    FinalTranscriptFrame,
    Frame,
    PartialTranscriptFrame,
    PauseStartFrame,
    SpeculationDiscardedFrame,
    SpeculativeTranscriptFrame,
    SpeechResumedFrame,
    SpeechStartFrame,
    TranscriptFailedFrame,
)
from cadence.pipeline.stage import Stage
from cadence.voice.audio.pcm import PCM16
from cadence.voice.stt import Transcriber, Transcription

logger = logging.getLogger(__name__)

LEAD_MS = 300.0
"""Audio kept before the detected speech start: the VAD needs a few frames to be sure, and
whisper hears a clipped first consonant badly."""


class STTStage(Stage):
    def __init__(
        self,
        transcriber: Transcriber,
        *,
        clock: Clock,
        sample_rate: int = 16000,
        partials_interval_ms: int | None = None,
        speculative: bool = True,
        timeout_ms: float = 4000.0,
        name: str = "stt",
    ) -> None:
        super().__init__(name=name)
        self._transcriber = transcriber
        self._clock = clock
        self._sample_rate = sample_rate
        self._partials_interval_ms = partials_interval_ms
        self._speculative = speculative
        self._timeout_ms = timeout_ms
        self._recent: deque[AudioInFrame] = deque()
        self._utterance: list[PCM16] | None = None
        self._utterance_ms = 0.0
        self._speculation: asyncio.Task[Transcription | None] | None = None
        self._speculation_started_ms = 0.0
        self._partial: asyncio.Task[None] | None = None
        self._partial_at_ms = 0.0

    async def process(self, frame: Frame) -> None:
        match frame:
            case AudioInFrame():
                self._hear(frame)
            case SpeechStartFrame():
                self._begin_utterance(frame.at_ms)
                await self.push(frame)
            case PauseStartFrame():
                await self.push(frame)
                if self._partial is not None:  # the transcript to come supersedes its caption
                    self._partial.cancel()
                    self._partial = None
                if self._utterance is not None and self._speculative:
                    self._speculation = self.spawn(
                        self._speculate(self._audio()), name="speculative-decode"
                    )
                    self._speculation_started_ms = self._clock.now_ms()
            case SpeechResumedFrame():
                await self._discard_speculation("speech resumed")
                await self.push(frame)
            case EndpointFrame():
                await self.push(frame)
                await self._finish_utterance()
            case _:
                await self.push(frame)

    async def on_interrupt(self) -> None:
        # In-flight decodes were cancelled with the stage's spawned work.
        self._speculation = None
        self._partial = None

    def _hear(self, frame: AudioInFrame) -> None:
        if frame.sample_rate != self._sample_rate:
            raise ValueError(f"STT needs {self._sample_rate} Hz audio, got {frame.sample_rate} Hz")
        if self._utterance is None:
            self._recent.append(frame)
            while self._recent and self._recent[0].end_ms < frame.end_ms - 1000.0:
                self._recent.popleft()
            return
        self._utterance.append(frame.pcm)
        self._utterance_ms += frame.duration_ms
        interval = self._partials_interval_ms
        if (
            interval is not None
            and self._utterance_ms - self._partial_at_ms >= interval
            and (self._partial is None or self._partial.done())
            and self._speculation is None
            and self._transcriber.pending_decodes == 0  # captions use idle decoders only
        ):
            self._partial_at_ms = self._utterance_ms
            self._partial = self.spawn(self._caption(self._audio()), name="partial-decode")

    def _begin_utterance(self, speech_start_ms: float) -> None:
        kept = [f for f in self._recent if f.end_ms > speech_start_ms - LEAD_MS]
        self._recent.clear()
        self._utterance = [f.pcm for f in kept]
        self._utterance_ms = sum(f.duration_ms for f in kept)
        self._partial_at_ms = 0.0

    async def _finish_utterance(self) -> None:
        if self._utterance is None:
            return
        speculation, self._speculation = self._speculation, None
        if self._partial is not None:
            self._partial.cancel()
            self._partial = None
        audio = self._audio()
        self._utterance = None
        try:
            async with asyncio.timeout(self._timeout_ms / 1000.0):
                result = await speculation if speculation is not None else None
                if result is None:  # no speculation, or it failed: decode now
                    speculation = None
                    result = await self._transcriber.transcribe(audio)
        except Exception as exc:
            reason = (
                f"transcription took over {self._timeout_ms:g} ms"
                if isinstance(exc, TimeoutError)
                else f"transcription failed: {exc!r}"
            )
            logger.warning("%s: %s", self.name, reason)
            await self.push(TranscriptFailedFrame(reason=reason, at_ms=self._clock.now_ms()))
            return
        await self.push(
            FinalTranscriptFrame(
                text=result.text,
                at_ms=self._clock.now_ms(),
                speculative=speculation is not None,
                decode_ms=result.decode_ms,
            )
        )

    async def _discard_speculation(self, reason: str) -> None:
        if self._speculation is None:
            return
        self._speculation.cancel()
        self._speculation = None
        await self.push(
            SpeculationDiscardedFrame(
                kind="stt_decode",
                started_ms=self._speculation_started_ms,
                ended_ms=self._clock.now_ms(),
                reason=reason,
            )
        )

    async def _speculate(self, audio: PCM16) -> Transcription | None:
        """Decode at pause onset and offer the result at once, so that a reply can be
        prepared while the endpointer is still waiting out the silence. ``None`` if the
        decode failed (the endpoint decodes again)."""
        try:
            result = await self._transcriber.transcribe(audio)
        except Exception as exc:
            logger.warning("%s: speculative transcription failed: %r", self.name, exc)
            return None
        await self.push(
            SpeculativeTranscriptFrame(
                text=result.text, at_ms=self._clock.now_ms(), decode_ms=result.decode_ms
            )
        )
        return result

    async def _caption(self, audio: PCM16) -> None:
        try:
            result = await self._transcriber.transcribe(audio, Priority.BACKGROUND)
        except Exception as exc:
            logger.warning("%s: live caption failed: %r", self.name, exc)
            return
        if result.text:
            await self.push(PartialTranscriptFrame(text=result.text, at_ms=self._clock.now_ms()))

    def _audio(self) -> PCM16:
        assert self._utterance is not None
        return np.concatenate(self._utterance) if self._utterance else np.zeros(0, np.int16)
