"""The embedded voices through the TTS stage: hibari (the default) at every transport's rate,
cut by a barge-in with the ledger keeping only what was heard, the same audio for the same
text when asked, the round trip through STT; Piper still selectable; a missing voice named."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from collector import Collector
from models import transcriber

from cadence.core.clock import MonotonicClock
from cadence.pipeline.config import CadenceConfig, ThreadsConfig, TTSConfig
from cadence.pipeline.frames import (
    AudioOutFrame,
    EndOfReplyFrame,
    Frame,
    TextPieceFrame,
    TurnCommittedFrame,
)
from cadence.pipeline.model_loading import load_tts
from cadence.pipeline.pipeline import Pipeline
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.stage import Stage
from cadence.pipeline.stages import TTSStage
from cadence.pipeline.stages.playout import PlayoutStage
from cadence.voice.audio import resample
from cadence.voice.model_errors import ModelUnavailableError
from cadence.voice.stt import word_error_rate
from cadence.voice.tts import DEFAULT_VOICE, PhraseSplitter, load_synthesizer
from cadence.web.serializers.audiosocket import SAMPLE_RATE as AUDIOSOCKET_RATE
from cadence.web.serializers.twilio import SAMPLE_RATE as TWILIO_RATE
from cadence.web.transports.webrtc import OUTPUT_SAMPLE_RATE as WEBRTC_RATE

HIBARI = "embedded:hibari-heart"
PIPER = "embedded:en_US-joe-medium"


def reply(text: str, turn: int = 0) -> list[Frame]:
    pieces: list[Frame] = [
        TextPieceFrame(text=word + " ", at_ms=0, reply_index=turn) for word in text.split()
    ]
    return [*pieces, EndOfReplyFrame(reply_index=turn)]


async def speak(text: str, rate: int, voice: str = DEFAULT_VOICE) -> list[AudioOutFrame]:
    collect = Collector()
    stage = TTSStage(load_tts(TTSConfig(voice=voice), ThreadsConfig()), output_sample_rate=rate)
    pipeline = Pipeline([stage, collect])
    await pipeline.start()
    for frame in reply(text):
        await pipeline.queue(frame)
    await pipeline.end(timeout_s=60)
    return [f for f in collect.frames if isinstance(f, AudioOutFrame)]


def test_hibari_is_the_default_voice_on_its_own_thread_budget() -> None:
    assert CadenceConfig().models.tts.voice == HIBARI == DEFAULT_VOICE
    hibari = load_tts(TTSConfig(), ThreadsConfig())
    assert (hibari.sample_rate, hibari.threads) == (24000, 1)
    piper = load_tts(TTSConfig(voice=PIPER), ThreadsConfig())  # still selectable
    assert (piper.sample_rate, piper.threads) == (22050, 2)


@pytest.mark.parametrize(
    "rate",
    [TWILIO_RATE, AUDIOSOCKET_RATE, WEBRTC_RATE, 16000],
    ids=["twilio", "audiosocket", "webrtc", "pipeline"],
)
async def test_the_voice_speaks_a_phrase_at_each_transport_rate(rate: int) -> None:
    text = "Your table for two is booked."
    audio = await speak(text, rate)
    assert {(f.sample_rate, len(f.pcm)) for f in audio} == {(rate, rate // 50)}
    pcm = np.concatenate([f.pcm for f in audio])
    # As long as the phrases at hibari's own 24 kHz (less the first one's 30 ms of lead-in
    # trimmed, plus the last frame's padding).
    voice = load_synthesizer(HIBARI)
    native = [
        pcm
        for phrase in PhraseSplitter().phrases(text)
        for pcm in voice.synthesize_blocking(phrase)
    ]
    assert len(native) == 2  # "Your table | for two is booked."
    assert -0.04 < len(pcm) / rate - sum(map(len, native)) / 24000 < 0.03
    level = float(np.sqrt(np.mean((pcm / 32768.0) ** 2)))
    assert 0.03 < level < 0.3  # speech at a telephone's level, not silence, not clipping
    heard = transcriber().transcribe_blocking(resample(pcm, rate, 16000)).text
    assert word_error_rate([text], [heard]) == 0.0, heard


async def test_a_barge_in_cuts_the_reply_mid_phrase_and_the_ledger_keeps_what_was_heard() -> None:
    ledger = PlaybackLedger()
    barge_in = asyncio.Event()

    class Phone:
        """The transport: plays what it is sent, and the caller barges in halfway through
        the reply's second phrase."""

        def __init__(self) -> None:
            self.played_ms = 0.0

        async def send(self, frame: AudioOutFrame) -> None:
            self.played_ms += frame.duration_ms
            phrases = ledger._reply(0).phrases
            if len(phrases) >= 2 and self.played_ms >= (phrases[1][1] + phrases[1][2]) / 2:
                barge_in.set()

        async def clear(self) -> None:
            pass

    phone, feeder, collect = Phone(), Stage(name="feeder"), Collector()
    tts = TTSStage(load_synthesizer(HIBARI), output_sample_rate=TWILIO_RATE, ledger=ledger)
    playout = PlayoutStage(phone, clock=MonotonicClock(), ledger=ledger)
    pipeline = Pipeline([feeder, tts, playout, collect])
    await pipeline.start()
    await pipeline.queue(
        TurnCommittedFrame(
            reply_index=0, at_ms=0, user_text="", speech_end_ms=0, transcript_at_ms=0
        )
    )
    for frame in reply(
        "Sure, your table for two is booked for seven tonight at the corner window. "
        "The total comes to forty two dollars, and parking is free."
    ):
        await pipeline.queue(frame)
    await asyncio.wait_for(barge_in.wait(), timeout=60)
    await feeder.interrupt("caller barged in")
    heard_ms = phone.played_ms
    await pipeline.end(timeout_s=30)
    assert phone.played_ms == heard_ms  # nothing more reached the caller after the barge-in
    assert ledger.played_ms(0) == heard_ms
    said = [text for text, _, _ in ledger._reply(0).phrases]  # synthesized, placed
    assert said[:2] == [
        "Sure,",
        "your table for two is booked for seven tonight at the corner window.",
    ]
    heard = ledger.heard_text(0)
    # The first phrase and part of the second, cut within it: never the words not played.
    assert heard.startswith("Sure, your table")
    assert 4 <= len(heard.split()) < 1 + len(said[1].split())
    assert "total" not in heard


@pytest.mark.parametrize("voice", [HIBARI, PIPER])
def test_the_same_text_gives_the_same_audio_when_asked(voice: str) -> None:
    synthesizer = load_synthesizer(voice)
    text = "Sure, what time works for you?"
    once, twice = (
        np.concatenate(list(synthesizer.synthesize_blocking(text, varied=False))) for _ in "ab"
    )
    assert np.array_equal(once, twice)
    varied = np.concatenate(list(synthesizer.synthesize_blocking(text)))
    assert not np.array_equal(once, varied)  # left alone, the voice varies


def test_a_missing_voice_fails_at_start_naming_the_key() -> None:
    from cadence.pipeline.agent import Agent

    for voice, reason in [
        ("embedded:hibari-fenrir", "no such embedded voice"),  # hibari's hub-only voices
        ("/nowhere/voice.onnx", "a Piper voice needs"),
    ]:
        config = CadenceConfig(
            models={"tts": {"voice": voice}}, turn={"end_of_turn": {"model": "text"}}
        )
        with pytest.raises(ModelUnavailableError, match=rf"models\.tts\.voice.*{reason}"):
            asyncio.run(Agent(config).load())
