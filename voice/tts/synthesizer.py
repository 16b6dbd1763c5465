"""``Synthesizer``: one voice shared by every session, run off the event loop.

Synthesis runs on one dedicated thread, a reply's first phrase before anything else waiting
(``Priority``, docs/cpu-budget.md); the caller gets audio a sentence at a time. A cancelled
synthesis stops at the next chunk boundary: the awaiting coroutine returns at once and the
thread drops the rest of the phrase. The voice's onnxruntime runs on the threads the budget
gives it. Fixed phrases that are said when waiting hurts
most (the filler while a tool runs) can be synthesized once, ahead, and kept (``keep``).

Two voices are embedded (docs/voice.md): hibari's ``heart`` (the default: a Kokoro-82M
distillation, ~16 ms of one core for a short phrase) and Piper's ``en_US-joe-medium``; any
Piper ``.onnx`` can be named by its path.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Protocol

import numpy as np

from cadence.core.priority import Priority, PriorityWorker
from cadence.voice.audio.pcm import PCM16
from cadence.voice.model_errors import ModelUnavailableError

HIBARI = "embedded:hibari-heart"
PIPER_JOE = "embedded:en_US-joe-medium"
EMBEDDED_VOICES = {HIBARI, PIPER_JOE}
DEFAULT_VOICE = HIBARI

VOICE_THREADS = {"hibari": 1, "piper": 2}
"""onnxruntime threads per kind of voice when ``threads.tts`` does not say (docs/cpu-budget.md):
Piper's first phrase is faster on two (111 against 146 ms); hibari's is not (its vocoder is
numpy on one thread, and a second onnxruntime thread only waits for the other core)."""

SILENCE_DB = -60.0
"""Samples quieter than this (dBFS) are silence: far below the quietest syllable."""

LEAD_IN_MS = 10.0
"""Silence kept before the first sound of a trimmed phrase, so that it does not start with a
click."""


class Voice(Protocol):
    """What a synthesizer needs of a voice: its rate and text → PCM16 chunks (a sentence
    each), the same audio for the same text when ``varied`` is false."""

    sample_rate: int
    threads: int
    """The intra-op threads its onnxruntime session was given."""

    def synthesize(self, text: str, *, varied: bool = True) -> Iterator[PCM16]: ...


class Synthesizer:
    def __init__(self, voice: Voice, name: str = "") -> None:
        self._voice = voice
        self.name = name
        self.sample_rate = int(voice.sample_rate)
        self.threads = voice.threads
        self._worker = PriorityWorker("tts")
        self._kept: dict[str, list[PCM16]] = {}

    def keep(self, phrases: Iterable[str]) -> None:
        """Synthesize ``phrases`` now (blocking) and keep their audio: from then on each is
        heard without waiting for synthesis. Call it while loading, not on the event loop."""
        for phrase in phrases:
            if phrase.strip() and phrase not in self._kept:
                self._kept[phrase] = list(self.synthesize_blocking(phrase))

    def synthesize_blocking(self, text: str, *, varied: bool = True) -> Iterator[PCM16]:
        """Audio of ``text`` at ``sample_rate``, one chunk per sentence. Voices vary their
        timing, timbre or noise a little each time; ``varied=False`` turns that off, so the
        same text always gives the same audio (a test's caller)."""
        return self._voice.synthesize(text, varied=varied)

    async def synthesize(
        self, text: str, priority: Priority = Priority.URGENT
    ) -> AsyncIterator[PCM16]:
        """Stream ``text``'s audio; each chunk is produced on the synthesis thread, at
        ``priority`` (or was kept)."""
        if (kept := self._kept.get(text)) is not None:
            for audio in kept:
                yield audio
            return
        stop = threading.Event()
        chunks = self.synthesize_blocking(text)

        def next_chunk() -> PCM16 | None:
            return None if stop.is_set() else next(chunks, None)

        try:
            while (chunk := await self._worker.run(next_chunk, priority=priority)) is not None:
                yield chunk
        finally:
            stop.set()


def voice_kind(voice: str) -> str:
    """``hibari`` or ``piper``: which engine speaks ``voice`` (a name or a path)."""
    return "hibari" if voice == HIBARI else "piper"


@functools.cache
def load_synthesizer(voice: str, threads: int | None = None) -> Synthesizer:
    """The process-wide synthesizer for ``voice`` (an embedded name or a Piper ``.onnx``),
    its onnxruntime on ``threads`` threads (``None``: the voice's own, ``VOICE_THREADS``)."""
    key = "models.tts.voice"
    threads = threads or VOICE_THREADS[voice_kind(voice)]
    if voice.startswith("embedded:") and voice not in EMBEDDED_VOICES:
        raise ModelUnavailableError(
            key, voice, f"no such embedded voice ({', '.join(sorted(EMBEDDED_VOICES))})"
        )
    if voice not in EMBEDDED_VOICES:
        model, config = Path(voice), Path(f"{voice}.json")
        if not model.is_file() or not config.is_file():
            raise ModelUnavailableError(
                key, voice, f"a Piper voice needs {model} and {config}; one of them is missing"
            )
    try:
        return Synthesizer(_load_voice(voice, threads), name=voice)
    except Exception as exc:
        raise ModelUnavailableError(key, voice, f"cannot load it ({exc})") from exc


def _load_voice(voice: str, threads: int) -> Voice:
    if voice == HIBARI:
        from cadence.voice.tts.hibari_voice import HibariVoice

        return HibariVoice(threads)
    from cadence.voice.tts.piper_voice import PiperVoice, embedded_joe

    model, config = embedded_joe() if voice == PIPER_JOE else (Path(voice), Path(f"{voice}.json"))
    return PiperVoice(model, config, threads)


def without_leading_silence(pcm: PCM16, sample_rate: int) -> PCM16:
    """``pcm`` from ``LEAD_IN_MS`` before its first sound. Every phrase starts with some
    silence (Piper's 40–60 ms, hibari's 40 once its own 300 are cut): between phrases it is
    the voice's breath, but before the first phrase of an answer it is only more waiting."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 32768.0 * 10 ** (SILENCE_DB / 20))
    if not len(loud):
        return pcm
    return pcm[max(0, int(loud[0]) - round(sample_rate * LEAD_IN_MS / 1000)) :]
