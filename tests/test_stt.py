"""Speech-to-text on the embedded faster-whisper tiny.en, on real speech."""

from __future__ import annotations

import socket
from collections import defaultdict

import numpy as np
import pytest
from collector import Collector
from models import transcriber
from speech_data import clips, with_pause, with_silence

from cadence.core.clock import MonotonicClock
from cadence.pipeline.config import VADConfig
from cadence.pipeline.frames import (
    AudioInFrame,
    EndpointFrame,
    FinalTranscriptFrame,
    Frame,
    PartialTranscriptFrame,
    SpeculationDiscardedFrame,
)
from cadence.pipeline.pipeline import Pipeline
from cadence.pipeline.stages import STTStage, VADStage
from cadence.voice.model_errors import ModelUnavailableError
from cadence.voice.stt import load_transcriber, normalize_transcript, word_error_rate
from cadence.voice.stt.transcriber import WhisperOptions


def test_normalisation_of_case_punctuation_and_numbers() -> None:
    assert normalize_transcript("Hello, World! It's 1,001 -- OK?") == (
        "hello world it's one zero zero one ok"
    )
    assert normalize_transcript("nine oh two one oh") == normalize_transcript("90210")
    assert normalize_transcript("The total is $42.") == "the total is forty two dollars"
    assert normalize_transcript("room 315, code 07") == "room three hundred fifteen code zero seven"


def test_word_error_rate_on_the_16k_set() -> None:
    model = transcriber()
    by_source: dict[str, tuple[list[str], list[str]]] = defaultdict(lambda: ([], []))
    for clip in clips():
        refs, hyps = by_source[clip.source]
        refs.append(clip.text)
        hyps.append(model.transcribe_blocking(clip.audio()).text)
    all_refs = [r for refs, _ in by_source.values() for r in refs]
    all_hyps = [h for _, hyps in by_source.values() for h in hyps]
    for source, (refs, hyps) in sorted(by_source.items()):
        print(f"WER {source}: {word_error_rate(refs, hyps):.3f} ({len(refs)} clips)")
    wer = word_error_rate(all_refs, all_hyps)
    print(f"WER all: {wer:.3f}")
    assert wer <= 0.15


def test_a_sixty_second_monologue_is_transcribed_whole() -> None:
    chosen, audio = [], []
    for clip in clips():
        if clip.id.startswith(("sb_", "osr_", "libri_4507", "ds_arctic")):
            chosen.append(clip.text)
            audio.append(with_silence(clip.audio(), 0, 300))
    pcm = np.concatenate(audio)
    assert len(pcm) / 16000 >= 60
    text = transcriber().transcribe_blocking(pcm).text
    wer = word_error_rate([" ".join(chosen)], [text])
    print(f"60 s monologue ({len(pcm) / 16000:.0f} s): WER {wer:.3f}")
    assert wer <= 0.15
    assert normalize_transcript(text).endswith("come quickly")  # the last clip is not lost


async def stream(
    pcm: np.ndarray, partials_ms: int | None = None, real_time: bool = False
) -> list[Frame]:
    """Stream 20 ms frames through VAD → STT, as fast as possible or at the pace of speech."""
    collect = Collector()
    stt = STTStage(transcriber(), clock=MonotonicClock(), partials_interval_ms=partials_ms)
    pipeline = Pipeline([VADStage(VADConfig()), stt, collect])
    await pipeline.start()
    clock = MonotonicClock()
    for i in range(0, len(pcm), 320):
        if real_time:
            await clock.sleep_until(i / 16)
        await pipeline.queue(
            AudioInFrame(pcm=pcm[i : i + 320], sample_rate=16000, timestamp_ms=i / 16)
        )
    await pipeline.end(timeout_s=60)
    return collect.frames


async def test_the_speculative_decode_is_used_when_the_silence_holds() -> None:
    clip = next(c for c in clips() if c.id == "sb_spk2_snt4")
    frames = await stream(with_silence(clip.audio(), 1000, 1000))
    finals = [f for f in frames if isinstance(f, FinalTranscriptFrame)]
    assert len(finals) == 1
    assert finals[0].speculative
    assert not any(isinstance(f, SpeculationDiscardedFrame) for f in frames)
    assert word_error_rate([clip.text], [finals[0].text]) <= 0.2
    endpoint = next(i for i, f in enumerate(frames) if isinstance(f, EndpointFrame))
    assert frames.index(finals[0]) > endpoint


async def test_the_speculative_decode_is_discarded_when_speech_resumes() -> None:
    clip = next(c for c in clips() if c.id == "sb_spk2_snt4")
    frames = await stream(with_silence(with_pause(clip.audio(), 170), 1000, 1000))
    discarded = [f for f in frames if isinstance(f, SpeculationDiscardedFrame)]
    assert [(d.kind, d.reason) for d in discarded] == [("stt_decode", "speech resumed")]
    finals = [f for f in frames if isinstance(f, FinalTranscriptFrame)]
    assert len(finals) == 1
    # The whole sentence, both sides of the pause (the pause is cut into a word, "coat").
    assert normalize_transcript(finals[0].text).endswith("before you go out")
    assert word_error_rate([clip.text], [finals[0].text]) <= 0.3


async def test_partial_transcripts_caption_a_long_utterance() -> None:
    clip = next(c for c in clips() if c.id == "ljspeech_LJ050-0131")
    frames = await stream(with_silence(clip.audio(), 500, 1000), partials_ms=1000, real_time=True)
    partials = [f.text for f in frames if isinstance(f, PartialTranscriptFrame)]
    assert partials
    # A caption of the first second already has the first word right.
    assert normalize_transcript(partials[0]).split()[0] == "unless"
    assert len(partials) >= 2


def test_a_missing_model_fails_fast_and_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # Fast: refused from what is on the disk, without waiting on a network (the model hub).
    connections: list[object] = []

    def no_network(self: socket.socket, address: object) -> None:
        connections.append(address)
        raise OSError("the test allows no connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket.socket, "connect_ex", no_network)
    with pytest.raises(ModelUnavailableError, match=r"models\.stt\.model"):
        load_transcriber(WhisperOptions(model="/nonexistent/whisper-model"))
    with pytest.raises(ModelUnavailableError, match="no such embedded model"):
        load_transcriber(WhisperOptions(model="embedded:large"))
    assert connections == []


def test_a_noise_blip_is_no_words() -> None:
    """A click where silence meets a line's noise floor must not become "you you you"."""
    rng = np.random.default_rng(1)
    blip = rng.normal(0, 800, 1600).astype(np.int16)  # 100 ms of hiss
    audio = np.concatenate([np.zeros(8000, np.int16), blip, np.zeros(4000, np.int16)])
    assert transcriber().transcribe_blocking(audio).text == ""
