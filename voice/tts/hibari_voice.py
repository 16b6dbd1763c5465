"""``HibariVoice``: hibari's default voice (``hibari-tts``), a Kokoro-82M ``af_heart``
distillation, as a Cadence voice.

hibari is an int8 ONNX acoustic model with its own grapheme-to-phoneme front end (misaki's
lexicon, no espeak) and a numpy vocoder: a four-word phrase costs ~16 ms of a quiet core (28 on
the shared development machine), against 100–150 for Piper (docs/voice.md). Three things
are adjusted here, each measured on the 30 agent replies of
``tests/data/dialogue/agent_replies.txt``:

* **Edges.** Every sentence hibari synthesizes starts with 270–320 ms of silence and ends with
  ~400 ms: between phrases that would be a 0.7 s gap, twice a speaker's breath. Each chunk is
  cut to ``LEAD_MS`` before its first sound and ``TAIL_MS`` after its last, Piper's own
  margins, so phrases follow each other at the pace Piper had.
* **Level.** hibari speaks at −27 dBFS RMS with peaks of at most 0.48 of full scale, Piper at
  −18 to −21 with peaks at full scale: ``GAIN`` (+6 dB) puts it at Piper's loudness without
  clipping any of the 30 replies — a caller on a phone line hears them at the same level.
* **Noise.** The vocoder adds a random noise component; the same text gives the same audio
  only when that noise is seeded (``varied=False``).

Only the voice inside the wheel is offered: hibari's other voices are downloaded from a hub
on first use, and Cadence never does that.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from cadence.voice.audio.pcm import PCM16

SAMPLE_RATE = 24000
"""hibari's output rate; the TTS stage resamples it to the transport's."""

GAIN = 2.0
"""+6 dB: the loudest of the 30 measured replies peaks at 0.96 of full scale after it."""

LEAD_MS = 40.0
"""Silence kept before a sentence's first sound (Piper's: 35–60 ms)."""

TAIL_MS = 120.0
"""Silence kept after a sentence's last sound (Piper's: ~115–120 ms)."""

SILENCE_DB = -60.0
"""Samples quieter than this (dBFS, after ``GAIN``) are the silence at a sentence's edges."""

SEED = 0
"""The noise seed when the same text must give the same audio."""


class HibariVoice:
    """hibari's embedded ``heart`` voice, its onnxruntime on ``threads`` threads."""

    def __init__(self, threads: int) -> None:
        from hibari import Hibari

        self._tts = Hibari(threads=threads)
        self.sample_rate = SAMPLE_RATE
        self.threads = int(self._tts.sess.get_session_options().intra_op_num_threads)
        if int(self._tts.sample_rate) != SAMPLE_RATE:
            raise ValueError(f"hibari speaks at {self._tts.sample_rate} Hz, not {SAMPLE_RATE}")
        self._tts("Ready.")  # loads the G2P (lexicon, tagger): ~0.3 s, not on the first call

    def synthesize(self, text: str, *, varied: bool = True) -> Iterator[PCM16]:
        """``text``'s audio, one chunk per sentence, each cut to ``LEAD_MS``/``TAIL_MS`` of
        silence at its edges; ``varied=False`` seeds the noise (the same audio every time)."""
        for chunk in self._tts.stream(text, seed=None if varied else SEED):
            if len(pcm := edges_trimmed(_pcm16(chunk))):
                yield pcm


def _pcm16(audio: npt.NDArray[np.float32]) -> PCM16:
    scaled = np.clip(np.rint(audio * (GAIN * 32767.0)), -32768, 32767)
    pcm: PCM16 = scaled.astype(np.int16)
    return pcm


def edges_trimmed(pcm: PCM16, sample_rate: int = SAMPLE_RATE) -> PCM16:
    """``pcm`` from ``LEAD_MS`` before its first sound to ``TAIL_MS`` after its last (empty if
    it is all silence)."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 32768.0 * 10 ** (SILENCE_DB / 20))
    if not len(loud):
        return pcm[:0]
    start = max(0, int(loud[0]) - round(sample_rate * LEAD_MS / 1000))
    end = min(len(pcm), int(loud[-1]) + 1 + round(sample_rate * TAIL_MS / 1000))
    return pcm[start:end]
