"""Does batching whisper decodes of several sessions pay off on this machine?

Decodes the same short clips one after another and as one batch (encoder alone, then
encoder + greedy decode), with the embedded tiny.en model, and prints wall times.

Measured once for docs/voice.md ("STT") and kept here, beside its figures in this folder's
README (not part of any package or the test suite). Run from the repository root:
python latency_reports/stt-batching/stt_batching.py [MANIFEST]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import ctranslate2
import numpy as np

from cadence.pipeline.config import STTConfig, ThreadsConfig
from cadence.pipeline.model_loading import load_stt
from cadence.tooling.bench.manifest import read_manifest
from cadence.voice.audio import pcm16_to_float
from cadence.voice.audio.wavfile import read_audio

CLIPS = ["sb_spk1_snt1", "sb_spk1_snt2", "sb_spk1_snt3", "sb_spk1_snt4"]
MANIFEST = Path("tests/data/speech/manifest.jsonl")
"""The test clips (relative to the repository root), unless another manifest is named."""


def main(manifest: Path) -> None:
    model = load_stt(STTConfig(), ThreadsConfig())._model  # the shared faster-whisper model
    clips = {c.id: c for c in read_manifest(manifest)}
    features = []
    for clip_id in CLIPS:
        audio = pcm16_to_float(read_audio(clips[clip_id].path, 16000))
        padded = np.pad(audio, (0, 16000 * 30 - len(audio)))  # whisper's 30 s window
        features.append(model.feature_extractor(padded)[:, :3000].astype(np.float32))

    def encode(batch: list[np.ndarray]) -> ctranslate2.StorageView:
        return model.model.encode(ctranslate2.StorageView.from_array(np.stack(batch)), to_cpu=False)

    prompt = [model.hf_tokenizer.token_to_id("<|startoftranscript|>"),
              model.hf_tokenizer.token_to_id("<|notimestamps|>")]  # fmt: skip
    encode(features[:1])  # warm up
    for n in (1, 2, 4):
        start = time.perf_counter()
        for f in features[:n]:
            model.model.generate(encode([f]), [prompt], beam_size=1, max_length=100)
        sequential = time.perf_counter() - start
        start = time.perf_counter()
        model.model.generate(encode(features[:n]), [prompt] * n, beam_size=1, max_length=100)
        batched = time.perf_counter() - start
        print(
            f"{n} sessions: sequential {sequential * 1000:.0f} ms, batched {batched * 1000:.0f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest", type=Path, nargs="?", default=MANIFEST)
    main(parser.parse_args().manifest)
