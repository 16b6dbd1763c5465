"""``VADStage``: cuts incoming audio into VAD frames and announces turn events.

Audio passes through re-chunked into exact frames (with their own timestamps), each followed
by the events it triggered: downstream stages see the audio before what was decided about it.
"""

from __future__ import annotations

from cadence.pipeline.config import VADConfig
from cadence.pipeline.frames import (
    AudioInFrame,
    EndpointFrame,
    Frame,
    PauseStartFrame,
    SpeechResumedFrame,
    SpeechStartFrame,
    VADEventFrame,
)
from cadence.pipeline.stage import Stage
from cadence.voice.audio import AudioFramer, level_db
from cadence.voice.vad import Endpointer, VADEvent, VADEventKind, VoiceDetector, make_voice_detector


class VADStage(Stage):
    def __init__(
        self,
        config: VADConfig,
        *,
        sample_rate: int = 16000,
        detector: VoiceDetector | None = None,
        name: str = "vad",
    ) -> None:
        super().__init__(name=name)
        self.sample_rate = sample_rate
        self._detector = detector or make_voice_detector(
            config.engine, sample_rate=sample_rate, frame_ms=config.frame_ms, mode=config.mode
        )
        self._framer = AudioFramer(sample_rate, config.frame_ms)
        self._endpointer = Endpointer(
            frame_ms=config.frame_ms,
            onset_ms=config.onset_ms,
            pause_ms=config.pause_ms,
            endpoint_silence_ms=config.endpoint_silence_ms,
            max_utterance_ms=config.max_utterance_ms,
            tail_trim_db=config.tail_trim_db,
        )

    @property
    def in_utterance(self) -> bool:
        return self._endpointer.in_utterance

    async def process(self, frame: Frame) -> None:
        if not isinstance(frame, AudioInFrame):
            await self.push(frame)
            return
        if frame.sample_rate != self.sample_rate:
            raise ValueError(
                f"audio at {frame.sample_rate} Hz reached VAD, which runs at {self.sample_rate} Hz:"
                " the transport must resample"
            )
        pending_ms = 1000.0 * self._framer.pending_samples / self.sample_rate
        start_ms = frame.timestamp_ms - pending_ms
        frame_ms = self._endpointer.frame_ms
        for i, pcm in enumerate(self._framer.push(frame.pcm)):
            at_ms = start_ms + i * frame_ms
            await self.push(AudioInFrame(pcm=pcm, sample_rate=self.sample_rate, timestamp_ms=at_ms))
            voiced = self._detector.is_speech(pcm)
            for event in self._endpointer.update(voiced, at_ms, level_db(pcm)):
                await self.push(_to_frame(event))


def _to_frame(event: VADEvent) -> VADEventFrame:
    match event.kind:
        case VADEventKind.SPEECH_START:
            return SpeechStartFrame(at_ms=event.at_ms)
        case VADEventKind.PAUSE_START:
            return PauseStartFrame(at_ms=event.at_ms)
        case VADEventKind.SPEECH_RESUMED:
            return SpeechResumedFrame(at_ms=event.at_ms)
        case VADEventKind.ENDPOINT:
            assert event.speech_end_ms is not None
            return EndpointFrame(
                at_ms=event.at_ms, speech_end_ms=event.speech_end_ms, forced=event.forced
            )
