"""``TTSStage``: speaks the generator's text phrase by phrase as it streams in.

Text pieces are cut into phrases (the first one short); each phrase is synthesized as soon as
it is complete, while later text is still arriving, and its audio goes out in 20 ms frames
resampled to the transport's rate. The first phrase — of the reply, and again after a pause
while tools run — is urgent: the caller is waiting for it, so it goes before every other
call's later phrases, and starts without the voice's leading silence; the rest is background
work, needed only at speaking pace. One speaker task per reply synthesizes phrases in order;
an interrupt cancels it mid-phrase. When the reply ends, the stage reports how much audio it
produced (``ReplySynthesizedFrame``) before passing the end of the reply on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from cadence.core.priority import Priority
from cadence.pipeline.frames import (
    AudioOutFrame,
    EndOfReplyFrame,
    Frame,
    ReplyPhraseFrame,
    ReplySynthesizedFrame,
    TextPieceFrame,
)
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.stage import Stage
from cadence.pipeline.stages._time_limits import arriving_within
from cadence.voice.audio import PCM16, AudioFramer, StreamResampler
from cadence.voice.tts import (
    FIRST_PHRASE_MAX_WORDS,
    PhraseSplitter,
    Synthesizer,
    without_leading_silence,
)

FRAME_MS = 20


@dataclass
class _ReplySpeech:
    reply_index: int
    splitter: PhraseSplitter
    phrases: asyncio.Queue[tuple[str, Priority] | None] = field(default_factory=asyncio.Queue)
    fresh: bool = True
    """The next phrase is the first the caller will hear after waiting."""

    def add(self, phrases: list[str], *, pause: bool = False) -> None:
        for phrase in phrases:
            priority = Priority.URGENT if self.fresh else Priority.BACKGROUND
            self.phrases.put_nowait((phrase, priority))
            self.fresh = False
        if pause:  # the words after it are waited for again
            self.fresh = True


class TTSStage(Stage):
    def __init__(
        self,
        synthesizer: Synthesizer,
        *,
        output_sample_rate: int,
        first_phrase_max_words: int = FIRST_PHRASE_MAX_WORDS,
        timeout_ms: float = 4000.0,
        ledger: PlaybackLedger | None = None,
        name: str = "tts",
    ) -> None:
        """A phrase whose audio stops coming for ``timeout_ms`` fails the stage, and so ends
        the session: without a voice, nothing else can be said. Each synthesized phrase's place
        in the reply's audio goes into ``ledger`` at once — not when its frame reaches playout,
        behind the phrase's own audio: a barge-in in the middle of a phrase must know its
        words."""
        super().__init__(name=name)
        self._ledger = ledger
        self._synthesizer = synthesizer
        self._timeout_ms = timeout_ms
        self.output_sample_rate = output_sample_rate
        self._first_phrase_max_words = first_phrase_max_words
        self._reply: _ReplySpeech | None = None

    async def process(self, frame: Frame) -> None:
        match frame:
            case TextPieceFrame():
                reply = self._reply_for(frame.reply_index)
                splitter = reply.splitter
                if frame.flush:
                    reply.add(splitter.phrases(frame.text), pause=True)
                else:
                    reply.add(splitter.feed(frame.text))
            case EndOfReplyFrame():
                reply = self._reply_for(frame.reply_index)
                self._reply = None
                last = reply.splitter.flush()
                if last is not None:
                    reply.add([last])
                # The speaker passes the end of the reply on after its audio. This worker goes
                # on at once: the commit that follows must reach playout now, not behind the
                # synthesis of the rest of the reply.
                reply.phrases.put_nowait(None)
            case _:
                await self.push(frame)

    async def on_interrupt(self) -> None:
        self._reply = None

    def _reply_for(self, reply_index: int) -> _ReplySpeech:
        if self._reply is None or self._reply.reply_index != reply_index:
            self._reply = _ReplySpeech(reply_index, PhraseSplitter(self._first_phrase_max_words))
            self.spawn(self._speak(self._reply), name=f"speak-{reply_index}")
        return self._reply

    async def _speak(self, reply: _ReplySpeech) -> None:
        audio = _ReplyAudio(
            self._synthesizer.sample_rate, self.output_sample_rate, reply.reply_index
        )
        while (next_phrase := await reply.phrases.get()) is not None:
            phrase, priority = next_phrase
            start_ms = audio.position_ms
            # After a wait (the caller's, or a tool's), the first sound comes at once.
            trim = priority is Priority.URGENT
            try:
                async for pcm in arriving_within(
                    self._synthesizer.synthesize(phrase, priority), self._timeout_ms
                ):
                    if trim:
                        pcm = without_leading_silence(pcm, self._synthesizer.sample_rate)
                        trim = not len(pcm)
                    for frame in audio.frames(pcm):
                        await self.push(frame)
            except TimeoutError:
                raise TimeoutError(
                    f"a phrase's audio stopped coming for {self._timeout_ms:g} ms"
                ) from None
            if self._ledger is not None:
                self._ledger.phrase(reply.reply_index, phrase, start_ms, audio.position_ms)
            await self.push(
                ReplyPhraseFrame(
                    reply_index=reply.reply_index,
                    text=phrase,
                    start_ms=start_ms,
                    end_ms=audio.position_ms,
                )
            )
        for frame in audio.frames(np.zeros(0, np.int16), last=True):
            await self.push(frame)
        await self.push(
            ReplySynthesizedFrame(reply_index=reply.reply_index, audio_ms=audio.produced_ms)
        )
        await self.push(EndOfReplyFrame(reply_index=reply.reply_index))


class _ReplyAudio:
    """Resamples one reply's audio to the output rate and cuts it into frames, continuous
    across phrases, counting how much it produced."""

    def __init__(self, in_rate: int, out_rate: int, reply_index: int) -> None:
        self._resampler = StreamResampler(in_rate, out_rate)
        self._framer = AudioFramer(out_rate, FRAME_MS)
        self._out_rate = out_rate
        self._reply_index = reply_index
        self.produced_ms = 0.0

    @property
    def position_ms(self) -> float:
        """Audio produced so far, including what waits to fill the next frame."""
        return self.produced_ms + 1000.0 * self._framer.pending_samples / self._out_rate

    def frames(self, pcm: PCM16, *, last: bool = False) -> list[AudioOutFrame]:
        chunks = self._framer.push(self._resampler.process(pcm, last=last))
        if last and (tail := self._framer.flush()) is not None:
            chunks.append(tail)
        frames = []
        for chunk in chunks:
            frames.append(
                AudioOutFrame(
                    pcm=chunk,
                    sample_rate=self._out_rate,
                    timestamp_ms=self.produced_ms,
                    reply_index=self._reply_index,
                )
            )
            self.produced_ms += FRAME_MS
        return frames
