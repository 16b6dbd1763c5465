"""Phrase splitting, and phrase-streaming synthesis with the embedded Piper voice."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import numpy as np
import pytest
from collector import Collector
from models import synthesizer, transcriber

from cadence.pipeline.frames import (
    AudioOutFrame,
    EndOfReplyFrame,
    Frame,
    ReplySynthesizedFrame,
    TextPieceFrame,
)
from cadence.pipeline.pipeline import Pipeline
from cadence.pipeline.stage import Stage
from cadence.pipeline.stages import TTSStage
from cadence.voice.audio import PCM16, resample
from cadence.voice.model_errors import ModelUnavailableError
from cadence.voice.stt import word_error_rate
from cadence.voice.tts import PhraseSplitter, load_synthesizer, without_leading_silence


def split(pieces: list[str], first_max_words: int = 6) -> list[str]:
    splitter = PhraseSplitter(first_max_words)
    phrases = [p for piece in pieces for p in splitter.feed(piece)]
    last = splitter.flush()
    return phrases + ([last] if last else [])


def test_the_first_phrase_ends_at_the_first_clause() -> None:
    assert split(["Sure", ", I can", " help with that. ", "Anything else?"]) == [
        "Sure,",
        "I can help with that.",
        "Anything else?",
    ]


def test_the_first_phrase_is_cut_after_a_few_words_without_a_boundary() -> None:
    text = "I found three restaurants in the area that serve Italian food near you"
    assert split([word + " " for word in text.split()], 4)[0] == "I found three restaurants"
    assert " ".join(split([w + " " for w in text.split()], 4)) == text


def test_a_first_phrase_cut_by_its_length_ends_where_a_spoken_phrase_would() -> None:
    # Before the last conjunction, preposition or relative word of its first six words…
    text = "I found ten events for you to pick from this weekend in the city"
    phrases = split([word + " " for word in text.split()])
    assert phrases[0] == "I found ten events"
    assert phrases[1].startswith("for you")
    # …but never fewer than three words: "to" is too early here, so six words it is.
    assert split(["I want to book a table tonight please "])[0] == "I want to book a table"


def test_the_leading_silence_is_trimmed_to_a_short_lead_in() -> None:
    voice = synthesizer()
    audio = np.concatenate(list(voice.synthesize_blocking("I found ten events.")))
    quiet = 32768 * 10 ** (-60 / 20)
    onset = int(np.argmax(np.abs(audio.astype(np.int32)) > quiet))
    assert onset > voice.sample_rate * 0.02  # Piper starts with tens of ms of silence
    trimmed = without_leading_silence(audio, voice.sample_rate)
    lead_in = round(voice.sample_rate * 0.010)
    assert len(audio) - len(trimmed) == onset - lead_in  # 10 ms kept before the first sound
    assert np.array_equal(trimmed, audio[onset - lead_in :])  # nothing else changed
    silence = np.zeros(800, np.int16)
    assert np.array_equal(without_leading_silence(silence, 16000), silence)


def test_later_phrases_keep_short_clauses_together() -> None:
    phrases = split(["Okay. ", "Yes, sir, your card ending in four two is blocked now. Bye."])
    assert phrases == ["Okay.", "Yes, sir, your card ending in four two is blocked now.", "Bye."]


def test_decimals_and_abbreviations_are_not_sentence_ends() -> None:
    phrases = split(["The fare is 3.", "50 dollars to Dr. Smith's office on Main St. today. Ok."])
    assert phrases[0] == "The fare is 3.50 dollars to Dr. Smith's office on Main St. today."


def test_a_boundary_waits_for_the_next_word() -> None:
    splitter = PhraseSplitter(6)
    assert splitter.feed("It costs 3.") == []  # "3." may be "3.50"
    assert splitter.feed("5 dollars. ") == ["It costs 3.5 dollars."]


class Feeder(Stage):
    """Upstream of TTS; can interrupt it like the turn engine does on barge-in."""


def reply(text: str, turn: int = 0) -> list[Frame]:
    pieces: list[Frame] = [
        TextPieceFrame(text=word + " ", at_ms=0, reply_index=turn) for word in text.split()
    ]
    return [*pieces, EndOfReplyFrame(reply_index=turn)]


async def test_tts_to_stt_round_trip_recovers_the_words() -> None:
    sentences = [
        "Your table for two is booked for seven tonight.",
        "I have moved your flight to Tuesday morning, and your seat is by the window.",
        "The total comes to forty two dollars.",
    ]
    collect = Collector()
    pipeline = Pipeline([TTSStage(synthesizer(), output_sample_rate=16000), collect])
    await pipeline.start()
    for turn, sentence in enumerate(sentences):
        for frame in reply(sentence, turn):
            await pipeline.queue(frame)
    await pipeline.end(timeout_s=60)
    hypotheses = []
    for turn in range(len(sentences)):
        audio = [
            f.pcm
            for _, f in collect.timed
            if isinstance(f, AudioOutFrame) and f.reply_index == turn
        ]
        hypotheses.append(transcriber().transcribe_blocking(np.concatenate(audio)).text)
    wer = word_error_rate(sentences, hypotheses)
    print(f"TTS → STT round trip WER {wer:.3f}: {hypotheses}")
    assert wer <= 0.10


async def test_reply_audio_is_framed_at_the_output_rate_and_accounted_for() -> None:
    collect = Collector()
    pipeline = Pipeline([TTSStage(synthesizer(), output_sample_rate=8000), collect])
    await pipeline.start()
    for frame in reply("Hello, thanks for calling. How can I help?"):
        await pipeline.queue(frame)
    await pipeline.end(timeout_s=60)
    frames = collect.frames
    audio = [f for f in frames if isinstance(f, AudioOutFrame)]
    assert {(f.sample_rate, len(f.pcm)) for f in audio} == {(8000, 160)}
    assert [f.timestamp_ms for f in audio] == [20.0 * i for i in range(len(audio))]
    done = next(f for f in frames if isinstance(f, ReplySynthesizedFrame))
    assert done.audio_ms == 20.0 * len(audio)
    assert 1500 < done.audio_ms < 6000
    # The end of the reply follows its audio.
    assert isinstance(frames[-2], ReplySynthesizedFrame)
    assert isinstance(frames[-1], EndOfReplyFrame)


async def test_the_first_phrase_is_heard_before_the_reply_is_finished() -> None:
    collect = Collector()
    pipeline = Pipeline([TTSStage(synthesizer(), output_sample_rate=16000), collect])
    await pipeline.start()
    await pipeline.queue(TextPieceFrame(text="Sure, ", at_ms=0, reply_index=0))
    await pipeline.queue(TextPieceFrame(text="let me check", at_ms=0, reply_index=0))
    await until_audio(collect)  # the reply is not over: no end of it has been sent
    assert collect.timed, "no audio for a complete first phrase while the reply continues"
    await pipeline.queue(EndOfReplyFrame(reply_index=0))
    await pipeline.end(timeout_s=30)


async def test_an_interrupt_stops_synthesis_promptly(monkeypatch: pytest.MonkeyPatch) -> None:
    voice = synthesizer()
    synthesized: list[str] = []
    """The phrase of each chunk of audio the synthesis thread produced, in order."""
    real = voice.synthesize_blocking

    def recording(text: str) -> Iterator[PCM16]:
        for chunk in real(text):
            synthesized.append(text)
            yield chunk

    monkeypatch.setattr(voice, "synthesize_blocking", recording)
    feeder, collect = Feeder(name="feeder"), Collector()
    pipeline = Pipeline([feeder, TTSStage(voice, output_sample_rate=16000), collect])
    await pipeline.start()
    long_reply = " ".join(f"This is sentence number {i} of a very long answer." for i in range(30))
    for frame in reply(long_reply):
        await pipeline.queue(frame)
    await until_audio(collect)
    assert collect.timed, "no audio of the long reply"
    await feeder.interrupt("caller barged in")
    cut, done_before = time.perf_counter(), len(synthesized)
    await asyncio.sleep(0.5)
    late = [f for t, f in collect.timed if t > cut]
    assert late == []
    for frame in reply("Yes?", turn=1):
        await pipeline.queue(frame)
    await pipeline.end(timeout_s=60)
    assert any(isinstance(f, AudioOutFrame) and f.reply_index == 1 for f in collect.frames)
    # The synthesis thread was free again within a phrase: after the interrupt it finished
    # at most the phrase it was in, and then the new reply.
    after = synthesized[done_before:]
    assert len([text for text in after if text.startswith("This is")]) <= 1, after
    assert after[-1] == "Yes?"
    produced = sum(len(f.pcm) for _, f in collect.timed if isinstance(f, AudioOutFrame)) / 16000
    assert produced < 10  # far less than the 30 sentences


async def until_audio(collect: Collector) -> None:
    """Wait for the first frame to reach ``collect``: at most a minute, however busy the
    machine (the caller asserts that it came)."""
    for _ in range(6000):
        if collect.timed:
            return
        await asyncio.sleep(0.01)


def test_a_missing_voice_fails_fast_and_names_the_key() -> None:
    with pytest.raises(ModelUnavailableError, match=r"models\.tts\.voice"):
        load_synthesizer("/nonexistent/voice.onnx")
    with pytest.raises(ModelUnavailableError, match="no such embedded voice"):
        load_synthesizer("embedded:nobody")


def test_resampled_reply_audio_keeps_its_length() -> None:
    audio = np.concatenate(list(synthesizer().synthesize_blocking("Testing one two three.")))
    out = resample(audio, synthesizer().sample_rate, 48000)
    assert abs(len(out) / 48000 - len(audio) / synthesizer().sample_rate) < 0.001


def test_a_pause_speaks_what_is_held_and_the_next_phrase_is_short_again() -> None:
    splitter = PhraseSplitter(first_phrase_max_words=6)
    assert splitter.feed("Let me check that") == []  # no phrase end yet: held
    assert splitter.flush() == "Let me check that"  # a tool runs: said now
    resumed = splitter.feed("Your table is booked for two at seven ")
    assert resumed == ["Your table is booked"]  # cut short, as a first phrase is
